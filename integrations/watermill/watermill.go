package watermill

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	"github.com/redisonce/redisonce/internal/delivery"
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
	claims *store.Claims
}

var _ middleware.ExpiringKeyRepository = (*ExpiringKeyRepository)(nil)

// NewExpiringKeyRepository returns a repository over claims (store.Claims on
// Redis, or store.NewMemoryClaims in a test). On nil claims every IsDuplicate
// gives store.ErrInvalidArgument.
func NewExpiringKeyRepository(claims *store.Claims) *ExpiringKeyRepository {
	return &ExpiringKeyRepository{claims: claims}
}

// IsDuplicate reports whether key was seen before (within the store's TTL),
// and marks it seen: the first caller of a key gets false, every other true
// (*store.Claims's Claim).
func (r *ExpiringKeyRepository) IsDuplicate(ctx context.Context, key string) (bool, error) {
	if r == nil || r.claims == nil {
		return false, fmt.Errorf("redisonce/watermill: IsDuplicate on a repository without claims: %w", store.ErrInvalidArgument)
	}
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
//     it runs; on success the id is committed and the message acked. When the
//     handler returns messages, the router publishes them while the lease is
//     still held, and the id is committed once the router acks the input: a
//     failed publish nacks it, which releases the id, and the redelivery runs
//     the handler and publishes again (at least once; a process that dies
//     between the publish and the commit also runs it again);
//   - the handler fails: the id is released and the handler's error
//     returned, so the router nacks and the redelivery runs it again; an
//     error marked store.Permanent too (route it aside with watermill's
//     PoisonQueueWithFilter and store.IsPermanent);
//   - the handler panics: the panic is recovered as its error (no Recoverer
//     needed), and it goes as a failure;
//   - the router closes (the message's context cancelled) while the handler
//     runs: the id is released and the message nacked;
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
// An invalid option, a nil option or nil claims makes every message fail
// with store.ErrInvalidArgument (and a nil handler or message too), before
// anything is claimed.
func Middleware(claims *store.Claims, opts ...Option) message.HandlerMiddleware {
	c := config{lease: DefaultLease, id: func(msg *message.Message) (string, error) { return msg.UUID, nil }}
	for _, o := range opts {
		if o == nil {
			c.err = fmt.Errorf("redisonce/watermill: nil option: %w", store.ErrInvalidArgument)
			continue
		}
		o(&c)
	}
	if claims == nil && c.err == nil {
		c.err = fmt.Errorf("redisonce/watermill: Middleware(nil claims): %w", store.ErrInvalidArgument)
	}
	// The router hands a middleware one message per call: one Batch for
	// every call, so that the claims, extensions and commits of the messages
	// handled at once (several handlers, subscribers or routers on one
	// Claims) are gathered into one script call each.
	var cl delivery.Claimer = claims
	if claims != nil && c.err == nil {
		if b, err := claims.Batch(context.Background(), nil, c.lease); err == nil {
			cl = delivery.Batched{B: b}
		}
	}
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			switch {
			case c.err != nil:
				return nil, c.err
			case h == nil:
				return nil, fmt.Errorf("redisonce/watermill: nil handler: %w", store.ErrInvalidArgument)
			case msg == nil:
				return nil, fmt.Errorf("redisonce/watermill: nil message: %w", store.ErrInvalidArgument)
			}
			id, err := c.id(msg)
			if err != nil {
				return nil, err
			}
			ctx := msg.Context()
			// Do runs in a goroutine of its own so that, when the handler
			// returns messages, the middleware can hand them to the router
			// while Do still holds the lease: the commit waits for the
			// router's ack, which follows their publication.
			handoff := make(chan []*message.Message, 1)
			result := make(chan doResult, 1)
			go func() {
				var r doResult
				r.Result = delivery.Do(ctx, cl, id, c.lease, func(lctx context.Context) error {
					// The handler sees the lease's context (cancelled if the
					// lease is lost) and the Lease in it.
					msg.SetContext(lctx)
					out, herr := func() ([]*message.Message, error) {
						defer msg.SetContext(ctx)
						return h(msg)
					}()
					if herr != nil {
						return herr
					}
					if len(out) == 0 {
						return nil
					}
					handoff <- out
					return awaitAck(lctx, msg)
				})
				result <- r
			}()
			select {
			case out := <-handoff:
				return out, nil
			case r := <-result:
				select {
				case out := <-handoff:
					// Handed over, then Do ended before the ack (the lease's
					// context ended: the router closing, or the lease lost)
					// and released the id: nack, so the redelivery runs it.
					if r.Err == nil {
						return out, nil
					}
					return nil, r.Err
				default:
				}
				switch r.Row {
				case delivery.Done, delivery.Duplicate, delivery.CommitFailed:
					// CommitFailed: the effect happened; only the commit
					// failed (the id taken by another consumer, or the store
					// unreachable). A nack would run it again: ack it.
					return nil, nil
				case delivery.InFlight:
					wait(ctx, min(r.RedeliverAfter, c.lease))
					return nil, r.Err
				default:
					// Failed (a panic too), Permanent, Shutdown, StoreError:
					// the id is released (or was never taken); nack.
					return nil, r.Err
				}
			}
		}
	}
}

// doResult is what the goroutine running Do reports.
type doResult struct{ delivery.Result }

// errNacked is the handler's outcome when the router nacked the message
// after the handler returned messages (their publication failed): the id is
// released, and the redelivery runs the handler again.
var errNacked = errors.New("redisonce/watermill: the router nacked the message (publishing its outputs failed)")

// awaitAck waits for the router to ack msg (nil: commit) or nack it
// (errNacked: release). An ack wins over the lease's context ending at the
// same time (GoChannel cancels a message's context right after its ack).
func awaitAck(lctx context.Context, msg *message.Message) error {
	select {
	case <-msg.Acked():
		return nil
	case <-msg.Nacked():
		return errNacked
	case <-lctx.Done():
		select {
		case <-msg.Acked():
			return nil
		default:
			return context.Cause(lctx)
		}
	}
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
