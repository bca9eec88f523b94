package store_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/redisonce/redisonce/store"
	"github.com/redisonce/redisonce/store/storetest"
)

// One rule for every observer. The key, and any error text that
// quotes it, appear only with the option that says so (SlogWithKey here,
// WithKey in the OpenTelemetry adapter); observe/otel and observe/prometheus
// run the same operations.

// secretKey is in every id storetest.FailingOps uses.
const secretKey = storetest.SecretKey

func failingOps(t *testing.T, obs store.Observer) int { return storetest.FailingOps(t, obs) }

func TestSlogObserverKeyOnlyWithOption(t *testing.T) {
	for _, withKey := range []bool{false, true} {
		var buf bytes.Buffer
		l := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
		var opts []store.SlogOption
		if withKey {
			opts = append(opts, store.SlogWithKey())
		}
		n := failingOps(t, store.SlogObserver(l, opts...))
		lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
		if len(lines) < n {
			t.Fatalf("withKey %v: %d log lines for %d operations:\n%s", withKey, len(lines), n, buf.String())
		}
		errs := 0
		for _, line := range lines {
			if strings.Contains(line, `"err":`) {
				errs++
			}
			if !withKey && strings.Contains(line, secretKey) {
				t.Errorf("without SlogWithKey a log line holds the key: %s", line)
			}
		}
		if errs < n-1 {
			t.Errorf("withKey %v: %d lines say what went wrong (err), want at least %d:\n%s", withKey, errs, n-1, buf.String())
		}
		if withKey && strings.Count(buf.String(), `"key":"`+secretKey) < n-2 {
			t.Errorf("with SlogWithKey the lines lack the key:\n%s", buf.String())
		}
	}
}

// Event.ErrorText: the store's own error text, without the ids it quotes
// (and without the whole text when what is left still holds the key).
func TestEventErrorText(t *testing.T) {
	var events []store.Event
	failingOps(t, store.ObserverFunc(func(_ context.Context, e store.Event) { events = append(events, e) }))
	for _, e := range events {
		if e.Err == nil {
			if e.ErrorText(false) != "" {
				t.Errorf("%s %s: ErrorText of no error = %q", e.Store, e.Op, e.ErrorText(false))
			}
			continue
		}
		got := e.ErrorText(false)
		if strings.Contains(got, secretKey) || got == "" || !strings.HasPrefix(got, "redisonce: "+e.Op) {
			t.Errorf("%s %s (%s): ErrorText(false) = %q from %q; want the error without the key", e.Store, e.Op, e.Outcome, got, e.Err)
		}
		if e.ErrorText(true) != e.Err.Error() {
			t.Errorf("ErrorText(true) = %q, want %q", e.ErrorText(true), e.Err.Error())
		}
	}
	for _, tc := range []struct{ op, key, err, want string }{
		{"ack", "c1", `redisonce: ack "c1": stale owner`, "redisonce: ack: stale owner"},
		{"ack", "c1", `redisonce: ack "c1": stale owner: generation 1 is below the floor 5`, "redisonce: ack: stale owner: generation 1 is below the floor 5"},
		{"do", "k", `redisonce: do "k": lease lost: no extension succeeded: redisonce: extend "k": i/o timeout`, "redisonce: do: lease lost: no extension succeeded: redisonce: extend: i/o timeout"},
		{"do", "order-7", `charge order-7 failed`, "redisonce: do: error (its text is not shown: it holds the key)"},
		{"claim", "a\x00b", `redisonce: claim "a\x00b": connection refused`, "redisonce: claim: connection refused"},
	} {
		e := store.Event{Op: tc.op, Key: tc.key, Err: fmt.Errorf("%s", tc.err)}
		if got := e.ErrorText(false); got != tc.want {
			t.Errorf("ErrorText(false) of %q = %q, want %q", tc.err, got, tc.want)
		}
	}
}
