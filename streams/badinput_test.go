package streams_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
	"github.com/redisonce/redisonce/streams"
)

// Bad input in the streams runner: a nil option, a nil context, a
// nil Consumer give ErrInvalidArgument, never a panic.
func TestBadInputNeverPanics(t *testing.T) {
	_, rc := newServer(t)
	claims := must.Store(store.NewMemoryClaims())
	h := func(context.Context, streams.Message) error { return nil }
	c, err := streams.New(rc, claims, "bad", "g", "c1", h)
	if err != nil {
		t.Fatal(err)
	}
	var nilConsumer *streams.Consumer
	for name, f := range map[string]func() error{
		"New nil option": func() error { return second(streams.New(rc, claims, "bad", "g", "c1", h, nil)) },
		"New nil option after": func() error {
			return second(streams.New(rc, claims, "bad", "g", "c1", h, streams.WithLease(time.Second), nil))
		},
		"New nil handler":       func() error { return second(streams.New(rc, claims, "bad", "g", "c1", nil)) },
		"Run nil ctx":           func() error { return c.Run(nil) }, //nolint:staticcheck // the bad input under test
		"nil Consumer Run":      func() error { return nilConsumer.Run(context.Background()) },
		"nil Consumer Run nil ": func() error { return nilConsumer.Run(nil) }, //nolint:staticcheck
	} {
		t.Run(name, func(t *testing.T) {
			var err error
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("panicked: %v", p)
					}
				}()
				err = f()
			}()
			if !errors.Is(err, store.ErrInvalidArgument) {
				t.Errorf("%v, want ErrInvalidArgument", err)
			}
		})
	}
	// Nothing of the refused Run reached Redis: no group was created.
	if n, err := rc.Do(context.Background(), rc.B().Exists().Key("bad").Build()).AsInt64(); err != nil || n != 0 {
		t.Errorf("EXISTS bad = %d, %v; want 0 (a refused Run sends nothing)", n, err)
	}
}

// recorder keeps every event the runner reports.
type recorder struct {
	mu sync.Mutex
	ev []store.Event
}

func (r *recorder) Observe(_ context.Context, e store.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ev = append(r.ev, e)
}

func (r *recorder) all() []store.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]store.Event(nil), r.ev...)
}

// The streams runner's events follow the one key
// rule. The runner's own error texts (a handler's panic, an entry without
// its id field) name the entry; without the key option no observer shows it,
// neither the claim id nor the entry id it is made of. With the option the
// claim id is there (so the check can fail).
func TestObserverKeyRule(t *testing.T) {
	_, rc := newServer(t)
	claims := must.Store(store.NewClaims(rc, store.WithPrefix("keyrule:")))
	var rec recorder
	var logs, keyed bytes.Buffer
	var logMu sync.Mutex
	both := store.ObserverFunc(func(ctx context.Context, e store.Event) {
		rec.Observe(ctx, e)
		logMu.Lock()
		defer logMu.Unlock()
		store.SlogObserver(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))).Observe(ctx, e)
		store.SlogObserver(slog.New(slog.NewTextHandler(&keyed, &slog.HandlerOptions{Level: slog.LevelDebug})), store.SlogWithKey()).Observe(ctx, e)
	})
	panicky := func(context.Context, streams.Message) error { panic("boom") }
	p, err := streams.New(rc, claims, "kr-panic", "g", "c1", panicky, streams.WithObserver(both), streams.WithRetryDelay(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	f, err := streams.New(rc, claims, "kr-field", "g", "c1", func(context.Context, streams.Message) error { return nil },
		streams.WithIDField("msg_id"), streams.WithObserver(both))
	if err != nil {
		t.Fatal(err)
	}
	runConsumer(t, p)
	runConsumer(t, f)
	idPanic := xadd(t, rc, "kr-panic", "k", "v")
	idField := xadd(t, rc, "kr-field", "other", "x")
	waitFor(t, 10*time.Second, "both entries reported", func() bool {
		var failed, invalid bool
		for _, e := range rec.all() {
			failed = failed || (e.Op == "handle" && e.Outcome == store.Outcome("failed"))
			invalid = invalid || (e.Op == "handle" && e.Outcome == store.Outcome("invalid"))
		}
		return failed && invalid
	})
	secrets := []string{idPanic, idField, "kr-panic/" + idPanic, "kr-field/" + idField}
	checked := 0
	for _, e := range rec.all() {
		if e.Err == nil {
			continue
		}
		checked++
		text := e.ErrorText(false)
		for _, s := range secrets {
			if strings.Contains(text, s) {
				t.Errorf("%s %s: ErrorText(false) = %q holds %q", e.Op, e.Outcome, text, s)
			}
		}
		if e.Key == "" || !strings.Contains(e.ErrorText(true), e.Key) {
			t.Errorf("%s %s: key %q, ErrorText(true) = %q: want the claim id in the full text", e.Op, e.Outcome, e.Key, e.ErrorText(true))
		}
	}
	if checked < 2 {
		t.Fatalf("%d events with an error, want >= 2", checked)
	}
	logMu.Lock()
	defer logMu.Unlock()
	for _, s := range secrets {
		if strings.Contains(logs.String(), s) {
			t.Errorf("SlogObserver without SlogWithKey logged %q:\n%s", s, logs.String())
		}
	}
	for _, s := range []string{"kr-panic/" + idPanic, "kr-field/" + idField} {
		if !strings.Contains(keyed.String(), s) {
			t.Errorf("SlogObserver with SlogWithKey did not log %q:\n%s", s, keyed.String())
		}
	}
}
