package store

import (
	"context"
	"time"
)

// Wrap adapts a ClaimStore's Do to a message handler: the returned handler runs h
// at most once per id(msg) and is safe to call on every delivery.
//
// It returns nil for a duplicate of a processed message (ack it), the store's
// ErrInFlight while another consumer holds the message (nack it so it is
// redelivered later), and h's error when h fails (the claim is released so the
// redelivery retries).
func Wrap[M any](s ClaimStore, lease time.Duration, id func(M) string, h func(context.Context, M) error) func(context.Context, M) error {
	return func(ctx context.Context, msg M) error {
		_, err := s.Do(ctx, id(msg), lease, func(ctx context.Context) error { return h(ctx, msg) })
		return err
	}
}
