package streams_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
	"github.com/redisonce/redisonce/streams"
)

// The batched runner under faults: each read's ids share one claim call and
// their commits share calls, and every lease property still holds per id.

// handleEvents records each "handle" event's outcome, error and end time
// per claim id.
type handleEvents struct {
	mu  sync.Mutex
	out map[string][]handleEvent
}

type handleEvent struct {
	outcome store.Outcome
	err     error
	end     time.Time
}

func (h *handleEvents) Observe(_ context.Context, e store.Event) {
	if e.Op != "handle" {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.out == nil {
		h.out = map[string][]handleEvent{}
	}
	h.out[e.Key] = append(h.out[e.Key], handleEvent{e.Outcome, e.Err, e.Start.Add(e.Duration)})
}

func (h *handleEvents) get(id string) []handleEvent {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]handleEvent(nil), h.out[id]...)
}

// fencedEffect is a handler's effect that the lease fences: it applies
// (SADD applied id) only while the claim key holds the handler's own lease,
// and counts each refusal.
var fencedEffect = rueidis.NewLuaScript(`
if redis.call('GET', KEYS[1]) ~= '~' .. ARGV[2] then
  redis.call('HINCRBY', KEYS[3], ARGV[1], 1)
  return -1
end
return redis.call('SADD', KEYS[2], ARGV[1])`)

// TestBatchLeasePartlyLost: eight entries of one read run at once under the
// read's batch; mid-run, three of their claims are taken by another owner
// (the key deleted and leased again under another token). Those three, and
// only those, see their context cancelled with ErrLeaseLost, apply nothing
// while the other owner holds them (the fence refuses them), and leave the
// other owner's lease as it is; the five others keep their leases, apply
// once, and are acked without an error. Once the other owner lets go, the
// three are redelivered and applied, each exactly once.
func TestBatchLeasePartlyLost(t *testing.T) {
	_, rc := newServer(t)
	const prefix, lease = "lost:", time.Second
	claims := must.Store(store.NewClaims(rc, store.WithPrefix(prefix)))
	gate := make(chan struct{})
	started := make(chan string, 64)
	var mu sync.Mutex
	causes := map[string][]error{}
	h := func(ctx context.Context, m streams.Message) error {
		id := m.Values["msg_id"]
		started <- id
		select {
		case <-gate:
		case <-ctx.Done():
		}
		mu.Lock()
		causes[id] = append(causes[id], context.Cause(ctx))
		mu.Unlock()
		if err := ctx.Err(); err != nil {
			return err
		}
		l, _ := store.LeaseFromContext(ctx)
		n, err := fencedEffect.Exec(context.WithoutCancel(ctx), rc, []string{prefix + id, "applied", "refused"}, []string{id, l.Token}).AsInt64()
		if err == nil && n < 0 {
			err = errors.New("fenced")
		}
		return err
	}
	var ev handleEvents
	c, err := streams.New(rc, claims, "s", "g", "c1", h, streams.WithIDField("msg_id"), streams.WithConcurrency(8),
		streams.WithLease(lease), streams.WithRetryDelay(50*time.Millisecond), streams.WithObserver(&ev))
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, 8)
	for i := range ids {
		ids[i] = fmt.Sprintf("m%d", i)
		xadd(t, rc, "s", "msg_id", ids[i])
	}
	runConsumer(t, c)
	for range ids {
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("the eight handlers did not all start")
		}
	}
	taken := map[string]bool{"m1": true, "m4": true, "m6": true}
	ctx := context.Background()
	for id := range taken {
		if err := rc.Do(ctx, rc.B().Set().Key(prefix+id).Value("~other").Px(time.Minute).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	// The taken ones' heartbeats find their leases gone within a beat; the
	// others' keep theirs past the lease.
	waitFor(t, 5*time.Second, "the three taken handlers cancelled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(causes["m1"])+len(causes["m4"])+len(causes["m6"]) == 3
	})
	time.Sleep(lease + lease/2)
	close(gate)
	waitFor(t, 10*time.Second, "the five others acked", func() bool {
		for _, id := range ids {
			if !taken[id] && len(ev.get(id)) == 0 {
				return false
			}
		}
		return true
	})
	for id := range taken {
		if v, _ := rc.Do(ctx, rc.B().Get().Key(prefix+id).Build()).ToString(); v != "~other" {
			t.Errorf("%s's key = %q while the other owner holds it; want ~other (left as it is)", id, v)
		}
		if ok, _ := rc.Do(ctx, rc.B().Sismember().Key("applied").Member(id).Build()).AsBool(); ok {
			t.Errorf("%s applied while another owner held it", id)
		}
	}
	// The other owner lets go: the three are redelivered and applied.
	for id := range taken {
		rc.Do(ctx, rc.B().Del().Key(prefix+id).Build())
	}
	waitFor(t, 20*time.Second, "every entry acked", func() bool {
		n, _ := rc.Do(ctx, rc.B().Scard().Key("applied").Build()).AsInt64()
		return n == 8 && pending(t, rc, "s", "g") == 0
	})
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		first := causes[id][0]
		if taken[id] != errors.Is(first, store.ErrLeaseLost) {
			t.Errorf("%s's first run ended with cause %v; want ErrLeaseLost only for the taken ids", id, first)
		}
		evs := ev.get(id)
		last := evs[len(evs)-1]
		if last.outcome != "acked" || last.err != nil {
			t.Errorf("%s settled %s, %v; want acked without an error", id, last.outcome, last.err)
		}
		// (An entry idle for the lease is also reclaimed by its own
		// consumer, which parks it while its handler runs: in_flight.)
		if !taken[id] && len(causes[id]) != 1 {
			t.Errorf("%s's handler ran %d times, want once (another id's loss is not its own)", id, len(causes[id]))
		}
		if v, _ := rc.Do(ctx, rc.B().Get().Key(prefix+id).Build()).ToString(); v != "1" {
			t.Errorf("%s's key = %q, want 1 (processed)", id, v)
		}
	}
	if n, _ := rc.Do(ctx, rc.B().Scard().Key("applied").Build()).AsInt64(); n != 8 {
		t.Errorf("%d ids applied, want 8", n)
	}
}

// TestBatchCommitStall: eight handlers return while the server is stopped
// (SIGSTOP), so their commits go out gathered and stall with it. Nothing is
// reported done until the server runs again and the commits' replies are in;
// then every entry is acked without an error, each effect ran once, and every
// id is processed.
func TestBatchCommitStall(t *testing.T) {
	srv, rc := newServer(t)
	claims := must.Store(store.NewClaims(rc, store.WithPrefix("stall:")))
	gate := make(chan struct{})
	started := make(chan struct{}, 64)
	var mu sync.Mutex
	runs := map[string]int{}
	h := func(ctx context.Context, m streams.Message) error {
		started <- struct{}{}
		<-gate
		mu.Lock()
		runs[m.Values["msg_id"]]++
		mu.Unlock()
		return nil
	}
	var ev handleEvents
	c, err := streams.New(rc, claims, "s", "g", "c1", h, streams.WithIDField("msg_id"), streams.WithConcurrency(8),
		streams.WithLease(3*time.Second), streams.WithObserver(&ev))
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, 8)
	for i := range ids {
		ids[i] = fmt.Sprintf("m%d", i)
		xadd(t, rc, "s", "msg_id", ids[i])
	}
	runConsumer(t, c)
	for range ids {
		<-started
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	close(gate)
	time.Sleep(time.Second)
	resumed := time.Now()
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "every entry acked", func() bool { return pending(t, rc, "s", "g") == 0 })
	ctx := context.Background()
	for _, id := range ids {
		evs := ev.get(id)
		if len(evs) != 1 || evs[0].outcome != "acked" || evs[0].err != nil {
			t.Errorf("%s: events %+v; want one acked without an error", id, evs)
			continue
		}
		if evs[0].end.Before(resumed) {
			t.Errorf("%s reported acked at %v, before the server ran again (%v)", id, evs[0].end, resumed)
		}
		if v, _ := rc.Do(ctx, rc.B().Get().Key("stall:"+id).Build()).ToString(); v != "1" {
			t.Errorf("%s's key = %q, want 1 (processed)", id, v)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		if runs[id] != 1 {
			t.Errorf("%s ran %d times, want 1", id, runs[id])
		}
	}
}

// TestBatchOneClaimCallPerRead: 32 entries waiting when the runner starts
// are read at once and claimed in ONE script call of 32 keys (SLOWLOG keeps
// every command's arguments), and the whole run takes fewer script calls
// than the 64 of one claim and one commit per entry.
func TestBatchOneClaimCallPerRead(t *testing.T) {
	srv, rc := newServer(t)
	ctx := context.Background()
	for _, kv := range [][]string{{"slowlog-log-slower-than", "0"}, {"slowlog-max-len", "10000"}} {
		if _, err := srv.Do("CONFIG", "SET", kv[0], kv[1]); err != nil {
			t.Fatal(err)
		}
	}
	claims := must.Store(store.NewClaims(rc, store.WithPrefix("one:")))
	for i := range 32 {
		xadd(t, rc, "s", "n", fmt.Sprint(i))
	}
	if err := rc.Do(ctx, rc.B().SlowlogReset().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	var ev events
	c, err := streams.New(rc, claims, "s", "g", "c1", func(context.Context, streams.Message) error { return nil },
		streams.WithConcurrency(16), streams.WithObserver(&ev))
	if err != nil {
		t.Fatal(err)
	}
	stop := runConsumer(t, c)
	waitFor(t, 10*time.Second, "32 entries acked", func() bool { return ev.get("acked") == 32 && pending(t, rc, "s", "g") == 0 })
	stop()
	log, err := rc.Do(ctx, rc.B().SlowlogGet().Count(10000).Build()).ToArray()
	if err != nil {
		t.Fatal(err)
	}
	scripts, claimCalls := 0, 0 // claimCalls: script calls on 32 keys
	for _, e := range log {
		f, err := e.ToArray()
		if err != nil || len(f) < 4 {
			continue
		}
		args, err := f[3].AsStrSlice()
		if err != nil || len(args) < 3 || (args[0] != "EVALSHA" && args[0] != "EVAL" && args[0] != "evalsha" && args[0] != "eval") {
			continue
		}
		scripts++
		if args[2] == "32" {
			claimCalls++
		}
	}
	if claimCalls == 0 {
		t.Errorf("no script call took the read's 32 keys at once (%d script calls)", scripts)
	}
	if scripts == 0 || scripts >= 64 {
		t.Errorf("%d script calls for 32 entries; want fewer than one claim and one commit each (64)", scripts)
	}
	t.Logf("%d script calls for 32 entries, %d of them on all 32 keys", scripts, claimCalls)
}
