// Package inflight holds what the integrations of this repository share
// about a message whose id another consumer holds (store.ErrInFlight).
package inflight

import (
	"time"

	"github.com/redisonce/redisonce/store"
)

// Margin is what Delay adds to the holder's time left, so a redelivery
// lands after that lease can have run out rather than a hair before it.
const Margin = 10 * time.Millisecond

// Delay is how long to hold back a delivery whose id another caller holds:
// store.RetryAfter(err) plus Margin; fallback (a consumer's own lease, say)
// when err does not say. A live holder keeps extending its lease, so each
// redelivery meanwhile is held back again for about a lease: redeliveries
// of an in-flight message are paced by the lease, not by a broker's retry
// rate.
func Delay(err error, fallback time.Duration) time.Duration {
	if d, ok := store.RetryAfter(err); ok {
		return d + Margin
	}
	return fallback
}
