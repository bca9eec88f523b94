package store

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
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
		return rueidis.ClientOption{}, openError(rawURL, err)
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

// openError is err from opening rawURL, for an error message: the URL without
// its password ((*url.URL).Redacted), and err's text with the password cut out
// too (url.Parse quotes the whole URL). When the password had to be cut from
// err's text, the result wraps ErrInvalidArgument instead of err, so no
// errors.Unwrap reaches the password either.
func openError(rawURL string, err error) error {
	shown, secret := redactURL(rawURL)
	if secret == "" || !strings.Contains(err.Error(), secret) {
		return fmt.Errorf("redisonce: open %s: %w", shown, err)
	}
	text := strings.ReplaceAll(err.Error(), secret, "xxxxx")
	if errors.Is(err, ErrInvalidArgument) {
		return fmt.Errorf("redisonce: open %s: %s", shown, text)
	}
	return fmt.Errorf("redisonce: open %s: %w: %s", shown, ErrInvalidArgument, text)
}

// redactURL returns rawURL quoted with its password replaced by "xxxxx", and
// the password ("" when there is none). A URL that does not parse has the
// text between "://" and the last "@" before the path treated as userinfo.
func redactURL(rawURL string) (shown, secret string) {
	if u, err := url.Parse(rawURL); err == nil {
		if pw, ok := u.User.Password(); ok && pw != "" {
			return fmt.Sprintf("%q", u.Redacted()), pw
		}
		return fmt.Sprintf("%q", rawURL), ""
	}
	_, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return fmt.Sprintf("%q", rawURL), ""
	}
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return fmt.Sprintf("%q", rawURL), ""
	}
	_, pw, ok := strings.Cut(rest[:at], ":")
	if !ok || pw == "" {
		return fmt.Sprintf("%q", rawURL), ""
	}
	return fmt.Sprintf("%q", strings.Replace(rawURL, ":"+pw+"@", ":xxxxx@", 1)), pw
}

// RedactURL returns rawURL without its password, for a message or a log.
func RedactURL(rawURL string) string {
	shown, _ := redactURL(rawURL)
	s, _ := strconv.Unquote(shown)
	return s
}
