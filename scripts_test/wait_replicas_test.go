package scripts_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/internal/recordlayout"
	"github.com/redisonce/redisonce/internal/redisproc"
	"github.com/redisonce/redisonce/store"
)

// newReplicated starts a primary and one replica for this test, and waits
// until the primary counts the replica online (WAIT counts it from then on).
func newReplicated(t *testing.T) (primary, replica *redisproc.Server) {
	t.Helper()
	primary = newServer(t, redisproc.Options{Args: []string{"--repl-diskless-sync-delay", "0"}})
	replica = newServer(t, redisproc.Options{Args: []string{"--replicaof", "127.0.0.1", strconv.Itoa(primary.Port)}})
	if err := redisproc.WaitLinked(primary, replica, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	// And it answers WAIT: a busy machine may take a while.
	if _, err := primary.Do("SET", "newReplicated", "1"); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		n, err := primary.Do("WAIT", "1", "1000")
		if err == nil && n == "1" {
			return primary, replica
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica is linked but WAIT 1 answers %q, %v", n, err)
		}
	}
}

// TestWaitReplicas: with WithWaitReplicas every write of every store is on the
// replica when it returns; with the replica stalled, every write returns
// ErrNotReplicated (with its results) and reads do not wait.
func TestWaitReplicas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	primary, replica := newReplicated(t)
	// A generous timeout while the replica is up (a busy machine may be slow
	// to confirm), a short one while it is stalled (each write waits it out).
	opt := store.WithWaitReplicas(1, 5*time.Second)
	claims, err := store.OpenClaims(primary.URL(), opt)
	if err != nil {
		t.Fatal(err)
	}
	defer claims.Close()
	outbox, err := store.OpenOutbox(primary.URL(), opt)
	if err != nil {
		t.Fatal(err)
	}
	defer outbox.Close()
	records, err := store.OpenRecords(primary.URL(), opt)
	if err != nil {
		t.Fatal(err)
	}
	defer records.Close()
	onReplica := func(args ...string) string {
		t.Helper()
		v, err := replica.Do(args...)
		if err != nil {
			t.Fatalf("%v on the replica: %v", args, err)
		}
		return v
	}

	// Replicated: no error, and the replica has every write.
	if won, err := claims.Claim(ctx, "c1"); !won || err != nil {
		t.Fatalf("Claim = %v, %v", won, err)
	}
	if v := onReplica("GET", "bq:idemp:c1"); v != "1" {
		t.Errorf("replica: claim c1 = %q after Claim returned", v)
	}
	a, err := outbox.AppendWithID(ctx, "conn1", "m1", []byte("p1"))
	if err != nil || a.Seq != 1 {
		t.Fatalf("AppendWithID = %+v, %v", a, err)
	}
	if v := onReplica("HGET", "gateway:outbox:conn1", "m1"); v != "1:p1" {
		t.Errorf("replica: m1 = %q after Append returned", v)
	}
	rec, acquired, err := records.Acquire(ctx, "r1", 0)
	if err != nil || !acquired {
		t.Fatalf("Acquire = %v, %v", acquired, err)
	}
	if f, err := recordlayout.Decode([]byte(onReplica("GET", "idempotency:r1"))); err != nil || f.Token != rec.Token {
		t.Errorf("replica: record %+v, %v; want token %q", f, err, rec.Token)
	}
	if _, err := claims.ClaimMany(ctx, []string{"c2", "c3"}); err != nil {
		t.Fatalf("ClaimMany: %v", err)
	}
	if v := onReplica("GET", "bq:idemp:c3"); v != "1" {
		t.Errorf("replica: c3 = %q after ClaimMany returned", v)
	}
	as, err := outbox.AppendMany(ctx, "conn2", []store.Outgoing{{ID: "b1", Payload: []byte("p1")}, {ID: "b2", Payload: []byte("p2")}})
	if err != nil || len(as) != 2 || as[1].Seq != 2 {
		t.Fatalf("AppendMany = %+v, %v", as, err)
	}
	if v := onReplica("HGET", "gateway:outbox:conn2", "b2"); v != "2:p2" {
		t.Errorf("replica: b2 = %q after AppendMany returned", v)
	}

	// NOSCRIPT is still handled: the EVAL fallback carries its WAIT too.
	if _, err := primary.Do("SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	if won, err := claims.Claim(ctx, "c4"); !won || err != nil {
		t.Fatalf("Claim after SCRIPT FLUSH = %v, %v", won, err)
	}
	if _, err := primary.Do("SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	if got, err := claims.ClaimMany(ctx, []string{"c5", "c6"}); err != nil || !got[0] || !got[1] {
		t.Fatalf("ClaimMany after SCRIPT FLUSH = %v, %v", got, err)
	}

	// The replica stalls: the writes happen on the primary and say so
	// (through stores that wait 300 ms).
	short := store.WithWaitReplicas(1, 300*time.Millisecond)
	sClaims, sOutbox, sRecords := must.Store(store.NewClaims(newClient(t, primary.URL()), short)),
		must.Store(store.NewOutbox(newClient(t, primary.URL()), short)), must.Store(store.NewRecords(newClient(t, primary.URL()), short))
	if err := replica.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			if err := replica.Resume(); err != nil {
				t.Error(err)
			}
		}
	}
	defer resume()
	start := time.Now()
	won, err := sClaims.Claim(ctx, "s1")
	if !won || !errors.Is(err, store.ErrNotReplicated) {
		t.Errorf("Claim with the replica stalled = %v, %v; want true, ErrNotReplicated", won, err)
	}
	if took := time.Since(start); took < 250*time.Millisecond {
		t.Errorf("Claim returned after %v, before WAIT's 300ms", took)
	}
	if err != nil && !strings.Contains(err.Error(), `claim "s1"`) {
		t.Errorf("error %q does not name the operation and id", err)
	}
	a, err = sOutbox.AppendWithID(ctx, "conn1", "m2", []byte("p2"))
	if !errors.Is(err, store.ErrNotReplicated) || a.Seq != 2 || !a.Created || a.ID != "m2" {
		t.Errorf("Append with the replica stalled = %+v, %v; want seq 2 with ErrNotReplicated", a, err)
	}
	rec, acquired, err = sRecords.Acquire(ctx, "r2", 0)
	if !errors.Is(err, store.ErrNotReplicated) || !acquired || rec.Token == "" {
		t.Errorf("Acquire with the replica stalled = %+v, %v, %v", rec, acquired, err)
	}
	got, err := sClaims.ClaimMany(ctx, []string{"s2", "s3"})
	if !errors.Is(err, store.ErrNotReplicated) || len(got) != 2 || !got[0] || !got[1] {
		t.Errorf("ClaimMany with the replica stalled = %v, %v", got, err)
	}
	if err != nil && !strings.Contains(err.Error(), `claim "s2"`) {
		t.Errorf("ClaimMany's error %q does not name the operation and its first id", err)
	}
	as, err = sOutbox.AppendMany(ctx, "conn2", []store.Outgoing{{ID: "b2", Payload: []byte("again")}, {ID: "b3", Payload: []byte("p3")}})
	if !errors.Is(err, store.ErrNotReplicated) || len(as) != 2 || as[0].Seq != 2 || as[0].Created ||
		as[1].Seq != 3 || !as[1].Created || as[1].ID != "b3" {
		t.Errorf("AppendMany with the replica stalled = %+v, %v; want seqs 2 (a retry) and 3 with ErrNotReplicated", as, err)
	}
	if err != nil && !strings.Contains(err.Error(), `append_many "conn2"`) {
		t.Errorf("AppendMany's error %q does not name the operation and connection", err)
	}
	if err := sOutbox.Ack(ctx, "conn1", "m1", 1); !errors.Is(err, store.ErrNotReplicated) {
		t.Errorf("Ack with the replica stalled = %v", err)
	}
	// Records.Do: the claim of the key is not confirmed, so fn does not run.
	ran := false
	_, _, err = sRecords.Do(ctx, "r3", store.AcquireOptions{Lease: time.Second}, func(context.Context) ([]byte, error) {
		ran = true
		return nil, nil
	})
	if ran || !errors.Is(err, store.ErrNotReplicated) {
		t.Errorf("Records.Do with the replica stalled: ran %v, %v", ran, err)
	}
	// Reads never wait.
	start = time.Now()
	if seen, err := sClaims.Seen(ctx, "s1"); !seen || err != nil {
		t.Errorf("Seen = %v, %v", seen, err)
	}
	if tail, err := sOutbox.Tail(ctx, "conn1"); err != nil || len(tail.Messages) != 1 {
		t.Errorf("Tail = %+v, %v", tail, err)
	}
	if _, found, err := sRecords.Get(ctx, "r2"); !found || err != nil {
		t.Errorf("Get = %v, %v", found, err)
	}
	if seen, err := sClaims.SeenMany(ctx, []string{"s2", "s3", "nope"}); err != nil || !seen[0] || !seen[1] || seen[2] {
		t.Errorf("SeenMany = %v, %v", seen, err)
	}
	if took := time.Since(start); took > 1200*time.Millisecond {
		t.Errorf("four reads took %v: they waited for the replica", took)
	}
	resume()

	// Claims.Do: the commit waits too.
	ran = false
	did, err := claims.Do(ctx, "d1", time.Second, func(context.Context) error { ran = true; return nil })
	if !did || !ran || err != nil {
		t.Errorf("Claims.Do = %v, %v (ran %v)", did, err, ran)
	}
	if v := onReplica("GET", "bq:idemp:d1"); v != "1" {
		t.Errorf("replica: d1 = %q after Do committed", v)
	}
}

// TestWaitReplicasMoreThanThere: asking for more replicas than exist is never
// a silent success.
func TestWaitReplicasMoreThanThere(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	primary, _ := newReplicated(t)
	claims, err := store.OpenClaims(primary.URL(), store.WithWaitReplicas(2, 2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer claims.Close()
	won, err := claims.Claim(ctx, "x")
	if !won || !errors.Is(err, store.ErrNotReplicated) || !strings.Contains(err.Error(), "1 of 2 replicas") {
		t.Errorf("Claim = %v, %v; want true and ErrNotReplicated, 1 of 2 replicas", won, err)
	}
}

// TestWaitReplicasCluster: on a cluster, WAIT follows the scripts to their
// node, per slot of a batch (a cluster of masters only: WAIT counts 0, so
// every write, wherever its key lives, reports ErrNotReplicated).
func TestWaitReplicasCluster(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	claims, err := store.OpenClaims(cluster3URL(t), store.WithPrefix("{wait}"+t.Name()+":"),
		store.WithWaitReplicas(1, 10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer claims.Close()
	plain, err := store.OpenClaims(cluster3URL(t), store.WithPrefix(t.Name()+":"), store.WithWaitReplicas(1, 10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	ids := make([]string, 20)
	for i := range ids {
		ids[i] = "id" + strconv.Itoa(i)
	}
	for _, s := range []*store.Claims{claims, plain} { // one slot; many slots on three nodes
		got, err := s.ClaimMany(ctx, ids)
		if !errors.Is(err, store.ErrNotReplicated) || !strings.Contains(err.Error(), "0 of 1") {
			t.Errorf("ClaimMany = %v; want ErrNotReplicated, 0 of 1", err)
		}
		for i, won := range got {
			if !won {
				t.Errorf("ClaimMany: %s not claimed", ids[i])
			}
		}
		for _, id := range ids {
			if seen, err := s.Seen(ctx, id); !seen || err != nil {
				t.Errorf("Seen(%s) = %v, %v", id, seen, err)
			}
		}
		if won, err := s.Claim(ctx, "one"); !won || !errors.Is(err, store.ErrNotReplicated) {
			t.Errorf("Claim = %v, %v", won, err)
		}
	}
}

// TestWaitReplicasOption: the option's invalid values fail the
// constructors, and the memory stores, which have no replicas, refuse it.
func TestWaitReplicasOption(t *testing.T) {
	t.Parallel()
	for _, o := range []store.Option{store.WithWaitReplicas(-1, time.Second), store.WithWaitReplicas(1, 0)} {
		if _, err := store.NewClaims(newClient(t, standaloneURL(t)), o); !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("NewClaims with an invalid WithWaitReplicas = %v, want ErrInvalidArgument", err)
		}
	}
	o := store.WithWaitReplicas(3, time.Second)
	if _, err := store.NewClaims(newClient(t, standaloneURL(t)), o); err != nil {
		t.Errorf("NewClaims with WithWaitReplicas(3, 1s) = %v", err)
	}
	for name, f := range map[string]func() error{
		"NewMemoryClaims":  func() error { _, err := store.NewMemoryClaims(o); return err },
		"NewMemoryOutbox":  func() error { _, err := store.NewMemoryOutbox(o); return err },
		"NewMemoryRecords": func() error { _, err := store.NewMemoryRecords(o); return err },
	} {
		if err := f(); !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("%s with WithWaitReplicas = %v, want ErrInvalidArgument", name, err)
		}
	}
}

// TestWaitReplicasDo: the Do flows' lease heartbeats do not wait for replicas
// (a stalled replica does not cancel fn while the lease is held), and their
// final write does: fn ran, and the commit says it may not survive a failover.
func TestWaitReplicasDo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	primary, replica := newReplicated(t)
	// Long enough for the claim to be confirmed on a busy machine; the final
	// write, with the replica stalled, waits it out.
	opt := store.WithWaitReplicas(1, 2*time.Second)
	claims := must.Store(store.NewClaims(newClient(t, primary.URL()), opt))
	records := must.Store(store.NewRecords(newClient(t, primary.URL()), opt))
	// fn stalls the replica (it resumes once Do has returned) and runs for
	// three leases.
	stall := func(fnCtx context.Context) error {
		if err := replica.Pause(); err != nil {
			return err
		}
		select {
		case <-fnCtx.Done(): // heartbeats failed: the lease would be lost
			t.Errorf("fn's context ended while the lease was held: %v", context.Cause(fnCtx))
			return context.Cause(fnCtx)
		case <-time.After(1500 * time.Millisecond):
			return nil
		}
	}
	resume := func() {
		if err := replica.Resume(); err != nil {
			t.Fatal(err)
		}
	}
	ran, err := claims.Do(ctx, "do1", 500*time.Millisecond, stall)
	resume()
	if !ran || !errors.Is(err, store.ErrNotReplicated) {
		t.Errorf("Claims.Do with the replica stalled during fn = %v, %v; want true, ErrNotReplicated from the commit", ran, err)
	}
	_, _, err = records.Do(ctx, "do2", store.AcquireOptions{Lease: 500 * time.Millisecond},
		func(fnCtx context.Context) ([]byte, error) { return []byte("r"), stall(fnCtx) })
	resume()
	if !errors.Is(err, store.ErrNotReplicated) {
		t.Errorf("Records.Do with the replica stalled during fn = %v; want ErrNotReplicated from the final update", err)
	}
}

// TestWaitReplicasClusterReplicas: a cluster of three masters, each with a
// replica. A ClaimMany over many slots is one script call per slot group,
// spread over the three masters; each group's WAIT must run on the connection
// that ran its script (a WAIT on any other connection has no write to wait
// for and answers at once with every replica, a silent success). With every
// replica up, every key is on a replica when ClaimMany returns; with one
// master's replica stalled, the batch reports ErrNotReplicated naming an id
// of that master's, and only that master's groups fail (the others'
// results, and AppendMany on the other masters, are confirmed).
func TestWaitReplicasClusterReplicas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// (No diskless-sync delay: each replica's first sync starts at once.)
	cl := newCluster(t, 3, redisproc.Options{Args: []string{"--repl-diskless-sync-delay", "0"}})
	replicas := make([]*redisproc.Server, len(cl.Nodes))
	for i, m := range cl.Nodes {
		replicas[i] = newClusterReplica(t, m)
	}
	url := cl.Nodes[0].URL()
	claims, err := store.OpenClaims(url, store.WithWaitReplicas(1, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer claims.Close()
	ids := func(prefix string) []string {
		out := make([]string, 60)
		for i := range out {
			out[i] = prefix + strconv.Itoa(i)
		}
		return out
	}
	dbsize := func() int {
		n := 0
		for _, r := range replicas {
			v, err := r.Do("DBSIZE")
			if err != nil {
				t.Fatal(err)
			}
			k, _ := strconv.Atoi(v)
			n += k
		}
		return n
	}
	got, err := claims.ClaimMany(ctx, ids("up"))
	if err != nil {
		t.Fatalf("ClaimMany with every replica up: %v", err)
	}
	for i, won := range got {
		if !won {
			t.Errorf("ClaimMany: up%d not claimed", i)
		}
	}
	if n := dbsize(); n != 60 {
		t.Errorf("the replicas hold %d keys when ClaimMany returned, want 60", n)
	}

	// With one replica stalled: a timeout every other replica meets even on a
	// busy machine, and the stalled one's writes wait out.
	short, err := store.OpenClaims(url, store.WithWaitReplicas(1, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer short.Close()
	shortOutbox, err := store.OpenOutbox(url, store.WithWaitReplicas(1, time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer shortOutbox.Close()
	outbox, err := store.OpenOutbox(url, store.WithWaitReplicas(1, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer outbox.Close()
	named := regexp.MustCompile(`claim "([^"]+)"`)
	for i, r := range replicas {
		if err := r.Pause(); err != nil {
			t.Fatal(err)
		}
		batch := ids(fmt.Sprintf("stall%d-", i))
		got, err := short.ClaimMany(ctx, batch)
		m := named.FindStringSubmatch(fmt.Sprint(err))
		switch {
		case !errors.Is(err, store.ErrNotReplicated):
			t.Errorf("master %d's replica stalled: ClaimMany = %v, want ErrNotReplicated", i, err)
		case m == nil:
			t.Errorf("master %d's replica stalled: ClaimMany's error %q names no id", i, err)
		default:
			if v, err := cl.Nodes[i].Do("EXISTS", "bq:idemp:"+m[1]); err != nil || v != "1" {
				t.Errorf("master %d's replica stalled: ClaimMany's error names %s, which is not on that master (EXISTS: %q, %v)", i, m[1], v, err)
			}
		}
		for j, won := range got {
			if !won {
				t.Errorf("master %d's replica stalled: %s not claimed", i, batch[j])
			}
		}
		// Appends on every master: only the stalled one's say so.
		for j := range cl.Nodes {
			conn := connOn(t, cl.Nodes[j], "gateway:outbox:")
			o := outbox
			if i == j {
				o = shortOutbox
			}
			_, err := o.AppendMany(ctx, conn, []store.Outgoing{{ID: "a", Payload: []byte("p")}, {Payload: []byte("q")}})
			if stalled := i == j; stalled != errors.Is(err, store.ErrNotReplicated) || (!stalled && err != nil) {
				t.Errorf("master %d's replica stalled: AppendMany on master %d = %v", i, j, err)
			}
		}
		if err := r.Resume(); err != nil {
			t.Fatal(err)
		}
	}
}

// newClusterReplica starts a cluster node and makes it a replica of master m,
// then waits until m counts it online and it has synced.
func newClusterReplica(t *testing.T, m *redisproc.Server) *redisproc.Server {
	t.Helper()
	r := newServer(t, redisproc.Options{Cluster: true})
	id, err := m.Do("CLUSTER", "MYID")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Do("CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(m.Port)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		// REPLICATE fails until the MEET handshake has made m known.
		_, err := r.Do("CLUSTER", "REPLICATE", id)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("CLUSTER REPLICATE %s: %v", id, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := redisproc.WaitLinked(m, r, time.Until(deadline)); err != nil {
		t.Fatalf("%s never became %s's replica: %v", r.Addr, m.Addr, err)
	}
	return r
}

// connOn returns a connection id whose key (prefix + id) lives on node n.
func connOn(t *testing.T, n *redisproc.Server, prefix string) string {
	t.Helper()
	owns := ownsSlot(t, n)
	for i := 0; ; i++ {
		conn := "conn" + strconv.Itoa(i)
		v, err := n.Do("CLUSTER", "KEYSLOT", prefix+conn)
		if err != nil {
			t.Fatal(err)
		}
		slot, _ := strconv.Atoi(v)
		if owns(slot) {
			return conn
		}
	}
}

// TestWaitReplicasObserved: a write its replicas did not confirm is reported
// to the store's Observer with outcome error and ErrNotReplicated, never as a
// success: single writes and batches alike (a ClaimMany or AppendMany whose
// group was not confirmed: one error event for all its items). Reads do not
// wait and report their result.
func TestWaitReplicasObserved(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	primary, replica := newReplicated(t)
	var mu sync.Mutex
	var events []store.Event
	obs := store.WithObserver(store.ObserverFunc(func(_ context.Context, e store.Event) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	}))
	take := func() []store.Event {
		mu.Lock()
		defer mu.Unlock()
		out := events
		events = nil
		return out
	}
	wait := store.WithWaitReplicas(1, 300*time.Millisecond)
	claims := must.Store(store.NewClaims(newClient(t, primary.URL()), wait, obs))
	outbox := must.Store(store.NewOutbox(newClient(t, primary.URL()), wait, obs))
	records := must.Store(store.NewRecords(newClient(t, primary.URL()), wait, obs))
	// A message to ack, through a store that does not wait (a busy machine
	// may take longer than 300 ms to confirm it).
	if _, err := must.Store(store.NewOutbox(newClient(t, primary.URL()))).AppendWithID(ctx, "c", "m0", nil); err != nil {
		t.Fatal(err)
	}
	if err := replica.Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := replica.Resume(); err != nil {
			t.Error(err)
		}
	}()
	type want struct {
		op string
		n  int
	}
	for _, tc := range []struct {
		name string
		run  func() error
		want want
	}{
		{"Claim", func() error { _, err := claims.Claim(ctx, "o1"); return err }, want{"claim", 1}},
		{"ClaimMany", func() error { _, err := claims.ClaimMany(ctx, []string{"o2", "o3", "o4"}); return err }, want{"claim_many", 3}},
		{"ClaimMany, a duplicate", func() error { _, err := claims.ClaimMany(ctx, []string{"o1", "o5"}); return err }, want{"claim_many", 2}},
		{"AppendWithID", func() error { _, err := outbox.AppendWithID(ctx, "c", "m1", nil); return err }, want{"append", 1}},
		{"AppendMany", func() error {
			_, err := outbox.AppendMany(ctx, "c", []store.Outgoing{{ID: "m2"}, {ID: "m1"}})
			return err
		}, want{"append_many", 2}},
		{"Ack", func() error { return outbox.Ack(ctx, "c", "m0", 1) }, want{"ack", 1}},
		{"Acquire", func() error { _, _, err := records.Acquire(ctx, "r1", 0); return err }, want{"acquire", 1}},
	} {
		err := tc.run()
		got := take()
		if !errors.Is(err, store.ErrNotReplicated) {
			t.Errorf("%s = %v, want ErrNotReplicated", tc.name, err)
		}
		if len(got) != 1 {
			t.Errorf("%s: %d events %+v, want one error event", tc.name, len(got), got)
			continue
		}
		e := got[0]
		if e.Op != tc.want.op || e.N != tc.want.n || e.Outcome != store.Outcome("error") || !errors.Is(e.Err, store.ErrNotReplicated) {
			t.Errorf("%s: event op %q n %d outcome %q err %v; want op %q n %d, outcome error with ErrNotReplicated",
				tc.name, e.Op, e.N, e.Outcome, e.Err, tc.want.op, tc.want.n)
		}
	}
	// A read does not wait, and reports what it read.
	if _, err := claims.SeenMany(ctx, []string{"o1", "o2"}); err != nil {
		t.Fatal(err)
	}
	if got := take(); len(got) != 1 || got[0].Outcome != store.Outcome("seen") || got[0].N != 2 || got[0].Err != nil {
		t.Errorf("SeenMany's events %+v, want seen N=2", got)
	}
}
