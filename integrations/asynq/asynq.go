package asynq

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"

	"github.com/redisonce/redisonce/internal/delivery"
	"github.com/redisonce/redisonce/store"
)

// DefaultLease is the lease of Middleware unless WithLease says otherwise.
const DefaultLease = 30 * time.Second

// Option configures Middleware.
type Option func(*config)

type config struct {
	lease time.Duration
	id    func(context.Context, *asynq.Task) (string, error)
	err   error
	co    *store.Coalescer // WithCoalesce
	coKey func(context.Context, *asynq.Task) (string, error)
}

// WithLease sets the lease Claims.Do takes on a task id (default
// DefaultLease, 30s): how long a task stays locked after its worker died
// before a retry runs it. A live handler keeps its lease however long it
// runs. It must be > 0.
func WithLease(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.err = fmt.Errorf("redisonce/asynq: WithLease(%v): %w: the lease must be > 0", d, store.ErrInvalidArgument)
			return
		}
		c.lease = d
	}
}

// WithID takes a task's id from f instead of its asynq task id: for
// producers that may enqueue the same job twice under two task ids (derive
// the id from the payload: an order number, an idempotency key).
func WithID(f func(ctx context.Context, t *asynq.Task) (string, error)) Option {
	return func(c *config) {
		if f == nil {
			c.err = fmt.Errorf("redisonce/asynq: WithID(nil): %w", store.ErrInvalidArgument)
			return
		}
		c.id = f
	}
}

// taskID is the default id: the task's asynq id (asynq.TaskID when the
// producer set one), which a retry keeps.
func taskID(ctx context.Context, _ *asynq.Task) (string, error) {
	id, ok := asynq.GetTaskID(ctx)
	if !ok || id == "" {
		return "", fmt.Errorf("redisonce/asynq: no task id in the context (not called by an asynq server?): %w", store.ErrInvalidArgument)
	}
	return id, nil
}

// Middleware returns an asynq middleware that runs each task's handler once
// per task id across every worker, through claims.Do:
//
//   - first run: the handler runs under a lease that is kept alive while it
//     runs; on success the id is committed and the task completes;
//   - the handler fails: the id is released and the handler's error
//     returned, so asynq retries the task (a failure, counted);
//   - the handler panics: the panic is recovered as its error (the panic's
//     value in its text), and it goes as a failure;
//   - the handler fails with an error marked store.Permanent: the id is
//     released and the error returned wrapping asynq.SkipRetry, so the task
//     is archived (asynq's dead letter) without a retry;
//   - the server shuts down while the handler runs (its context cancelled):
//     the id is released and the context's error returned; asynq puts the
//     task back for another worker;
//   - a task whose id was processed: the handler does not run; nil, the task
//     completes;
//   - a task another worker is running (a retry racing a worker that is slow
//     or partitioned): the handler does not run; the store's in-flight error
//     (store.ErrInFlight), which IsFailure does not count and RetryDelay
//     retries after the holder's lease time left (store.RetryAfter);
//   - the handler succeeded but the commit failed (the id taken by another
//     worker after the lease ran out, or the store unreachable): nil, since
//     the effect happened and a retry would run it again;
//   - a worker killed in the handler stops extending the lease; asynq's
//     recoverer retries the task once its own lease has expired, and that run
//     finds the id free (or in flight until the lease runs out).
//
// Give the server IsFailure and RetryDelay too, or an in-flight task burns
// one of its retries and waits asynq's exponential backoff:
//
//	srv := asynq.NewServer(redis, asynq.Config{
//		IsFailure:      asynqonce.IsFailure,
//		RetryDelayFunc: asynqonce.RetryDelay(nil),
//	})
//	mux := asynq.NewServeMux()
//	mux.Use(asynqonce.Middleware(claims))
//
// An invalid option, a nil option or nil claims makes every task fail with
// store.ErrInvalidArgument (and a nil handler, context or task too), before
// anything is claimed.
func Middleware(claims *store.Claims, opts ...Option) asynq.MiddlewareFunc {
	c := config{lease: DefaultLease, id: taskID}
	for _, o := range opts {
		if o == nil {
			c.err = fmt.Errorf("redisonce/asynq: nil option: %w", store.ErrInvalidArgument)
			continue
		}
		o(&c)
	}
	if claims == nil && c.co == nil && c.err == nil {
		c.err = fmt.Errorf("redisonce/asynq: Middleware(nil claims): %w", store.ErrInvalidArgument)
	}
	// asynq hands a middleware one task per call: one Batch for every call,
	// so that the claims, extensions and commits of the tasks that run at
	// once (Config.Concurrency) are gathered into one script call each.
	var cl delivery.Claimer = claims
	if claims != nil && c.err == nil {
		if b, err := claims.Batch(context.Background(), nil, c.lease); err == nil {
			cl = delivery.Batched{B: b}
		}
	}
	return func(h asynq.Handler) asynq.Handler {
		return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			switch {
			case c.err != nil:
				return c.err
			case h == nil:
				return fmt.Errorf("redisonce/asynq: nil handler: %w", store.ErrInvalidArgument)
			case ctx == nil || t == nil:
				return fmt.Errorf("redisonce/asynq: nil context or task: %w", store.ErrInvalidArgument)
			case c.co != nil:
				return c.coalesce(ctx, t)
			}
			id, err := c.id(ctx, t)
			if err != nil {
				return err
			}
			r := delivery.Do(ctx, cl, id, c.lease, func(ctx context.Context) error { return h.ProcessTask(ctx, t) })
			switch r.Row {
			case delivery.Done, delivery.Duplicate, delivery.CommitFailed:
				// CommitFailed: the effect happened; a retry would run it
				// again.
				return nil
			case delivery.InFlight:
				return r.Err
			case delivery.Permanent:
				// asynq's dead letter: archived, never retried.
				return errors.Join(r.Err, asynq.SkipRetry)
			default:
				return r.Err
			}
		})
	}
}

// IsFailure is an asynq.Config.IsFailure that counts every error as a
// failure except an in-flight task (an error wrapping store.ErrInFlight):
// that one is retried without using up
// one of the task's retries or counting in the queue's failure stats.
func IsFailure(err error) bool {
	return err != nil && !errors.Is(err, store.ErrInFlight)
}

// RetryDelay returns an asynq.Config.RetryDelayFunc that retries an
// in-flight task after store.RetryAfter (the holder's lease time left) plus
// one second, and every other error after fallback's delay (nil:
// asynq.DefaultRetryDelayFunc, exponential). The second is there because
// asynq stores a retry time in whole Unix seconds, truncated: without it the
// retry could come up to a second before the holder's lease runs out. asynq
// moves due retries every Config.DelayedTaskCheckInterval (default 5s), which
// adds to the delay.
func RetryDelay(fallback asynq.RetryDelayFunc) asynq.RetryDelayFunc {
	if fallback == nil {
		fallback = asynq.DefaultRetryDelayFunc
	}
	return func(n int, err error, t *asynq.Task) time.Duration {
		if d, ok := store.RetryAfter(err); ok {
			return d + time.Second
		}
		return fallback(n, err, t)
	}
}
