package scripts_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/internal/redisproc"
	"github.com/redisonce/redisonce/store"
)

// TestFaultConnectionLostBeforeDoFinalWrite: the callback of Do ran, and the
// connection dies before Do records the outcome (commit for Claims, the
// fenced Update for Records). The final write is safe to repeat, so the store
// retries it on a new connection: Do reports success and the id is marked
// done, instead of leaving a lease that would make a redelivery wait for it
// to expire and then run the callback a second time.
func TestFaultConnectionLostBeforeDoFinalWrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := newServer(t, redisproc.Options{})
	kill := func() {
		if _, err := srv.Do("CLIENT", "KILL", "TYPE", "normal"); err != nil {
			t.Fatal(err)
		}
	}
	// One connection, so the write after the kill is the one that finds it
	// dead, and the next Do runs on the connection the retry opened.
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, PipelineMultiplex: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	t.Run("claims", func(t *testing.T) {
		s := must.Store(store.NewClaims(c, store.WithPrefix(uniquePrefix(t))))
		for i := range 20 {
			id := "m" + string(rune('a'+i))
			ran, err := s.Do(ctx, id, time.Minute, func(context.Context) error { kill(); return nil })
			if !ran || err != nil {
				t.Fatalf("Do whose connection died before the commit = %v, %v; want true, nil", ran, err)
			}
			if ran, err := s.Do(ctx, id, time.Minute, func(context.Context) error { return nil }); ran || err != nil {
				t.Fatalf("redelivery = %v, %v; want false, nil (processed)", ran, err)
			}
		}
	})
	t.Run("records", func(t *testing.T) {
		s := must.Store(store.NewRecords(c, store.WithPrefix(uniquePrefix(t))))
		for i := range 20 {
			key := "k" + string(rune('a'+i))
			res, replayed, err := s.Do(ctx, key, store.AcquireOptions{Lease: time.Minute}, func(context.Context) ([]byte, error) {
				kill()
				return []byte("result"), nil
			})
			if err != nil || replayed || string(res) != "result" {
				t.Fatalf("Do whose connection died before the final update = %q, %v, %v; want result, false, nil", res, replayed, err)
			}
			res, replayed, err = s.Do(ctx, key, store.AcquireOptions{Lease: time.Minute}, func(context.Context) ([]byte, error) {
				t.Error("the callback ran again")
				return nil, nil
			})
			if err != nil || !replayed || string(res) != "result" {
				t.Fatalf("retry = %q, %v, %v; want the stored result replayed", res, replayed, err)
			}
		}
	})
}
