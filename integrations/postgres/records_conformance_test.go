package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/redisonce/redisonce/store"
	"github.com/redisonce/redisonce/store/storetest"
)

// storeTTL is the retention opts give a store: the Redis store's WithTTL,
// read back from a memory store built with the same options (an option is
// opaque outside package store), its observer dropped. ok is false when the
// options are invalid.
func storeTTL(opts []store.Option) (ttl time.Duration, ok bool) {
	m := store.NewMemoryRecords(append(opts[:len(opts):len(opts)], store.WithObserver(nil))...)
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
				New: func(t *testing.T, opts ...store.Option) store.RecordStore {
					e := srv.env(t)
					var ropts []RecordsOption
					if ttl, ok := storeTTL(opts); ok {
						ropts = append(ropts, WithRecordsTTL(ttl))
					}
					var lease store.RecordStore
					if inner == "redis" {
						lease = store.NewRecords(e.client, append([]store.Option{store.WithPrefix(e.prefix)}, opts...)...)
					} else {
						lease = store.NewMemoryRecords(opts...)
					}
					s, err := NewRecords(e.pool, lease, append(ropts, WithRecordsTable(e.table))...)
					if err != nil {
						t.Fatal(err)
					}
					if err := s.CreateTable(context.Background()); err != nil {
						t.Fatal(err)
					}
					return s
				},
				Wait:            time.Sleep,
				DoMakesOwnCalls: true,
			})
		})
	}
}

// TestRecordsTableOption: a schema-qualified table is created and used; a
// bad name or a negative TTL is refused at construction.
func TestRecordsTableOption(t *testing.T) {
	srv := startRecServers(t)
	e := srv.env(t)
	ctx := context.Background()
	e.exec(t, `CREATE SCHEMA app`)
	s := e.records(t, WithRecordsTable("app.Idem"))
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
	lease := store.NewMemoryRecords()
	for _, o := range []RecordsOption{
		WithRecordsTable(""), WithRecordsTable("a;drop table x"), WithRecordsTable(`a"b`), WithRecordsTable("1a"),
		WithRecordsTable("a.b.c"), WithRecordsTTL(-time.Second), nil,
	} {
		if _, err := NewRecords(e.pool, lease, o); err == nil {
			t.Errorf("NewRecords with a bad option: no error")
		}
	}
	if _, err := NewRecords(nil, lease); err == nil {
		t.Error("NewRecords(nil db): no error")
	}
	if _, err := NewRecords(e.pool, nil); err == nil {
		t.Error("NewRecords(nil lease): no error")
	}
}
