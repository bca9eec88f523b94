package store

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestInFlightError(t *testing.T) {
	e := &inFlightError{op: "do", id: "m1", left: 1500 * time.Millisecond}
	wrapped := fmt.Errorf("consumer: %w", e)
	if !errors.Is(e, ErrInFlight) || !errors.Is(wrapped, ErrInFlight) {
		t.Error("errors.Is(*inFlightError, ErrInFlight) = false")
	}
	if errors.Is(e, ErrLeaseLost) {
		t.Error("an *inFlightError matches ErrLeaseLost")
	}
	if got, want := e.Error(), `redisonce: do "m1": in flight (lease ends in 1.5s)`; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
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
		{"unknown time", &inFlightError{op: "do", id: "k"}, 0, false},
		{"the bare sentinel", ErrInFlight, 0, false},
		{"another error", ErrLeaseLost, 0, false},
		{"nil", nil, 0, false},
	} {
		d, ok := RetryAfter(tc.err)
		if d != tc.want || ok != tc.ok {
			t.Errorf("%s: RetryAfter = %v, %v; want %v, %v", tc.name, d, ok, tc.want, tc.ok)
		}
	}
	if got, want := (&inFlightError{op: "do", id: "k"}).Error(), `redisonce: do "k": in flight`; got != want {
		t.Errorf("Error() without a lease = %q, want %q", got, want)
	}
}
