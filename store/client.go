package store

import (
	"fmt"
	"time"

	"github.com/redis/rueidis"
)

// ClientOptions returns the rueidis options that OpenClaims, OpenOutbox and
// OpenRecords connect with: rueidis.ParseURL(url) (redis://, rediss://,
// unix://) plus the settings the stores are measured to run best with (see
// BENCHMARKS.md):
//
//   - DisableCache: true. The stores never use client-side caching, so the
//     per-connection cache and the CLIENT TRACKING handshake are pure cost.
//   - MaxFlushDelay: 20µs. Under concurrent load the connection's writer
//     waits up to 20µs after a flush to gather more commands into the next
//     write; a caller alone on the connection is never delayed (rueidis skips
//     the wait when a single request is in flight).
//
// Callers that build their own client for NewClaims, NewOutbox or NewRecords
// get the same behaviour by starting from these options:
//
//	opt, err := store.ClientOptions("redis://127.0.0.1:6379")
//	// ... adjust opt ...
//	c, err := rueidis.NewClient(opt)
func ClientOptions(url string) (rueidis.ClientOption, error) {
	opt, err := rueidis.ParseURL(url)
	if err != nil {
		return rueidis.ClientOption{}, fmt.Errorf("redisonce: open %q: %w", url, err)
	}
	opt.DisableCache = true
	opt.MaxFlushDelay = 20 * time.Microsecond
	return opt, nil
}
