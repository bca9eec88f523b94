package scripts_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
)

// The conformance suites check what every store reports; the Redis stores
// also name the script each operation ran (a memory twin names none), and
// the key prefix they run with.
func TestEventsNameScripts(t *testing.T) {
	c := newClient(t, standaloneURL(t))
	ctx := context.Background()
	var mu sync.Mutex
	got := map[string]string{} // store.op -> script
	var prefixes []string
	obs := store.ObserverFunc(func(_ context.Context, e store.Event) {
		mu.Lock()
		defer mu.Unlock()
		got[e.Store+"."+e.Op] = e.Script
		prefixes = append(prefixes, e.Store+" "+e.Prefix)
	})
	prefix := uniquePrefix(t)

	claims := must.Store(store.NewClaims(c, store.WithPrefix(prefix+"c:"), store.WithObserver(obs)))
	check := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := claims.Claim(ctx, "a")
	check(err)
	_, err = claims.ClaimMany(ctx, []string{"b"})
	check(err)
	_, err = claims.SeenMany(ctx, []string{"a", "b"})
	check(err)
	check(claims.Remember(ctx, "c"))
	_, err = claims.Seen(ctx, "a")
	check(err)
	check(claims.Forget(ctx, "a"))
	_, err = claims.Do(ctx, "d", 90*time.Millisecond, func(context.Context) error {
		time.Sleep(60 * time.Millisecond) // two extensions at least, every 30ms
		return nil
	})
	check(err)

	outbox := must.Store(store.NewOutbox(c, store.WithPrefix(prefix+"o:"), store.WithObserver(obs)))
	id, _, err := outbox.Append(ctx, "k", []byte("p"))
	check(err)
	_, err = outbox.Unacked(ctx, "k")
	check(err)
	_, err = outbox.Tail(ctx, "k")
	check(err)
	check(outbox.Ack(ctx, "k", id, 1))
	_, err = outbox.AckMany(ctx, "k", []string{id}, 1)
	check(err)
	check(outbox.AdvanceGeneration(ctx, "k", 2))
	_, err = outbox.AppendMany(ctx, "k", []store.Outgoing{{Payload: []byte("q")}})
	check(err)
	check(outbox.DropConn(ctx, "k"))

	records := must.Store(store.NewRecords(c, store.WithPrefix(prefix+"r:"), store.WithObserver(obs)))
	rec, _, err := records.Acquire(ctx, "r", time.Minute)
	check(err)
	_, _, err = records.Get(ctx, "r")
	check(err)
	done := store.StatusCompleted
	check(records.Update(ctx, "r", store.Update{Status: &done, Token: rec.Token}))
	check(records.Delete(ctx, "r"))
	_, _, err = records.Do(ctx, "d", store.AcquireOptions{Lease: 90 * time.Millisecond}, func(context.Context) ([]byte, error) {
		time.Sleep(60 * time.Millisecond)
		return nil, nil
	})
	check(err)

	want := map[string]string{
		"claims.claim": "claim", "claims.claim_many": "claim_many", "claims.seen_many": "seen_many", "claims.remember": "claim",
		"claims.seen": "seen", "claims.forget": "forget", "claims.do": "", "claims.extend": "extend",
		"outbox.append": "append", "outbox.unacked": "unacked", "outbox.tail": "unacked",
		"outbox.ack": "ack", "outbox.ack_many": "ack", "outbox.advance": "advance", "outbox.drop": "drop", "outbox.append_many": "append_many",
		"records.acquire": "acquire", "records.get": "get", "records.update": "update",
		"records.delete": "delete", "records.do": "", "records.extend": "renew",
	}
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("scripts by store.op (-want +got):\n%s", diff)
	}
	for _, p := range prefixes {
		st, pre, _ := strings.Cut(p, " ")
		if pre != prefix+st[:1]+":" {
			t.Errorf("%s event with prefix %q, want %q", st, pre, prefix+st[:1]+":")
		}
	}
}
