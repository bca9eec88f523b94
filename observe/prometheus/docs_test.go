package redisonceprom_test

// The code of the Go snippet of docs/operating.md about this module: a region
// (// snippet:NAME ... // snippet:end) that TestDocSnippets (root module)
// compares with the document. Compiled by every `go test` of this module;
// Example (example_test.go) runs the same collector.

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/rueidis"

	redisonceprom "github.com/redisonce/redisonce/observe/prometheus"
	"github.com/redisonce/redisonce/store"
)

func docPrometheus(client rueidis.Client) error {
	// snippet:prometheus
	obs := redisonceprom.New()
	prometheus.MustRegister(obs) // any prometheus.Registerer
	outbox, err := store.NewOutbox(client, store.WithObserver(obs))
	// snippet:end
	_ = outbox
	return err
}
