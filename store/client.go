package store

import (
	"fmt"
	"net/url"
	"time"

	"github.com/redis/rueidis"
)

// ClientOptions returns the rueidis options that OpenClaims, OpenOutbox and
// OpenRecords connect with: rueidis.ParseURL(url) (redis://, rediss://,
// unix://) plus the settings the stores are measured to run best with (see
// BENCHMARKS.md).
//
// A URL with master_set names a Sentinel deployment, as rueidis.ParseURL
// reads it: the host and every addr parameter are sentinels, and the client
// follows the master that they name through failovers:
//
//	redis://:password@sentinel-1:26379?addr=sentinel-2:26379&addr=sentinel-3:26379&master_set=mymaster
//
// The URL's user and password then authenticate to the master AND to the
// sentinels (sentinels with requirepass; ParseURL alone sends them to the
// master only), rediss:// uses TLS for both, and the sentinels are asked
// again for the master every 5 s on top of their +switch-master events
// (Sentinel.TopologyRefreshInterval), so a missed event cannot pin the client
// to a demoted master. Sentinels with credentials of their own: start from
// these options and set Sentinel.Username and Sentinel.Password.
//
// The settings:
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
func ClientOptions(rawURL string) (rueidis.ClientOption, error) {
	opt, err := rueidis.ParseURL(rawURL)
	if err != nil {
		return rueidis.ClientOption{}, fmt.Errorf("redisonce: open %q: %w", redactURL(rawURL), err)
	}
	opt.DisableCache = true
	opt.MaxFlushDelay = 20 * time.Microsecond
	if opt.Sentinel.MasterSet != "" {
		opt.Sentinel.Username, opt.Sentinel.Password = opt.Username, opt.Password
		opt.Sentinel.TLSConfig = opt.TLSConfig
		opt.Sentinel.Dialer = opt.Dialer
		opt.Sentinel.TopologyRefreshInterval = 5 * time.Second
	}
	return opt, nil
}

// redactURL is rawURL without its password, for error messages.
func redactURL(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "(an unparsable URL)"
	}
	return u.Redacted()
}
