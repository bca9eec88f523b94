package watermill_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	wmonce "github.com/redisonce/redisonce/integrations/watermill"
	"github.com/redisonce/redisonce/store"
)

// Every row of the outcome table (docs/integrations.md, "One behaviour per
// outcome"), on a real Redis: the middleware's handler called as the router
// calls it, its error (nil: the router acks; else it nacks and the message
// is redelivered), how often the handler ran, and the claim key after.
func TestOutcomeTable(t *testing.T) {
	boom := errors.New("boom")
	const lease = 2 * time.Second
	for _, tc := range []struct {
		name    string
		setup   func(t *testing.T, claims *store.Claims)
		cancel  bool // the message's context is cancelled while the handler runs
		h       func(msg *message.Message) error
		wantErr func(error) bool // nil: want no error (acked)
		runs    int
		key     string // "" absent, "1" processed
	}{
		{name: "success", h: func(*message.Message) error { return nil }, runs: 1, key: "1"},
		{name: "duplicate", setup: func(t *testing.T, c *store.Claims) {
			if err := c.Remember(context.Background(), "m1"); err != nil {
				t.Fatal(err)
			}
		}, h: func(*message.Message) error { return nil }, key: "1"},
		{name: "in flight", setup: func(t *testing.T, c *store.Claims) {
			holding := make(chan struct{})
			go func() {
				_, _ = c.Do(context.Background(), "m1", 500*time.Millisecond, func(context.Context) error {
					close(holding)
					time.Sleep(200 * time.Millisecond)
					return nil
				})
			}()
			<-holding
		}, h: func(*message.Message) error { return nil },
			wantErr: func(err error) bool { return errors.Is(err, store.ErrInFlight) }, key: "1"},
		{name: "failure", h: func(*message.Message) error { return boom },
			wantErr: func(err error) bool { return errors.Is(err, boom) }, runs: 1},
		{name: "panic", h: func(*message.Message) error { panic("kaboom") },
			wantErr: func(err error) bool { return err != nil && strings.Contains(err.Error(), "kaboom") }, runs: 1},
		{name: "permanent failure", h: func(*message.Message) error { return store.Permanent(boom) },
			wantErr: func(err error) bool { return errors.Is(err, boom) && store.IsPermanent(err) }, runs: 1},
		{name: "shutdown", cancel: true, h: func(msg *message.Message) error {
			<-msg.Context().Done()
			return msg.Context().Err()
		}, wantErr: func(err error) bool { return errors.Is(err, context.Canceled) }, runs: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			claims := openClaims(t)
			if tc.setup != nil {
				tc.setup(t, claims)
			}
			runs := 0
			h := wmonce.Middleware(claims, wmonce.WithLease(lease))(func(msg *message.Message) ([]*message.Message, error) {
				runs++
				return nil, tc.h(msg)
			})
			msg := message.NewMessage("m1", nil)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			msg.SetContext(ctx)
			if tc.cancel {
				time.AfterFunc(100*time.Millisecond, cancel)
			}
			_, err := h(msg)
			if tc.wantErr == nil && err != nil || tc.wantErr != nil && !tc.wantErr(err) {
				t.Errorf("handler returned %v", err)
			}
			if runs != tc.runs {
				t.Errorf("handler ran %d times, want %d", runs, tc.runs)
			}
			if tc.name == "in flight" {
				time.Sleep(400 * time.Millisecond) // the holder's commit
			}
			if v := rawGet(t, "m1"); v != tc.key {
				t.Errorf("claim key holds %q, want %q", v, tc.key)
			}
		})
	}
}
