package redisonceotel_test

// The code of the Go snippet of docs/operating.md about this module: a region
// (// snippet:NAME ... // snippet:end) that TestDocSnippets (root module)
// compares with the document. Compiled by every `go test` of this module;
// Example (example_test.go) runs the same observer.

import (
	"github.com/redis/rueidis"

	redisonceotel "github.com/redisonce/redisonce/observe/otel"
	"github.com/redisonce/redisonce/store"
)

func docOtel(client rueidis.Client) error {
	// snippet:otel
	obs, err := redisonceotel.New() // the global TracerProvider and MeterProvider; options to pass others
	if err != nil {
		return err
	}
	claims, err := store.NewClaims(client, store.WithObserver(obs))
	// snippet:end
	_ = claims
	return err
}
