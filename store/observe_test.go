package store_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
)

func TestSlogObserver(t *testing.T) {
	boom := errors.New(`redisonce: claim "order-9": connection refused`)
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name  string
		level slog.Level // the handler's minimum level
		opts  []store.SlogOption
		e     store.Event
		want  map[string]any // nil: nothing logged
	}{{
		name:  "routine outcome at debug",
		level: slog.LevelDebug,
		e: store.Event{Store: "claims", Op: "claim", Script: "claim", Prefix: "once:", Key: "order-1",
			N: 1, Outcome: store.Outcome("duplicate"), Start: t0, Duration: 1500 * time.Microsecond},
		want: map[string]any{"level": "DEBUG", "msg": "redisonce claims claim", "store": "claims",
			"op": "claim", "script": "claim", "outcome": "duplicate", "duration": 1.5e6},
	}, {
		name:  "the key only with SlogWithKey",
		level: slog.LevelDebug,
		opts:  []store.SlogOption{store.SlogWithKey()},
		e: store.Event{Store: "claims", Op: "claim", Script: "claim", Prefix: "once:", Key: "order-1",
			N: 1, Outcome: store.Outcome("duplicate"), Start: t0, Duration: 1500 * time.Microsecond},
		want: map[string]any{"level": "DEBUG", "msg": "redisonce claims claim", "store": "claims",
			"op": "claim", "script": "claim", "key": "order-1", "outcome": "duplicate", "duration": 1.5e6},
	}, {
		name:  "routine outcome dropped at info",
		level: slog.LevelInfo,
		e:     store.Event{Store: "claims", Op: "claim", N: 1, Outcome: store.Outcome("claimed")},
	}, {
		name:  "stale owner is a warning",
		level: slog.LevelInfo,
		e: store.Event{Store: "outbox", Op: "ack_many", Script: "ack", Key: "conn-1", N: 3,
			Outcome: store.Outcome("stale_owner"), Duration: time.Millisecond, Err: store.ErrStaleOwner},
		want: map[string]any{"level": "WARN", "msg": "redisonce outbox ack_many", "store": "outbox",
			"op": "ack_many", "script": "ack", "n": 3.0, "outcome": "stale_owner",
			"duration": 1e6, "err": store.ErrStaleOwner.Error()},
	}, {
		name:  "batch without key, memory twin without script",
		level: slog.LevelWarn,
		e:     store.Event{Store: "outbox", Op: "append", Key: "c", N: 1, Outcome: store.Outcome("full"), Err: store.ErrOutboxFull},
		want: map[string]any{"level": "WARN", "msg": "redisonce outbox append", "store": "outbox",
			"op": "append", "outcome": "full", "duration": 0.0, "err": store.ErrOutboxFull.Error()},
	}, {
		name:  "taken over, lease lost, mismatch, invalid are warnings",
		level: slog.LevelWarn,
		e:     store.Event{Store: "records", Op: "acquire", N: 1, Outcome: store.Outcome("taken_over")},
		want: map[string]any{"level": "WARN", "msg": "redisonce records acquire", "store": "records",
			"op": "acquire", "outcome": "taken_over", "duration": 0.0},
	}, {
		name:  "error is an error",
		level: slog.LevelError,
		e:     store.Event{Store: "claims", Op: "claim", Script: "claim", Key: "order-9", N: 1, Outcome: store.Outcome("error"), Err: boom},
		want: map[string]any{"level": "ERROR", "msg": "redisonce claims claim", "store": "claims",
			"op": "claim", "script": "claim", "outcome": "error", "duration": 0.0, "err": "redisonce: claim: connection refused"},
	}, {
		name:  "an error quoting the key as it is only with SlogWithKey",
		level: slog.LevelError,
		opts:  []store.SlogOption{store.SlogWithKey()},
		e:     store.Event{Store: "claims", Op: "claim", Script: "claim", Key: "order-9", N: 1, Outcome: store.Outcome("error"), Err: boom},
		want: map[string]any{"level": "ERROR", "msg": "redisonce claims claim", "store": "claims",
			"op": "claim", "script": "claim", "key": "order-9", "outcome": "error", "duration": 0.0, "err": boom.Error()},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			h := slog.NewJSONHandler(&buf, &slog.HandlerOptions{
				Level: tt.level,
				ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
					if a.Key == slog.TimeKey {
						return slog.Attr{} // not the event's: the log line's
					}
					return a
				},
			})
			store.SlogObserver(slog.New(h), tt.opts...).Observe(context.Background(), tt.e)
			if tt.want == nil {
				if buf.Len() != 0 {
					t.Fatalf("logged %s, want nothing", buf.Bytes())
				}
				return
			}
			var got map[string]any
			if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
				t.Fatalf("log line %q: %v", buf.Bytes(), err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("log line (-want +got):\n%s", diff)
			}
		})
	}
	// every warning outcome the doc names, at Warn
	for _, o := range []store.Outcome{store.Outcome("stale_owner"), store.Outcome("lease_lost"), store.Outcome("taken_over"),
		store.Outcome("mismatch"), store.Outcome("full"), store.Outcome("invalid")} {
		var buf bytes.Buffer
		l := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
		store.SlogObserver(l).Observe(context.Background(), store.Event{Store: "s", Op: "o", N: 1, Outcome: o})
		if !bytes.Contains(buf.Bytes(), []byte(`"level":"WARN"`)) {
			t.Errorf("outcome %s: logged %q, want a warning", o, buf.Bytes())
		}
	}
}

// A store without an observer builds no event: its operations allocate
// nothing more than before (the Redis stores' benchmarks show the same with
// allocs/op). Memory twins' lookups allocate nothing at all, with a no-op
// observer or without one.
func TestObserverAllocs(t *testing.T) {
	ctx := context.Background()
	noop := store.ObserverFunc(func(context.Context, store.Event) {})
	for _, obs := range []store.Observer{nil, noop} {
		var opts []store.Option
		if obs != nil {
			opts = append(opts, store.WithObserver(obs))
		}
		claims := must.Store(store.NewMemoryClaims(opts...))
		outbox := must.Store(store.NewMemoryOutbox(opts...))
		records := must.Store(store.NewMemoryRecords(opts...))
		if _, err := claims.Claim(ctx, "m"); err != nil {
			t.Fatal(err)
		}
		for name, op := range map[string]func(){
			"claims.Claim (duplicate)": func() { _, _ = claims.Claim(ctx, "m") },
			"claims.Seen":              func() { _, _ = claims.Seen(ctx, "m") },
			"outbox.Ack (absent)":      func() { _ = outbox.Ack(ctx, "c", "m", 1) },
			"records.Get (absent)":     func() { _, _, _ = records.Get(ctx, "k") },
		} {
			if n := testing.AllocsPerRun(100, op); n != 0 {
				t.Errorf("%s with observer %v: %v allocs/op, want 0", name, obs != nil, n)
			}
		}
		if obs == nil {
			// A batch without an observer allocates its result only (no tally).
			ids := []string{"m", "x", "y"}
			if n := testing.AllocsPerRun(100, func() { _, _ = claims.SeenMany(ctx, ids) }); n != 1 {
				t.Errorf("claims.SeenMany without an observer: %v allocs/op, want 1 (the result)", n)
			}
		}
	}
}
