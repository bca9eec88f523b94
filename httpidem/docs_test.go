package httpidem_test

// The code of the Go snippets of README.md and docs/integrations.md about
// this package: regions (// snippet:NAME ... // snippet:end) that
// TestDocSnippets (root module) compares with the documents. Compiled by
// every `go test` of this package, not run (it needs a Redis); Example
// (example_test.go) runs the same middleware on the memory store.

import (
	"net/http"

	"github.com/redisonce/redisonce/httpidem"
	"github.com/redisonce/redisonce/store"
)

func createPayment(http.ResponseWriter, *http.Request) {}

func docDropIn() error {
	// snippet:dropin
	rs, err := store.OpenRecords("redis://localhost:6379", store.WithPrefix("http-idem:")) // responses kept 24 h
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /payments", createPayment)
	return http.ListenAndServe(":8080", httpidem.Middleware(rs)(mux))
	// snippet:end
}
