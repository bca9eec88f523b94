package watermill

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	"github.com/redisonce/redisonce/store"
)

// DefaultLease is the lease of Middleware unless WithLease says otherwise.
const DefaultLease = 30 * time.Second

// ExpiringKeyRepository is a watermill middleware.ExpiringKeyRepository over a
// claims store, so that watermill's own Deduplicator keeps its keys in Redis,
// shared by every instance of the service:
//
//	d := &middleware.Deduplicator{Repository: watermill.NewExpiringKeyRepository(claims)}
//
// The window is the store's TTL (store.WithTTL): a key is remembered that
// long after it was first seen. Without a TTL it is remembered forever.
//
// The Deduplicator marks a message as seen before the handler runs: a handler
// that then fails, or a process that dies in it, loses the message, since its
// redelivery is dropped as a duplicate. For effects, use Middleware.
type ExpiringKeyRepository struct {
	claims store.ClaimStore
}

var _ middleware.ExpiringKeyRepository = (*ExpiringKeyRepository)(nil)

// NewExpiringKeyRepository returns a repository over claims (store.Claims on
// Redis, or store.MemoryClaims in a test).
func NewExpiringKeyRepository(claims store.ClaimStore) *ExpiringKeyRepository {
	return &ExpiringKeyRepository{claims: claims}
}

// IsDuplicate reports whether key was seen before (within the store's TTL),
// and marks it seen: the first caller of a key gets false, every other true
// (store.ClaimStore's Claim).
func (r *ExpiringKeyRepository) IsDuplicate(ctx context.Context, key string) (bool, error) {
	claimed, err := r.claims.Claim(ctx, key)
	if err != nil {
		return false, err
	}
	return !claimed, nil
}

// Option configures Middleware.
type Option func(*config)

type config struct {
	lease time.Duration
	id    func(*message.Message) (string, error)
	err   error
}

// WithLease sets the lease Claims.Do takes on a message id (default
// DefaultLease, 30s): how long a message stays locked after its consumer
// died before a redelivery runs it. A live handler keeps its lease however
// long it runs. It must be > 0.
func WithLease(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.err = fmt.Errorf("redisonce/watermill: WithLease(%v): %w: the lease must be > 0", d, store.ErrInvalidArgument)
			return
		}
		c.lease = d
	}
}

// WithMetadataID takes a message's id from its metadata field key instead of
// its UUID: for producers that set a business id (an order number, an
// idempotency key) there, or that publish a message again under a new UUID.
// A message without the field fails with store.ErrInvalidArgument.
func WithMetadataID(key string) Option {
	return WithID(func(msg *message.Message) (string, error) {
		id := msg.Metadata.Get(key)
		if id == "" {
			return "", fmt.Errorf("redisonce/watermill: message %s has no metadata %q: %w", msg.UUID, key, store.ErrInvalidArgument)
		}
		return id, nil
	})
}

// WithID takes a message's id from f (default: the message's UUID).
func WithID(f func(*message.Message) (string, error)) Option {
	return func(c *config) {
		if f == nil {
			c.err = fmt.Errorf("redisonce/watermill: WithID(nil): %w", store.ErrInvalidArgument)
			return
		}
		c.id = f
	}
}

// Middleware returns a router middleware that runs the handler once per
// message id across every consumer, through claims.Do:
//
//   - first delivery: the handler runs under a lease that is kept alive while
//     it runs; on success the id is committed and the message acked (the
//     router publishes what the handler returned);
//   - the handler fails (or panics): the id is released and the handler's
//     error returned, so the router nacks and the redelivery runs it again;
//   - a duplicate of a processed message: the handler does not run, and the
//     message is acked;
//   - a duplicate while another consumer runs it: the handler does not run;
//     the middleware waits for the holder's lease time left (RetryAfter of the
//     in-flight error, at most the lease; the lease when the store does not
//     say), then returns the in-flight error, so the router nacks it and the
//     redelivery finds the outcome instead of spinning;
//   - the handler succeeded but the commit failed (the id taken by another
//     consumer after the lease ran out while the extensions failed,
//     store.ErrLeaseLost; or the store unreachable): the message is acked,
//     since the effect happened and a nack would run it again (the store's
//     observer, store.WithObserver, reports the failed commit);
//   - the id cannot be read, or the store fails: the error is returned and the
//     message nacked.
//
// The messages the handler returns are published by the router after the
// commit: a process that dies between the two loses them. Publish them from
// inside the handler, or through the Outbox, when they must not be lost.
//
// An invalid option makes every message fail with it.
func Middleware(claims store.ClaimStore, opts ...Option) message.HandlerMiddleware {
	c := config{lease: DefaultLease, id: func(msg *message.Message) (string, error) { return msg.UUID, nil }}
	for _, o := range opts {
		o(&c)
	}
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			if c.err != nil {
				return nil, c.err
			}
			id, err := c.id(msg)
			if err != nil {
				return nil, err
			}
			var out []*message.Message
			handled := false // the handler returned nil
			ctx := msg.Context()
			ran, err := claims.Do(ctx, id, c.lease, func(ctx context.Context) error {
				// The handler sees the lease's context (cancelled if the
				// lease is lost) and the Lease in it.
				msg.SetContext(ctx)
				var herr error
				out, herr = h(msg)
				handled = herr == nil
				return herr
			})
			msg.SetContext(ctx)
			switch {
			case err == nil:
				return out, nil
			case handled:
				// The effect happened; only the commit failed (the id taken
				// by another consumer, or the store unreachable). A nack would
				// run it again: ack it.
				return out, nil
			case !ran && errors.Is(err, store.ErrInFlight):
				wait(ctx, inFlightDelay(err, c.lease))
				return nil, err
			default:
				return nil, err
			}
		}
	}
}

// inFlightDelay is how long to hold an in-flight duplicate before nacking
// it: the holder's lease time left when the store says (an in-flight error
// with RetryAfter), else the lease, and never more than the lease.
func inFlightDelay(err error, lease time.Duration) time.Duration {
	var ra interface{ RetryAfter() time.Duration }
	if errors.As(err, &ra) {
		if d := ra.RetryAfter(); d > 0 && d < lease {
			return d
		}
	}
	return lease
}

// wait sleeps for d or until ctx is done.
func wait(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
