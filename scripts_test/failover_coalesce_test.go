package scripts_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
)

// TestFailoverCoalesce: a primary and its replica; a Coalescer with
// WithWaitReplicas(1, ...) on the primary, triggered by three goroutines
// while runs take 80 ms; in the middle of the burst the replica stalls
// (SIGSTOP) for 300 ms, the primary is SIGKILLed, and the replica is resumed
// and promoted (REPLICAOF NO ONE). A Coalescer on the new primary
// sweeps until the key is idle. No acknowledged trigger (Trigger returned
// without an error, ran or kept: with WithWaitReplicas, on the replica) is
// lost: each is covered by a completed run that started after it was sent,
// with its payload or one that may have arrived after it (the payload's
// Trigger returned after it was sent).
// Without WithWaitReplicas the same load can lose kept triggers (the primary
// acknowledged them alone); the test only reports that count.
func TestFailoverCoalesce(t *testing.T) {
	for _, wait := range []bool{true, false} {
		name := "WaitReplicas"
		if !wait {
			name = "NoWait"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			lost, acked := runFailoverCoalesce(t, wait)
			if wait && lost > 0 {
				t.Errorf("%d of %d acknowledged triggers lost in the failover with WithWaitReplicas", lost, acked)
			}
			t.Logf("%s: %d acknowledged triggers, %d lost", name, acked, lost)
		})
	}
}

func runFailoverCoalesce(t *testing.T, wait bool) (lost, acked int) {
	primary, replica := newReplicated(t)
	prefix := uniquePrefix(t)
	const lease = 400 * time.Millisecond
	type runRec struct {
		start     time.Time
		payload   string
		completed bool
	}
	var mu sync.Mutex
	var runs []*runRec
	fn := func(ctx context.Context, key string, payload []byte) error {
		r := &runRec{start: time.Now(), payload: string(payload)}
		mu.Lock()
		runs = append(runs, r)
		mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(80 * time.Millisecond):
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		mu.Lock()
		r.completed = true
		mu.Unlock()
		return nil
	}
	opts := []store.Option{store.WithPrefix(prefix)}
	if wait {
		opts = append(opts, store.WithWaitReplicas(1, 2*time.Second))
	}
	c1 := must.Store(store.NewCoalescer(newClient(t, primary.URL()), fn, store.CoalesceOptions{Lease: lease}, opts...))
	defer c1.Close()
	ctx, stop := context.WithCancel(context.Background())
	// Each trigger's payload is unique: when it was sent, and when its
	// Trigger returned (acknowledged) or gave up (an error: at most 1 s).
	type trig struct{ sent, back time.Time }
	var sent []trig
	byPayload := map[string]trig{}
	var wg sync.WaitGroup
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				at := time.Now()
				tctx, cancel := context.WithTimeout(ctx, time.Second)
				p := fmt.Sprintf("w%d-%d", w, i)
				_, err := c1.Trigger(tctx, "k", []byte(p))
				cancel()
				mu.Lock()
				byPayload[p] = trig{at, time.Now()}
				mu.Unlock()
				if err == nil {
					mu.Lock()
					sent = append(sent, trig{at, time.Now()})
					mu.Unlock()
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	// Kill the primary in the middle of the burst: once 30 triggers were
	// acknowledged (a busy machine may be slow to confirm the first ones).
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		n := len(sent)
		mu.Unlock()
		if n >= 30 || time.Now().After(deadline) {
			break
		}
	}
	// The replica stalls (SIGSTOP) and the primary alone acknowledges
	// writes for 300 ms (without WAIT: they are lost with it), then the
	// primary dies and the replica, resumed, is promoted.
	if err := replica.Pause(); err != nil {
		t.Fatal(err)
	}
	// Nothing more reaches it (what its socket holds it would read on resuming).
	if _, err := primary.Do("CLIENT", "KILL", "TYPE", "replica"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if err := primary.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := replica.Resume(); err != nil {
		t.Fatal(err)
	}
	if _, err := replica.Do("REPLICAOF", "NO", "ONE"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	stop()
	wg.Wait()
	// The new primary (no replica of its own: no WAIT): its Coalescer takes
	// what the old one left (a next, or a run whose holder is gone, after
	// its lease).
	c2 := must.Store(store.NewCoalescer(newClient(t, replica.URL()), fn, store.CoalesceOptions{Lease: lease}, store.WithPrefix(prefix)))
	defer c2.Close()
	for deadline := time.Now().Add(5 * lease); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, err := c2.Sweep(context.Background()); err != nil {
			t.Fatalf("Sweep on the new primary: %v", err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sent) == 0 {
		t.Fatal("no trigger acknowledged before the failover")
	}
	// A payload arrived at the latest when its Trigger returned or when a
	// run of it started (a Trigger that ran it returns after the run).
	arrived := map[string]time.Time{}
	for p, x := range byPayload {
		arrived[p] = x.back
	}
	for _, r := range runs {
		if a, ok := arrived[r.payload]; ok && r.start.Before(a) {
			arrived[r.payload] = r.start
		}
	}
	for _, x := range sent {
		covered := false
		for _, r := range runs {
			// A run covers x if it started after x was sent, with x's payload
			// or one that can have arrived after x.
			if r.completed && !r.start.Before(x.sent) && arrived[r.payload].After(x.sent) {
				covered = true
				break
			}
		}
		if !covered {
			lost++
		}
	}
	return lost, len(sent)
}
