package asynq

import (
	"context"
	"fmt"

	"github.com/hibiken/asynq"

	"github.com/redisonce/redisonce/store"
)

// WithCoalesce makes Middleware coalesce tasks by key(ctx, t) instead of
// running the handler once per task id: each task triggers its key on co with
// the task's payload, and co's fn runs once per burst of a key's
// tasks with the latest payload, never while another run of the key goes on,
// in whatever worker or process (see store.Coalescer). The wrapped handler is
// not called: to run it, make co's fn call it, with
// asynq.NewTask(<type>, payload).
//
//	trigger outcome                       the middleware returns   the task
//	ran co's fn, which returned nil       nil                      completes
//	kept as the key's next                nil                      completes: a run that
//	                                                                 starts later covers it
//	ran co's fn, which failed             nil                      completes: co keeps the
//	                                                                 payload and retries it
//	                                                                 (not after a
//	                                                                 store.Permanent error)
//	a store error (the trigger may not    the error                retried by asynq
//	  be kept: ErrNotReplicated too)
//	key's error, or an empty key          the error                retried by asynq
//
// Default: no coalescing (claims may then be nil).
func WithCoalesce(co *store.Coalescer, key func(ctx context.Context, t *asynq.Task) (string, error)) Option {
	return func(c *config) {
		if co == nil || key == nil {
			c.err = fmt.Errorf("redisonce/asynq: WithCoalesce: %w: a nil Coalescer or key function", store.ErrInvalidArgument)
			return
		}
		c.co, c.coKey = co, key
	}
}

// coalesce triggers t's key on c.co.
func (c *config) coalesce(ctx context.Context, t *asynq.Task) error {
	key, err := c.coKey(ctx, t)
	if err == nil && key == "" {
		err = fmt.Errorf("redisonce/asynq: an empty coalescing key: %w", store.ErrInvalidArgument)
	}
	if err != nil {
		return err
	}
	ran, err := c.co.Trigger(ctx, key, t.Payload())
	if err == nil || ran {
		return nil
	}
	return err
}
