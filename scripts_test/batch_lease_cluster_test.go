package scripts_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redisonce/redisonce/internal/redisproc"
	"github.com/redisonce/redisonce/store"
)

// TestBatchLeaseSlotMigration: a Claims.Batch of 60 ids of one slot is
// claimed, then the slot starts moving to another master and stops half
// way (10 keys moved, the rest not), and every id's fn runs while it is so:
// the gathered commits of several keys of the slot get TRYAGAIN and are
// retried, and the migration ends 500 ms later. Per id: fn ran once, Do
// reports it committed, the key is processed on the slot's new master, and a
// second Batch finds every id a duplicate.
func TestBatchLeaseSlotMigration(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := newCluster(t, 3, redisproc.Options{})
	admin := newClient(t, cl.URL())
	tags, slots := tagsInSlots(t, cl.Nodes[0], 1)
	prefix := uniquePrefix(t)
	s, err := store.OpenClaims(cl.URL(), store.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ids := make([]string, 60)
	for i := range ids {
		ids[i] = fmt.Sprintf("{%s}m%d", tags[0], i)
	}
	b, err := s.Batch(ctx, ids, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	tryAgain := errorStat(t, admin, "TRYAGAIN")
	halfway, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	var pauses atomic.Int32
	go func() {
		done <- migrateSlot(cl, slots[0], cl.Nodes[0], cl.Nodes[1], 10, func() {
			if pauses.Add(1) != 2 { // after the first 10 keys moved
				return
			}
			close(halfway)
			select {
			case <-release:
			case <-time.After(20 * time.Second):
			}
		})
	}()
	select {
	case <-halfway:
	case err := <-done:
		t.Fatalf("the migration ended before the batch ran: %v", err)
	}
	time.AfterFunc(500*time.Millisecond, func() { close(release) })
	runs := make([]atomic.Int32, len(ids))
	errs := make([]error, len(ids))
	ran := make([]bool, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Go(func() {
			ran[i], errs[i] = b.Do(ctx, id, func(context.Context) error { runs[i].Add(1); return nil })
		})
	}
	wg.Wait()
	if err := <-done; err != nil {
		t.Fatalf("migration: %v", err)
	}
	if n := errorStat(t, admin, "TRYAGAIN") - tryAgain; n == 0 {
		t.Errorf("no TRYAGAIN was answered while the batch committed; the test proves nothing")
	}
	for i, id := range ids {
		if !ran[i] || errs[i] != nil || runs[i].Load() != 1 {
			t.Errorf("%s: Do = %v, %v, fn ran %d times; want true, nil, once", id, ran[i], errs[i], runs[i].Load())
		}
		if v, err := admin.Do(ctx, admin.B().Get().Key(prefix+id).Build()).ToString(); err != nil || v != "1" {
			t.Errorf("%s: key %q, %v; want 1 (processed)", id, v, err)
		}
	}
	again, err := s.Batch(ctx, ids, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	for _, id := range ids {
		if ran, err := again.Do(ctx, id, func(context.Context) error { return nil }); ran || err != nil {
			t.Errorf("%s again: %v, %v; want a duplicate", id, ran, err)
		}
	}
}
