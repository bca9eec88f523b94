package store_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/redisonce/redisonce/store"
	// The example below imports the package under the name idempotency, as
	// an application may.
	idempotency "github.com/redisonce/redisonce/store"
)

// An HTTP API that takes an Idempotency-Key header: the first request creates
// the order, a retry with the same key gets the stored response back, a
// concurrent retry is told to come back later, the same key with a different
// body is refused, and a declined card (a final outcome, marked with
// store.Permanent) is answered the same way on every retry. Any other error —
// the provider's 503, the client hanging up — drops the record, so a retry
// runs again. With Redis, make the store with
// store.OpenRecords("redis://localhost:6379") (records live 24 hours); the
// memory twin here behaves the same.
func ExampleRecords_Do() {
	records, err := store.NewMemoryRecords()
	if err != nil {
		log.Fatal(err)
	}
	defer records.Close()
	orders := 0
	errDeclined := errors.New("card declined")

	createOrder := func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		if key == "" {
			http.Error(w, "Idempotency-Key is required", http.StatusBadRequest)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		sum := sha256.Sum256(append([]byte(r.Method+" "+r.URL.Path+"\n"), body...))
		opts := store.AcquireOptions{
			Lease:       10 * time.Second, // Do renews it while the handler runs
			Fingerprint: hex.EncodeToString(sum[:]),
		}
		result, replayed, err := records.Do(r.Context(), "orders:"+key, opts, func(ctx context.Context) ([]byte, error) {
			if string(body) == "stolen card" {
				// A final answer: stored, and replayed to every retry.
				return nil, store.Permanent(errDeclined)
			}
			orders++ // the effect: charge the card, insert the row...
			return fmt.Appendf(nil, `{"order":%d,"item":%q}`, orders, body), nil
		})
		switch {
		case errors.Is(err, store.ErrFailed):
			// A retry of a declined request: result is the stored error text.
			http.Error(w, string(result), http.StatusPaymentRequired)
		case errors.Is(err, errDeclined):
			http.Error(w, err.Error(), http.StatusPaymentRequired)
		case errors.Is(err, store.ErrInFlight):
			w.Header().Set("Retry-After", "1")
			http.Error(w, "a request with this key is in progress", http.StatusConflict)
		case errors.Is(err, store.ErrFingerprintMismatch):
			http.Error(w, "this key was used with a different request", http.StatusUnprocessableEntity)
		case err != nil:
			http.Error(w, err.Error(), http.StatusInternalServerError)
		default:
			if replayed {
				w.Header().Set("Idempotent-Replayed", "true")
			}
			w.Write(result)
		}
	}

	post := func(key, body string) {
		req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(body))
		req.Header.Set("Idempotency-Key", key)
		rec := httptest.NewRecorder()
		createOrder(rec, req)
		fmt.Println(rec.Code, rec.Header().Get("Idempotent-Replayed") == "true", strings.TrimSpace(rec.Body.String()))
	}
	post("k-1", "book") // first request: runs
	post("k-1", "book") // retry: replayed
	post("k-1", "lamp") // same key, other body: refused
	post("k-2", "lamp") // another key: runs
	post("k-3", "stolen card")
	post("k-3", "stolen card") // retry: the same answer, fn does not run again
	// Output:
	// 200 false {"order":1,"item":"book"}
	// 200 true {"order":1,"item":"book"}
	// 422 false this key was used with a different request
	// 200 false {"order":2,"item":"lamp"}
	// 402 false card declined
	// 402 false card declined
}

// The contract's example: the API
// acquires a key before it enqueues a job, and the worker stores the job's
// status when it is done.
func ExampleNewMemoryRecords() {
	store, err := idempotency.NewMemoryRecords() // or idempotency.NewRecords(redisClient)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	// API path: acquire before enqueueing.
	record, acquired, _ := store.Acquire(ctx, "export:123", 24*time.Hour)
	if acquired {
		_ = record
	}

	// Worker path: update status after processing.
	status := idempotency.StatusCompleted
	payload := []byte("export-id")
	_ = store.Update(ctx, "export:123", idempotency.Update{
		Status:  &status,
		Payload: &payload,
	})

	updated, _, _ := store.Get(ctx, "export:123")
	fmt.Println(updated.Key, updated.Status)

	// Output: export:123 completed
}
