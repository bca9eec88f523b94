package store

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/internal/redact"
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
	if err := checkUserinfo(rawURL); err != nil {
		return rueidis.ClientOption{}, err
	}
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

// checkUserinfo refuses a URL whose user or password url.Parse (and so
// rueidis.ParseURL) would not read as written: an unescaped "/", "?" or "#"
// in the password ends the URL's authority there, so the password's first
// part would be taken for the host and dialed (and shown in a dial error),
// and a bad "%" escape fails to parse.
func checkUserinfo(rawURL string) error {
	_, user, pw, _, ok := redact.SplitUserinfo(rawURL)
	if !ok {
		return nil
	}
	u, err := url.Parse(rawURL)
	wantUser, uerr := url.PathUnescape(user)
	wantPW, perr := url.PathUnescape(pw)
	if err == nil && uerr == nil && perr == nil && u.User != nil {
		if got, _ := u.User.Password(); got == wantPW && u.User.Username() == wantUser {
			return nil
		}
	}
	return fmt.Errorf("redisonce: open %q: %w: the URL's user or password holds an unescaped \"/\", \"?\" or \"#\", "+
		"or a bad %%-escape; %%-escape them (/ %%2F, ? %%3F, # %%23, %% %%25, @ %%40, : %%3A)", redact.URL(rawURL), ErrInvalidArgument)
}

// openError is err from opening rawURL, for an error message: the URL
// without its password (redact.URL), and err's text with the password cut out
// too (url.Parse quotes the whole URL). When the password had to be cut from
// err's text, the result wraps ErrInvalidArgument instead of err, so no
// errors.Unwrap reaches the password either.
func openError(rawURL string, err error) error {
	shown := strconv.Quote(redact.URL(rawURL))
	text := err.Error()
	if _, _, pw, _, ok := redact.SplitUserinfo(rawURL); ok && pw != "" {
		secrets := []string{pw}
		if dec, derr := url.PathUnescape(pw); derr == nil && dec != pw {
			secrets = append(secrets, dec)
		}
		for _, secret := range secrets {
			text = strings.ReplaceAll(text, secret, "xxxxx")
		}
	}
	if text == err.Error() {
		return fmt.Errorf("redisonce: open %s: %w", shown, err)
	}
	if errors.Is(err, ErrInvalidArgument) {
		return fmt.Errorf("redisonce: open %s: %s", shown, text)
	}
	return fmt.Errorf("redisonce: open %s: %w: %s", shown, ErrInvalidArgument, text)
}
