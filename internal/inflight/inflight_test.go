package inflight_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redisonce/redisonce/internal/inflight"
	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
)

// Delay: the holder's time left plus the margin when the error says, the
// fallback otherwise (an error that does not say, a wrapped ErrInFlight
// without a time, nil). The in-flight error is a real one: a second Do on
// an id the first holds.
func TestDelay(t *testing.T) {
	const fallback = 30 * time.Second
	claims := must.Store(store.NewMemoryClaims())
	ctx := context.Background()
	var inFlight error
	_, err := claims.Do(ctx, "m", 2*time.Second, func(ctx context.Context) error {
		_, inFlight = claims.Do(ctx, "m", time.Second, func(context.Context) error { return nil })
		return nil
	})
	if err != nil || !errors.Is(inFlight, store.ErrInFlight) {
		t.Fatalf("Do = %v, the nested Do = %v; want nil and ErrInFlight", err, inFlight)
	}
	left, ok := store.RetryAfter(inFlight)
	if !ok || left <= 0 || left > 2*time.Second {
		t.Fatalf("RetryAfter = %v, %v; want (0, 2s], true", left, ok)
	}
	for _, tc := range []struct {
		err  error
		want time.Duration
	}{
		{inFlight, left + inflight.Margin},
		{fmt.Errorf("wrapped: %w", inFlight), left + inflight.Margin},
		{fmt.Errorf("x: %w", store.ErrInFlight), fallback},
		{errors.New("other"), fallback},
		{nil, fallback},
	} {
		if got := inflight.Delay(tc.err, fallback); got != tc.want {
			t.Errorf("Delay(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
