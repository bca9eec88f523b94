package store

import (
	"context"
	"time"
)

// core is what every store keeps beside its backend: the events it reports.
// Validation and events live here and in the public types, once; a backend
// (Redis or memory) only runs the operation.
type core struct {
	ev events
}

func newCore(store string, cfg config, scripts bool) core {
	ev := newEvents(store, cfg)
	ev.scripts = scripts
	return core{ev: ev}
}

// check validates the context and the id before anything is sent.
func (c *core) check(ctx context.Context, op, id string) error {
	return checkID(ctx, op, id)
}

// checkBatch validates the context of a batch with no ids, which sends
// nothing.
func (c *core) checkBatch(ctx context.Context, op string) error {
	return checkCtx(ctx, op, "")
}

// memoryConfig is the config of a memory store named store, its options
// checked.
func memoryConfig(store, prefix string, opts []Option) (config, error) {
	cfg := newConfig(prefix, opts)
	return cfg, cfg.validFor(store, "memory")
}

// observe runs f and reports one event of op on key: f's outcome, or the
// verdict its error carries (outcome). Without an observer it only runs f.
func (c *core) observe(ctx context.Context, op, script, key string, f func() (Outcome, error)) error {
	if c.ev.obs == nil {
		_, err := f()
		return err
	}
	start := time.Now()
	out, err := f()
	c.ev.report(ctx, op, script, key, 1, outcome(err, out), start, err)
	return err
}

// observeDo runs a Do flow and reports its "do" event with the flow's own
// outcome. A panic in fn reports released: the flow gives the id back
// before the panic goes on.
func (c *core) observeDo(ctx context.Context, key string, flow func() (Outcome, error)) (err error) {
	if c.ev.obs == nil {
		_, err = flow()
		return err
	}
	start, out := time.Now(), outReleased
	defer func() { c.ev.report(ctx, "do", "", key, 1, out, start, err) }()
	out, err = flow()
	return err
}
