package postgres_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/redisonce/redisonce/httpidem"
	"github.com/redisonce/redisonce/integrations/postgres"
	"github.com/redisonce/redisonce/store"
)

// accountOf is the authenticated caller's account id (your auth middleware
// puts it in the request).
func accountOf(r *http.Request) string { return r.Header.Get("X-Account") }

// An Idempotency-Key API whose stored responses commit with the handler's
// writes: httpidem over postgres.Records. The handler writes with the
// request's transaction (postgres.Tx); the charge and its 201 commit
// together, so a server killed between them never charges twice, and a
// response that is not stored (a 5xx, a panic) is rolled back with the
// charge, for the retry to run again.
func ExampleRecords_httpidem() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@localhost:5432/app")
	if err != nil {
		log.Fatal(err)
	}
	// Redis: the lease and the fast path (a duplicate never reaches Postgres).
	leases, err := store.OpenRecords("redis://localhost:6379", store.WithPrefix("http-idem:"))
	if err != nil {
		log.Fatal(err)
	}
	records, err := postgres.NewRecords(leases, pool) // the table: redisonce_records
	if err != nil {
		log.Fatal(err)
	}
	if err := records.CreateTable(ctx); err != nil { // or run records.sql in a migration
		log.Fatal(err)
	}
	go records.RunPruner(ctx, 5*time.Minute, func(err error) { log.Print(err) }) // retention, in bounded batches

	charge := func(w http.ResponseWriter, r *http.Request) {
		tx, _ := postgres.Tx(r.Context()) // the request's transaction
		var id int64
		err := tx.QueryRow(r.Context(), `INSERT INTO charges (account, amount) VALUES ($1, 100) RETURNING id`,
			accountOf(r)).Scan(&id)
		if err != nil {
			httpidem.NotDone(r) // nothing happened: rolled back, and a retry runs again
			http.Error(w, "charge failed", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated) // stored, and committed with the charge
		fmt.Fprintf(w, `{"charge":%d}`, id)
	}
	idem, err := httpidem.Middleware(records, httpidem.WithScope(accountOf))
	if err != nil {
		log.Fatal(err)
	}
	http.Handle("POST /charges", idem(http.HandlerFunc(charge)))
	log.Fatal(http.ListenAndServe(":8080", nil))
}

// Records.Do for a job: the ledger row and the stored result commit in one
// transaction; a retry of the job (same key) gets the result back instead
// of a second ledger row, even after the worker died between the SQL commit
// and Redis, or Redis lost the record.
func ExampleRecords_Do() {
	ctx := context.Background()
	var records *postgres.Records // postgres.NewRecords(leases, pool), as above
	if records == nil {
		return
	}
	res, replayed, err := records.Do(ctx, "refund:order-42", store.AcquireOptions{Lease: 30 * time.Second},
		func(ctx context.Context) ([]byte, error) {
			tx, _ := postgres.Tx(ctx)
			var id int64
			if err := tx.QueryRow(ctx, `INSERT INTO ledger (ref, amount) VALUES ('order-42', -100) RETURNING id`).Scan(&id); err != nil {
				return nil, err // rolled back; the key is given back for the retry
			}
			return fmt.Appendf(nil, "refund %d", id), nil
		})
	fmt.Println(string(res), replayed, err)
}
