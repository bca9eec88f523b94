package httpidem_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/redisonce/redisonce/httpidem"
	"github.com/redisonce/redisonce/store"
)

// An API on an http.ServeMux whose POST /payments charges once per
// Idempotency-Key: a retry of the same request gets the first response again,
// marked Idempotent-Replayed. Keys are scoped to the caller (here the Basic
// auth user; in an API, the authenticated account), so one caller never gets
// another's response. In production the store is store.OpenRecords on Redis,
// shared by every server.
func Example() {
	charges := 0
	mux := http.NewServeMux()
	mux.HandleFunc("POST /payments", func(w http.ResponseWriter, r *http.Request) {
		charges++
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"payment":"pay_%d","amount":%s}`, charges, body)
	})
	records, err := store.NewMemoryRecords() // store.OpenRecords(redisURL) in production
	if err != nil {
		fmt.Println(err)
		return
	}
	idem, err := httpidem.Middleware(records, httpidem.WithScope(func(r *http.Request) string {
		user, _, _ := r.BasicAuth() // after authentication: the caller's identity
		return user
	}))
	if err != nil {
		fmt.Println(err)
		return
	}
	srv := httptest.NewServer(idem(mux))
	defer srv.Close()

	post := func(key, body string) {
		req, _ := http.NewRequest("POST", srv.URL+"/payments", strings.NewReader(body))
		req.Header.Set("Idempotency-Key", key)
		req.SetBasicAuth("alice", "secret")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		fmt.Printf("%d replayed=%q %s\n", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), strings.TrimSpace(string(b)))
	}
	post("order-1", "10")
	post("order-1", "10") // a retry: the same response, the card is not charged again
	post("order-1", "99") // the key reused for another request
	post("order-2", "5")
	fmt.Println("charges:", charges)
	// Output:
	// 201 replayed="" {"payment":"pay_1","amount":10}
	// 201 replayed="true" {"payment":"pay_1","amount":10}
	// 422 replayed="" {"type":"about:blank","title":"Unprocessable Entity","status":422,"detail":"this Idempotency-Key was used with a different request","header":"Idempotency-Key"}
	// 201 replayed="" {"payment":"pay_2","amount":5}
	// charges: 2
}
