package gojob_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/goliatone/go-job/queue/idempotency"

	"github.com/redisonce/redisonce/adapters/gojob"
	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
)

// A nil store or a nil context is ErrInvalidArgument, never a panic.
func TestBadInputNeverPanics(t *testing.T) {
	status := idempotency.Status("completed")
	for name, s := range map[string]*gojob.Store{
		"nil store":            gojob.NewStore(nil),
		"memory store":         gojob.NewStore(must.Store(store.NewMemoryRecords())),
		"memory, nil option":   gojob.NewStore(must.Store(store.NewMemoryRecords()), nil),
		"legacy, nil context":  gojob.NewStore(must.Store(store.NewMemoryRecords()), gojob.WithLegacy(gojob.NewStore(nil))),
		"nil legacy (ignored)": gojob.NewStore(must.Store(store.NewMemoryRecords()), gojob.WithLegacy(nil)),
	} {
		for _, ctx := range []context.Context{nil, context.Background()} {
			if ctx != nil && name != "nil store" {
				continue // good calls on a good store are the conformance suite's
			}
			calls := map[string]func() error{
				"Acquire": func() error { _, _, err := s.Acquire(ctx, "k", time.Minute); return err },
				"Get":     func() error { _, _, err := s.Get(ctx, "k"); return err },
				"Update":  func() error { return s.Update(ctx, "k", idempotency.Update{Status: &status}) },
				"Delete":  func() error { return s.Delete(ctx, "k") },
			}
			for op, f := range calls {
				var err error
				func() {
					defer func() {
						if p := recover(); p != nil {
							t.Errorf("%s: %s with ctx %v panicked: %v", name, op, ctx, p)
						}
					}()
					err = f()
				}()
				if !errors.Is(err, store.ErrInvalidArgument) {
					t.Errorf("%s: %s with ctx %v = %v, want ErrInvalidArgument", name, op, ctx, err)
				}
			}
		}
	}
}
