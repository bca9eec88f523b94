package store

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// A beat sent before the claim's reply came back (speculative) that finds
// the lease held, under OnExtend, races with confirm: confirm writes the
// Lease the beat reads for the hook. Run with -race: the beat must not read
// h.lease unsynchronised with confirm's write. Once confirmed, every hook
// call gets the confirmed lease.
func TestHeartbeatSpeculativeBeatWithOnExtend(t *testing.T) {
	const lease = 200 * time.Millisecond
	l := Lease{ID: "k", Token: "t1", Fence: 3}
	var mu sync.Mutex
	var got []Lease
	ctx := OnExtend(context.Background(), func(x Lease) {
		mu.Lock()
		got = append(got, x)
		mu.Unlock()
	})
	started := make(chan struct{}, 16)
	sent := time.Now()
	h := startHeartbeat(ctx, lease, sent, "do", errors.New("lost"), func(context.Context, *time.Time) (bool, error) {
		select {
		case started <- struct{}{}:
		default:
		}
		return true, nil
	})
	select {
	case <-started: // the first beat went out before confirm
	case <-time.After(5 * time.Second):
		h.stop()
		t.Fatal("no speculative beat")
	}
	// Let the beat finish reading (no synchronisation with it on purpose:
	// the race detector judges confirm's write against the beat's read).
	time.Sleep(lease / 8)
	h.confirm(l, sent)
	time.Sleep(lease / 2) // at least one confirmed beat
	h.stop()
	mu.Lock()
	defer mu.Unlock()
	if len(got) == 0 {
		t.Fatal("OnExtend was not called after confirm")
	}
	for _, x := range got {
		if x != l {
			t.Errorf("OnExtend got %+v, want the confirmed lease %+v", x, l)
		}
	}
}
