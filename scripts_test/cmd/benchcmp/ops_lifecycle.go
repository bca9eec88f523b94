package main

import (
	"context"
	"fmt"
	"time"

	"github.com/goliatone/go-job/queue/idempotency"
	gojobredis "github.com/goliatone/go-job/queue/idempotency/redis"
	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/adapters/gojob"
	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
)

// The records lifecycle go-job's worker drives per message, with its
// idempotency store: Acquire a new key (24 h TTL), Update it to completed
// with a 256-byte result, then Acquire it again as a duplicate delivery
// arrives (which must see it completed). One op = one lifecycle.
const lifecycleTTL = 24 * time.Hour

// roleGoJob is go-job's own Redis store (queue/idempotency/redis): plain
// SET NX / GET / SET of a JSON string, over the same rueidis client.
const roleGoJob = "gojob"

func opLifecycle() *operation {
	completed := idempotency.StatusCompleted
	return &operation{
		name:  "Lifecycle",
		batch: 1,
		about: "go-job's per-message records lifecycle: Acquire new (TTL 24h), Update to completed + 256-byte result, Acquire the duplicate; ops = lifecycles",
		variants: []variant{
			{name: "redisonce Records through adapters/gojob", role: roleStore, setup: func(_ context.Context, e *env, rc rueidis.Client) (callFunc, error) {
				// go-job's idempotency.Store over store.Records (the adapter
				// module): AcquireWith{TTL}, an unfenced Update of status and
				// payload, AcquireWith{TTL}.
				gs := gojob.NewStore(must.Store(store.NewRecords(rc)))
				return lifecycle(e, gs, completed), nil
			}},
			{name: "go-job queue/idempotency/redis", role: roleGoJob, setup: func(_ context.Context, e *env, rc rueidis.Client) (callFunc, error) {
				return lifecycle(e, gojobredis.NewStore(gojobClient{rc}), completed), nil
			}},
		},
	}
}

// lifecycle is one message's lifecycle through go-job's idempotency.Store.
func lifecycle(e *env, gs idempotency.Store, completed idempotency.Status) callFunc {
	return func(ctx context.Context, i int) error {
		key := e.ids[i]
		if _, ok, err := gs.Acquire(ctx, key, lifecycleTTL); err != nil || !ok {
			return lifecycleErr("first acquire", ok, err)
		}
		p := recordResult
		if err := gs.Update(ctx, key, idempotency.Update{Status: &completed, Payload: &p}); err != nil {
			return err
		}
		r, ok, err := gs.Acquire(ctx, key, lifecycleTTL)
		if err != nil || ok || r.Status != idempotency.StatusCompleted {
			return lifecycleErr("duplicate acquire", !ok, err)
		}
		return nil
	}
}

func lifecycleErr(step string, ok bool, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %w", step, err)
	}
	return fmt.Errorf("%s: unexpected outcome (ok %v)", step, ok)
}

// gojobClient is go-job's redis.Client over rueidis, the same transport the
// redisonce store uses.
type gojobClient struct{ c rueidis.Client }

func (g gojobClient) Get(ctx context.Context, key string) (string, error) {
	v, err := g.c.Do(ctx, g.c.B().Get().Key(key).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return "", nil
	}
	return v, err
}

func (g gojobClient) Set(ctx context.Context, key, value string, ttl time.Duration) error {
	if ttl > 0 {
		return g.c.Do(ctx, g.c.B().Set().Key(key).Value(value).PxMilliseconds(ttl.Milliseconds()).Build()).Error()
	}
	return g.c.Do(ctx, g.c.B().Set().Key(key).Value(value).Build()).Error()
}

func (g gojobClient) SetNX(ctx context.Context, key, value string, ttl time.Duration) (bool, error) {
	var cmd rueidis.Completed
	if ttl > 0 {
		cmd = g.c.B().Set().Key(key).Value(value).Nx().PxMilliseconds(ttl.Milliseconds()).Build()
	} else {
		cmd = g.c.B().Set().Key(key).Value(value).Nx().Build()
	}
	err := g.c.Do(ctx, cmd).Error()
	if rueidis.IsRedisNil(err) {
		return false, nil
	}
	return err == nil, err
}

func (g gojobClient) Del(ctx context.Context, key string) error {
	return g.c.Do(ctx, g.c.B().Del().Key(key).Build()).Error()
}
