package scripts_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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

	claims := mustStore(store.NewClaims(c, store.WithPrefix(prefix+"c:"), store.WithObserver(obs)))
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := claims.Claim(ctx, "a")
	must(err)
	_, err = claims.ClaimMany(ctx, []string{"b"})
	must(err)
	_, err = claims.SeenMany(ctx, []string{"a", "b"})
	must(err)
	must(claims.Remember(ctx, "c"))
	_, err = claims.Seen(ctx, "a")
	must(err)
	must(claims.Forget(ctx, "a"))
	_, err = claims.Do(ctx, "d", 90*time.Millisecond, func(context.Context) error {
		time.Sleep(60 * time.Millisecond) // two extensions at least, every 30ms
		return nil
	})
	must(err)

	outbox := mustStore(store.NewOutbox(c, store.WithPrefix(prefix+"o:"), store.WithObserver(obs)))
	id, _, err := outbox.Append(ctx, "k", []byte("p"))
	must(err)
	_, err = outbox.Unacked(ctx, "k")
	must(err)
	_, err = outbox.Tail(ctx, "k")
	must(err)
	must(outbox.Ack(ctx, "k", id, 1))
	_, err = outbox.AckMany(ctx, "k", []string{id}, 1)
	must(err)
	must(outbox.AdvanceGeneration(ctx, "k", 2))
	_, err = outbox.AppendMany(ctx, "k", []store.Outgoing{{Payload: []byte("q")}})
	must(err)
	must(outbox.DropConn(ctx, "k"))

	records := mustStore(store.NewRecords(c, store.WithPrefix(prefix+"r:"), store.WithObserver(obs)))
	rec, _, err := records.Acquire(ctx, "r", time.Minute)
	must(err)
	_, _, err = records.Get(ctx, "r")
	must(err)
	done := store.StatusCompleted
	must(records.Update(ctx, "r", store.Update{Status: &done, Token: rec.Token}))
	must(records.Delete(ctx, "r"))
	_, _, err = records.Do(ctx, "d", store.AcquireOptions{Lease: 90 * time.Millisecond}, func(context.Context) ([]byte, error) {
		time.Sleep(60 * time.Millisecond)
		return nil, nil
	})
	must(err)

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
