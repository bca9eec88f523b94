package httpidem_test

import (
	"testing"

	"github.com/redisonce/redisonce/httpidem/httpidemtest"
	"github.com/redisonce/redisonce/store"
)

// The suite on the in-memory store; scripts_test runs it on Redis.
func TestMiddlewareMemory(t *testing.T) {
	httpidemtest.TestMiddleware(t, httpidemtest.Harness{
		New: func(t *testing.T) store.RecordStore { return store.NewMemoryRecords() },
	})
}
