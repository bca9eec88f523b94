package scripts_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redisonce/redisonce/store"
)

// TestRecordsUpgradeFromLayout0: records written before issue 23 (layout 0,
// the nine-field hash) beside records in layout 1, under one prefix, through
// the Go store. The old ones read the same (Get, the duplicate's Do), a
// pending one whose lease passed is taken over at a higher fence, and every
// write leaves a layout-1 string with the record's expiry kept; the layout-0
// records nobody writes stay as they are.
func TestRecordsUpgradeFromLayout0(t *testing.T) {
	ctx := context.Background()
	for name, url := range map[string]func(*testing.T) string{"standalone": standaloneURL, "cluster": clusterURL} {
		t.Run(name, func(t *testing.T) {
			c := newClient(t, url(t))
			prefix := uniquePrefix(t)
			s := store.NewRecords(c, store.WithPrefix(prefix))
			now := time.Now().UnixMilli()
			far := now + time.Hour.Milliseconds()
			ms := func(v int64) string { return strconv.FormatInt(v, 10) }
			old := func(id, status, payload string, lease int64, fence string) {
				do(t, c, "HSET", prefix+id, "status", status, "payload", payload, "created_ms", ms(now-1000),
					"updated_ms", ms(now-500), "expires_ms", ms(far), "lease_ms", ms(lease), "fence", fence, "fp", "", "token", "old-owner")
				do(t, c, "PEXPIREAT", prefix+id, ms(far))
			}
			old("done", "completed", "old result", 0, "3")
			old("stalled", "pending", "", now-10, "7") // its owner died: the lease passed
			old("untouched", "completed", "kept", 0, "1")
			// A layout-1 record beside them.
			if _, _, err := s.Do(ctx, "new", store.AcquireOptions{Lease: time.Minute}, func(context.Context) ([]byte, error) {
				return []byte("new result"), nil
			}); err != nil {
				t.Fatal(err)
			}

			// Reads: the same record as layout 1 would give, token hidden.
			got, ok, err := s.Get(ctx, "done")
			if err != nil || !ok || got.Status != store.StatusCompleted || string(got.Payload) != "old result" || got.Fence != 3 ||
				got.Token != "" || got.CreatedAt.UnixMilli() != now-1000 || got.ExpiresAt.UnixMilli() != far {
				t.Fatalf("Get of a layout-0 record = %+v, %v, %v", got, ok, err)
			}
			res, replayed, err := s.Do(ctx, "done", store.AcquireOptions{Lease: time.Minute}, func(context.Context) ([]byte, error) {
				t.Error("fn ran on a completed layout-0 record")
				return nil, nil
			})
			if string(res) != "old result" || !replayed || err != nil {
				t.Errorf("Do of a completed layout-0 record = %q, %v, %v; want the replay", res, replayed, err)
			}
			if k := rawRecord(t, c, prefix+"done"); k.Type != "hash" {
				t.Errorf("a replay rewrote the layout-0 record: %+v (only writes do)", k)
			}

			// A takeover of a layout-0 record: a fence above its 7 (the
			// clock's), and layout 1 after.
			var lease store.Lease
			res, replayed, err = s.Do(ctx, "stalled", store.AcquireOptions{Lease: time.Minute}, func(ctx context.Context) ([]byte, error) {
				lease, _ = store.LeaseFromContext(ctx)
				return []byte("retried"), nil
			})
			if string(res) != "retried" || replayed || err != nil || lease.Fence <= 7 {
				t.Errorf("Do of a stalled layout-0 record = %q, %v, %v, fence %d; want fn run at a fence above 7", res, replayed, err, lease.Fence)
			}
			k := rawRecord(t, c, prefix+"stalled")
			if k.Type != "string" || k.Hash["status"] != "completed" || k.Hash["payload"] != "retried" || k.Hash["fence"] != strconv.FormatUint(lease.Fence, 10) ||
				k.Hash["created_ms"] != ms(now-1000) || k.Hash["expires_ms"] != ms(far) || k.PTTL < far-time.Now().UnixMilli()-5000 {
				t.Errorf("after the takeover the record is %+v; want layout 1, completed at the takeover's fence, created and expiry kept", k)
			}

			// An Update of a layout-0 record rewrites it too.
			st := store.StatusFailed
			recNoErr(t, s.Update(ctx, "done", store.Update{Status: &st}))
			if k := rawRecord(t, c, prefix+"done"); k.Type != "string" || k.Hash["status"] != "failed" || k.Hash["payload"] != "old result" || k.Hash["fence"] != "3" {
				t.Errorf("after Update the record is %+v; want layout 1, failed, payload and fence kept", k)
			}
			if k := rawRecord(t, c, prefix+"untouched"); k.Type != "hash" || k.Hash["payload"] != "kept" {
				t.Errorf("a record nobody wrote changed: %+v", k)
			}
			if got, ok, err := s.Get(ctx, "new"); err != nil || !ok || string(got.Payload) != "new result" {
				t.Errorf("the layout-1 record beside them: %+v, %v, %v", got, ok, err)
			}
		})
	}
}
