package scripts_test

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce"
	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/internal/redisproc"
	"github.com/redisonce/redisonce/store"
)

// connectionSetup are the commands a rueidis connection sends on its own.
var connectionSetup = map[string]bool{"info": true, "hello": true, "client|tracking": true, "client|setinfo": true,
	"ping": true, "cluster|slots": true, "cluster|shards": true}

// TestRecordsWaitRaw: what a waiter (AcquireOptions.Wait) costs and leaves
// in Redis, on a private server whose INFO commandstats counts only this
// test's commands.
//
//   - a final write on a record nobody waits for publishes nothing (no
//     SPUBLISH) and leaves no watch field;
//   - a final write on a watched record sends the new status to the
//     record's shard channel (its own key) and drops the field;
//   - a waiter sends nothing while it waits but its bounded re-reads: over a
//     2 s wait at most 2 acquires and 2 watch.lua calls after the first.
func TestRecordsWaitRaw(t *testing.T) {
	ctx := context.Background()
	srv := newServer(t, redisproc.Options{})
	c := newClient(t, srv.URL())
	rs := must.Store(store.NewRecords(c, store.WithPrefix("w:")))
	loadScripts(t, c) // EVALSHA finds them: no EVAL fallback in the counts
	if _, err := srv.Do("CONFIG", "RESETSTAT"); err != nil {
		t.Fatal(err)
	}

	t.Run("UnwatchedFinalWriteSameCommands", func(t *testing.T) {
		// The final write of a record nobody waits for runs exactly the
		// commands it ran before waiters existed: one EVALSHA calling GET,
		// TIME and SET (layout 1; the mark is the header's fourth byte).
		rec, ok, err := rs.AcquireWith(ctx, "same", store.AcquireOptions{Lease: time.Second})
		if err != nil || !ok {
			t.Fatal(ok, err)
		}
		before := commandCalls(t, c)
		done, payload := store.StatusCompleted, []byte("r")
		if err := rs.Update(ctx, "same", store.Update{Status: &done, Payload: &payload, Token: rec.Token}); err != nil {
			t.Fatal(err)
		}
		after := commandCalls(t, c)
		got := map[string]int64{}
		for cmd, n := range after {
			// (a connection rueidis dials meanwhile says HELLO and CLIENT
			// TRACKING; INFO is commandCalls itself)
			if d := n - before[cmd]; d != 0 && !connectionSetup[cmd] {
				got[cmd] = d
			}
		}
		if want := map[string]int64{"evalsha": 1, "get": 1, "time": 1, "set": 1}; !maps.Equal(got, want) {
			t.Errorf("an unwatched final write ran %v, want %v", got, want)
		}
	})

	t.Run("UnwatchedPublishesNothing", func(t *testing.T) {
		if _, _, err := rs.Do(ctx, "plain", store.AcquireOptions{Lease: time.Second}, func(context.Context) ([]byte, error) {
			return []byte("r"), nil
		}); err != nil {
			t.Fatal(err)
		}
		if n := commandCalls(t, c)["spublish"]; n != 0 {
			t.Errorf("%d SPUBLISH for a final write nobody waited for, want 0", n)
		}
		h := rawRecord(t, c, "w:plain").Hash
		if _, ok := h["watch"]; ok || h["status"] != "completed" {
			t.Errorf("record %v, want completed without a watch field", h)
		}
	})

	t.Run("WatchedPublishesOnce", func(t *testing.T) {
		rec, ok, err := rs.AcquireWith(ctx, "k", store.AcquireOptions{Lease: 30 * time.Second})
		if err != nil || !ok {
			t.Fatal(ok, err)
		}
		sub := newClient(t, srv.URL())
		got := make(chan string, 4)
		subscribed := make(chan struct{})
		rctx, stop := context.WithCancel(rueidis.WithOnSubscriptionHook(ctx, func(s rueidis.PubSubSubscription) {
			if s.Kind == "ssubscribe" {
				close(subscribed)
			}
		}))
		defer stop()
		go sub.Receive(rctx, sub.B().Ssubscribe().Channel("w:k").Build(), func(m rueidis.PubSubMessage) { got <- m.Message })
		<-subscribed
		loadScripts(t, c)
		if n, err := c.Do(ctx, c.B().Evalsha().Sha1(watchSHA(t)).Numkeys(1).Key("w:k").Build()).AsInt64(); err != nil || n != 1 {
			t.Fatalf("watch.lua on a pending record = %d, %v; want 1", n, err)
		}
		before := commandCalls(t, c)["spublish"]
		done := store.StatusCompleted
		payload := []byte("r")
		if err := rs.Update(ctx, "k", store.Update{Status: &done, Payload: &payload, Token: rec.Token}); err != nil {
			t.Fatal(err)
		}
		select {
		case m := <-got:
			if m != "completed" {
				t.Errorf("message %q, want the new status", m)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("no message within 5 s of the final write")
		}
		if n := commandCalls(t, c)["spublish"] - before; n != 1 {
			t.Errorf("%d SPUBLISH for one final write, want 1", n)
		}
		h := rawRecord(t, c, "w:k").Hash
		if _, ok := h["watch"]; ok {
			t.Errorf("the watch field outlived the final write: %v", h)
		}
	})

	t.Run("WaiterIsQuiet", func(t *testing.T) {
		release := make(chan struct{})
		started := make(chan struct{})
		first := make(chan error, 1)
		go func() {
			_, _, err := rs.Do(ctx, "q", store.AcquireOptions{Lease: 30 * time.Second}, func(context.Context) ([]byte, error) {
				close(started)
				<-release
				return []byte("done"), nil
			})
			first <- err
		}()
		<-started
		res := make(chan string, 1)
		go func() {
			r, _, err := rs.Do(ctx, "q", store.AcquireOptions{Lease: 30 * time.Second, Wait: 10 * time.Second}, func(context.Context) ([]byte, error) {
				return []byte("ran"), nil
			})
			if err != nil {
				t.Errorf("waiter: %v", err)
			}
			res <- string(r)
		}()
		time.Sleep(200 * time.Millisecond) // the waiter is subscribed and watching
		a := commandCalls(t, c)
		time.Sleep(2 * time.Second)
		b := commandCalls(t, c)
		close(release)
		if r := <-res; r != "done" {
			t.Errorf("the waiter got %q, want the first's result", r)
		}
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		// evalsha counts acquire.lua and watch.lua, and the first's lease
		// renewals (every 10 s for a 30 s lease: none in 2 s).
		t.Logf("commands in 2 s of waiting: %d evalsha", b["evalsha"]-a["evalsha"])
		if n := b["evalsha"] - a["evalsha"]; n > 4 {
			t.Errorf("the waiter ran %d scripts in 2 s of waiting, want at most 4 (two re-reads of one acquire and one watch)", n)
		}
		for cmd, n := range b {
			if d := n - a[cmd]; d > 0 && !connectionSetup[cmd] && cmd != "evalsha" && cmd != "get" && cmd != "setrange" && cmd != "time" {
				t.Errorf("%d %s while waiting", d, cmd)
			}
		}
	})
}

// watchSHA is watch.lua's SHA1 (loaded on the server by the store's waiters
// and by EVAL fallbacks; this test loads it first).
func watchSHA(t *testing.T) string {
	t.Helper()
	s, ok := redisonce.Get("watch")
	if !ok {
		t.Fatal("no watch.lua")
	}
	return s.SHA1
}
