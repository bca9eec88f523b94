package postgres

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
)

// BenchmarkRecordsDo compares a first request (fn inserts one row) through
// Records — the row and the insert in one transaction — with the same
// request through the Redis store alone, the insert committed on its own
// (the window Records closes), and a duplicate through Records (replayed
// from Redis, no SQL). One goroutine; both servers local, fsync off.
func BenchmarkRecordsDo(b *testing.B) {
	srv := startRecServers(b)
	e := srv.env(b)
	s, err := NewRecords(must.Store(store.NewRecords(e.client, store.WithPrefix(e.prefix))), e.pool, WithRecordsTable(e.table))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := s.CreateTable(ctx); err != nil {
		b.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `CREATE TABLE bench_effects (id bigserial PRIMARY KEY, key text NOT NULL)`); err != nil {
		b.Fatal(err)
	}
	o := store.AcquireOptions{Lease: 10 * time.Second}
	b.Run("postgres/first", func(b *testing.B) {
		for i := range b.N {
			key := fmt.Sprintf("pg-%d", i)
			if _, _, err := s.Do(ctx, key, o, func(ctx context.Context) ([]byte, error) {
				tx, _ := Tx(ctx)
				_, err := tx.Exec(ctx, `INSERT INTO bench_effects (key) VALUES ($1)`, key)
				return []byte("ok"), err
			}); err != nil {
				b.Fatal(err)
			}
		}
	})
	redisOnly := must.Store(store.NewRecords(e.client, store.WithPrefix(e.prefix+"r:")))
	b.Run("redis-only/first", func(b *testing.B) {
		for i := range b.N {
			key := fmt.Sprintf("r-%d", i)
			if _, _, err := redisOnly.Do(ctx, key, o, func(ctx context.Context) ([]byte, error) {
				_, err := e.pool.Exec(ctx, `INSERT INTO bench_effects (key) VALUES ($1)`, key)
				return []byte("ok"), err
			}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("postgres/duplicate", func(b *testing.B) {
		for range b.N {
			if _, replayed, err := s.Do(ctx, "pg-0", o, func(context.Context) ([]byte, error) {
				return nil, fmt.Errorf("a duplicate ran")
			}); err != nil || !replayed {
				b.Fatal(replayed, err)
			}
		}
	})
}
