package storetest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redisonce/redisonce/store"
)

// TestRecordsOnExtend checks that Records.Do calls OnExtend's
// fn after each successful renewal, with fn's lease, and never after Do
// returned. (TestClaims' DoReportsExtensions does the same for claims.) s must
// be empty of the key "k".
func TestRecordsOnExtend(t *testing.T, s *store.Records) {
	t.Helper()
	const lease = 900 * time.Millisecond // beats every 300 ms: room for a loaded machine
	var mu sync.Mutex
	var heard []store.Lease
	ctx := store.OnExtend(context.Background(), func(l store.Lease) {
		mu.Lock()
		heard = append(heard, l)
		mu.Unlock()
	})
	var held store.Lease
	_, _, err := s.Do(ctx, "k", store.AcquireOptions{TTL: time.Minute, Lease: lease}, func(ctx context.Context) ([]byte, error) {
		held, _ = store.LeaseFromContext(ctx)
		time.Sleep(2 * lease) // 6 beats are due
		return []byte("ok"), nil
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	mu.Lock()
	n := len(heard)
	for _, l := range heard {
		if l != held {
			t.Errorf("OnExtend got lease %+v, want fn's %+v", l, held)
		}
	}
	mu.Unlock()
	if n < 2 {
		t.Errorf("OnExtend was called %d times over 2 leases, want >= 2 (one per renewal, every lease/3)", n)
	}
	time.Sleep(lease)
	mu.Lock()
	defer mu.Unlock()
	if len(heard) != n {
		t.Errorf("OnExtend was called %d times after Do returned", len(heard)-n)
	}
}
