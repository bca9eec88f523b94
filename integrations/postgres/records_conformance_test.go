package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
	"github.com/redisonce/redisonce/store/storetest"
)

// storeTTL is the retention opts give a store: the Redis store's WithTTL,
// read back from a memory store built with the same options (an option is
// opaque outside package store), its observer dropped. ok is false when the
// options are invalid.
func storeTTL(opts []store.Option) (ttl time.Duration, ok bool) {
	m, err := store.NewMemoryRecords(append(opts[:len(opts):len(opts)], store.WithObserver(nil))...)
	if err != nil {
		return 0, false
	}
	defer m.Close()
	rec, _, err := m.Acquire(context.Background(), "ttl-probe", 0)
	if err != nil {
		return 0, false
	}
	if rec.ExpiresAt.IsZero() {
		return 0, true
	}
	return rec.ExpiresAt.Sub(rec.CreatedAt), true
}

// TestRecordsContract runs the store's conformance suite on Records, with
// the Redis store and with the memory twin as the lease store: every part
// applies (see the Records doc for what each method means with the row
// behind the Redis record).
func TestRecordsContract(t *testing.T) {
	srv := startRecServers(t)
	for _, inner := range []string{"redis", "memory"} {
		t.Run(inner, func(t *testing.T) {
			storetest.TestRecords(t, storetest.RecordsHarness{
				NewStore: func(t *testing.T, opts ...store.Option) (storetest.RecordStore, error) {
					e := srv.env(t)
					var ropts []RecordsOption
					if ttl, ok := storeTTL(opts); ok {
						ropts = append(ropts, WithRecordsTTL(ttl))
					}
					var lease *store.Records
					var err error
					if inner == "redis" {
						lease, err = store.NewRecords(e.client, append([]store.Option{store.WithPrefix(e.prefix)}, opts...)...)
					} else {
						lease, err = store.NewMemoryRecords(opts...)
					}
					if err != nil {
						return nil, err
					}
					s, err := NewRecords(lease, e.pool, append(ropts, WithRecordsTable(e.table))...)
					if err != nil {
						t.Fatal(err)
					}
					if err := s.CreateTable(context.Background()); err != nil {
						t.Fatal(err)
					}
					return s, nil
				},
				Wait: time.Sleep,
				// Each store here runs Postgres beside Redis on a shared
				// machine: leases and TTLs of 1.5x the Redis suite's.
				Tick:            150 * time.Millisecond,
				DoMakesOwnCalls: true,
			})
		})
	}
}

// TestRecordsTableOption: a schema-qualified table is created and used; a
// bad option, a nil store or a nil database is refused at construction.
func TestRecordsTableOption(t *testing.T) {
	srv := startRecServers(t)
	e := srv.env(t)
	ctx := context.Background()
	e.exec(t, `CREATE SCHEMA app`)
	s := e.records(t, WithRecordsTable("app", "Idem"))
	if _, _, err := s.Do(ctx, "k", store.AcquireOptions{Lease: time.Second}, func(context.Context) ([]byte, error) { return []byte("r"), nil }); err != nil {
		t.Fatal(err)
	}
	if n := e.count(t, `SELECT count(*) FROM app."Idem" WHERE status = 'completed'`); n != 1 {
		t.Errorf("rows in app.\"Idem\" = %d, want 1", n)
	}
	if n := e.count(t, `SELECT count(*) FROM pg_indexes WHERE schemaname = 'app' AND indexname = 'Idem_expires_at'`); n != 1 {
		t.Errorf("the expiry index: %d found, want 1", n)
	}
	// CreateTable again changes nothing.
	if err := s.CreateTable(ctx); err != nil {
		t.Errorf("CreateTable again: %v", err)
	}
	// A store on a table nobody created says so.
	missing, err := NewRecords(must.Store(store.NewMemoryRecords()), e.pool, WithRecordsTable("nope"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := missing.Do(ctx, "k", store.AcquireOptions{Lease: time.Second}, func(context.Context) ([]byte, error) { return nil, nil }); err == nil || !strings.Contains(err.Error(), "CreateTable") {
		t.Errorf("Do on a missing table: %v, want an error naming CreateTable", err)
	}
	lease := must.Store(store.NewMemoryRecords())
	for name, o := range map[string]RecordsOption{
		"empty name": WithRecordsTable(""), "no parts": WithRecordsTable(), "three parts": WithRecordsTable("a", "b", "c"),
		"NUL": WithRecordsTable("a\x00b"), "64 bytes": WithRecordsTable(strings.Repeat("t", 64)), "bad UTF-8": WithRecordsTable("\xff"),
		"negative TTL": WithRecordsTTL(-time.Second), "batch 0": WithRecordsPruneBatch(0), "batch too big": WithRecordsPruneBatch(1_000_001),
	} {
		if _, err := NewRecords(lease, e.pool, o); !errors.Is(err, store.ErrInvalidArgument) {
			t.Errorf("NewRecords(%s) = %v, want ErrInvalidArgument", name, err)
		}
	}
	if _, err := NewRecords(lease, nil); !errors.Is(err, store.ErrInvalidArgument) {
		t.Errorf("NewRecords(nil db) = %v", err)
	}
	if _, err := NewRecords(lease, (*pgxpool.Pool)(nil)); !errors.Is(err, store.ErrInvalidArgument) {
		t.Errorf("NewRecords(nil *pgxpool.Pool) = %v", err)
	}
	if _, err := NewRecords(nil, e.pool); !errors.Is(err, store.ErrInvalidArgument) {
		t.Errorf("NewRecords(nil lease) = %v", err)
	}
	// A table name is quoted, never spliced: this one is created as named.
	e.exec(t, `CREATE TABLE x (); CREATE TABLE y ()`)
	odd := e.records(t, WithRecordsTable("odd\"; DROP TABLE x; --\nDROP TABLE y; --"))
	if _, _, err := odd.Do(ctx, "k", store.AcquireOptions{Lease: time.Second}, func(context.Context) ([]byte, error) { return []byte("r"), nil }); err != nil {
		t.Errorf("Do on an oddly named table: %v", err)
	}
	if n := e.count(t, `SELECT count(*) FROM pg_tables WHERE tablename IN ('x', 'y')`); n != 2 {
		t.Errorf("%d of tables x and y left after CreateTable on an odd name, want 2", n)
	}
}
