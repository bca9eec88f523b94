package delivery

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
)

// Every row of the outcome table, on the memory twin (each integration's
// own table test walks the rows again against its broker and a real Redis).
func TestRows(t *testing.T) {
	const lease = 10 * time.Second
	boom := errors.New("boom")
	for _, tc := range []struct {
		name    string
		setup   func(c *store.Claims) // state before the delivery
		cancel  bool                  // the delivery's context is cancelled while fn runs
		fn      func(ctx context.Context) error
		want    Row
		wantErr func(error) bool
		// free: the id is free after the delivery (released, or never
		// taken), so a redelivery runs fn.
		free bool
	}{
		{name: "success", fn: func(context.Context) error { return nil }, want: Done},
		{name: "duplicate", setup: func(c *store.Claims) { _ = c.Remember(context.Background(), "m") },
			fn: func(context.Context) error { t.Error("fn ran on a duplicate"); return nil }, want: Duplicate},
		{name: "failure", fn: func(context.Context) error { return boom }, want: Failed,
			wantErr: func(err error) bool { return errors.Is(err, boom) }, free: true},
		{name: "panic", fn: func(context.Context) error { panic("kaboom") }, want: Failed,
			wantErr: func(err error) bool {
				var p *PanicError
				return errors.As(err, &p) && p.Value == "kaboom" && len(p.Stack) > 0
			}, free: true},
		{name: "panic with an error", fn: func(context.Context) error { panic(boom) }, want: Failed,
			wantErr: func(err error) bool { return errors.Is(err, boom) }, free: true},
		{name: "permanent failure", fn: func(context.Context) error { return store.Permanent(boom) }, want: Permanent,
			wantErr: func(err error) bool { return errors.Is(err, boom) && store.IsPermanent(err) }, free: true},
		{name: "shutdown", cancel: true, fn: func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }, want: Shutdown,
			wantErr: func(err error) bool { return errors.Is(err, context.Canceled) }, free: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := must.Store(store.NewMemoryClaims())
			if tc.setup != nil {
				tc.setup(c)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			fn := tc.fn
			if tc.cancel {
				fn = func(ctx context.Context) error { cancel(); return tc.fn(ctx) }
			}
			r := Do(ctx, c, "m", lease, fn)
			if r.Row != tc.want {
				t.Fatalf("row %v (err %v), want %v", r.Row, r.Err, tc.want)
			}
			if tc.wantErr == nil && r.Err != nil || tc.wantErr != nil && !tc.wantErr(r.Err) {
				t.Errorf("err %v", r.Err)
			}
			ran := false
			if _, err := c.Do(context.Background(), "m", lease, func(context.Context) error { ran = true; return nil }); err != nil {
				t.Fatal(err)
			}
			if ran != tc.free {
				t.Errorf("a redelivery ran fn: %v, want %v", ran, tc.free)
			}
		})
	}

	t.Run("in flight", func(t *testing.T) {
		c := must.Store(store.NewMemoryClaims())
		held, done := make(chan struct{}), make(chan struct{})
		go func() {
			_, _ = c.Do(context.Background(), "m", lease, func(context.Context) error { close(held); <-done; return nil })
		}()
		<-held
		defer close(done)
		r := Do(context.Background(), c, "m", lease, func(context.Context) error { t.Error("fn ran in flight"); return nil })
		if r.Row != InFlight || !errors.Is(r.Err, store.ErrInFlight) {
			t.Fatalf("row %v, err %v; want in flight", r.Row, r.Err)
		}
		if r.RedeliverAfter <= 0 || r.RedeliverAfter > lease+time.Second {
			t.Errorf("RedeliverAfter %v, want (0, lease]", r.RedeliverAfter)
		}
	})

	t.Run("store error", func(t *testing.T) {
		c := unreachable{must.Store(store.NewMemoryClaims())}
		r := Do(context.Background(), c, "m", lease, func(context.Context) error { t.Error("fn ran on a closed store"); return nil })
		if r.Row != StoreError || r.Err == nil {
			t.Fatalf("row %v, err %v; want a store error", r.Row, r.Err)
		}
	})
}

// unreachable is a claim store whose Do fails before fn runs, as Claims.Do
// does when Redis does not answer the claim.
type unreachable struct{ *store.Claims }

func (unreachable) Do(context.Context, string, time.Duration, func(context.Context) error) (bool, error) {
	return false, errors.New("dial tcp: connection refused")
}
