package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redisonce/redisonce/store"
)

func TestInFlightError(t *testing.T) {
	e := &store.InFlightError{Op: "do", ID: "m1", Left: 1500 * time.Millisecond}
	wrapped := fmt.Errorf("consumer: %w", e)
	if !errors.Is(e, store.ErrInFlight) || !errors.Is(wrapped, store.ErrInFlight) {
		t.Error("errors.Is(*InFlightError, ErrInFlight) = false")
	}
	if errors.Is(e, store.ErrLeaseLost) {
		t.Error("an *InFlightError matches ErrLeaseLost")
	}
	if got, want := e.Error(), `redisonce: do "m1": in flight (lease ends in 1.5s)`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if got := e.RetryAfter(); got != 1500*time.Millisecond {
		t.Errorf("RetryAfter() = %v, want 1.5s", got)
	}
	for _, tc := range []struct {
		name string
		err  error
		want time.Duration
		ok   bool
	}{
		{"the error", e, 1500 * time.Millisecond, true},
		{"wrapped", wrapped, 1500 * time.Millisecond, true},
		{"joined", errors.Join(errors.New("x"), e), 1500 * time.Millisecond, true},
		{"unknown time", &store.InFlightError{Op: "do", ID: "k"}, 0, false},
		{"the bare sentinel", store.ErrInFlight, 0, false},
		{"another error", store.ErrLeaseLost, 0, false},
		{"nil", nil, 0, false},
	} {
		d, ok := store.RetryAfter(tc.err)
		if d != tc.want || ok != tc.ok {
			t.Errorf("%s: RetryAfter = %v, %v; want %v, %v", tc.name, d, ok, tc.want, tc.ok)
		}
	}
	if got, want := (&store.InFlightError{Op: "do", ID: "k"}).Error(), `redisonce: do "k": in flight`; got != want {
		t.Errorf("Error() without a lease = %q, want %q", got, want)
	}
}

func TestIsPermanent(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"permanent", store.Permanent(boom), true},
		{"wrapped", fmt.Errorf("charge: %w", store.Permanent(boom)), true},
		{"joined", errors.Join(errors.New("other"), store.Permanent(boom)), true},
		{"plain", boom, false},
		{"nil", nil, false},
		{"retryable over permanent", store.Retryable(store.Permanent(boom)), false},
		{"a context error", store.Permanent(context.Canceled), false},
	} {
		if got := store.IsPermanent(tc.err); got != tc.want {
			t.Errorf("%s: IsPermanent = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// RedeliverAfter: the holder's time left plus the margin when the error says,
// the fallback otherwise (an error that does not say, a wrapped ErrInFlight
// without a time, nil).
func TestRedeliverAfter(t *testing.T) {
	const fallback = 30 * time.Second
	left := &store.InFlightError{Op: "do", ID: "m", Left: 1500 * time.Millisecond}
	for _, tc := range []struct {
		err  error
		want time.Duration
	}{
		{left, 1510 * time.Millisecond},
		{fmt.Errorf("wrapped: %w", left), 1510 * time.Millisecond},
		{&store.InFlightError{Op: "do", ID: "m"}, fallback},
		{fmt.Errorf("x: %w", store.ErrInFlight), fallback},
		{errors.New("other"), fallback},
		{nil, fallback},
	} {
		if got := store.RedeliverAfter(tc.err, fallback); got != tc.want {
			t.Errorf("RedeliverAfter(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
