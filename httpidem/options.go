package httpidem

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"net/textproto"
	"strings"
	"time"
)

// Defaults of the options.
const (
	// DefaultLease is how long a request owns its key while the handler runs,
	// renewed by the store's Do while it does (WithLease).
	DefaultLease = 30 * time.Second
	// DefaultMaxKeyLen is the longest Idempotency-Key accepted, in bytes, as
	// with Stripe (WithMaxKeyLen).
	DefaultMaxKeyLen = 255
	// DefaultMaxBody is the largest request body the middleware reads, in
	// bytes: 8 MiB (WithMaxBody).
	DefaultMaxBody = 8 << 20
)

// Option configures Middleware.
type Option func(*config)

type config struct {
	badOption   string // the first nil option, for Middleware to refuse
	methods     map[string]bool
	require     bool
	scope       func(*http.Request) string
	fingerprint func(*http.Request, []byte) string
	keep        func(name string) bool
	lease, ttl  time.Duration
	maxKeyLen   int
	maxBody     int64
	log         *slog.Logger
}

func newConfig(opts []Option) *config {
	c := &config{
		methods:     map[string]bool{http.MethodPost: true, http.MethodPatch: true},
		fingerprint: Fingerprint,
		keep:        DefaultKeepHeader,
		lease:       DefaultLease,
		maxKeyLen:   DefaultMaxKeyLen,
		maxBody:     DefaultMaxBody,
		log:         slog.Default(),
	}
	for i, o := range opts {
		if o == nil {
			if c.badOption == "" {
				c.badOption = fmt.Sprintf("httpidem: option %d is nil", i)
			}
			continue
		}
		o(c)
	}
	return c
}

// WithMethods sets the request methods the middleware applies to; requests
// with any other method pass through untouched. Default: POST and PATCH.
func WithMethods(methods ...string) Option {
	return func(c *config) {
		c.methods = map[string]bool{}
		for _, m := range methods {
			c.methods[strings.ToUpper(m)] = true
		}
	}
}

// WithRequireKey makes the Idempotency-Key header mandatory on the
// middleware's methods: a request without it is answered 400 with a problem
// naming the header, and the handler does not run. Default false: such
// requests pass through untouched.
func WithRequireKey(require bool) Option {
	return func(c *config) { c.require = require }
}

// WithScope sets a function that scopes keys, typically to the authenticated
// user or tenant: the record key is the scope (query-escaped) + ":" + the
// header value, so two users' equal keys never meet. Default nil: the record
// key is the header value. The scope may be any string, "" included.
func WithScope(scope func(*http.Request) string) Option {
	return func(c *config) { c.scope = scope }
}

// WithFingerprint sets how a request is fingerprinted; the same key with a
// different fingerprint is answered 422 and the handler does not run. The
// function gets the request and its whole body, and returns at most
// store.MaxFingerprintLen bytes. Default Fingerprint (method, path and a
// SHA-256 of the body). nil: no fingerprint, a key is never checked against
// its request.
func WithFingerprint(fp func(r *http.Request, body []byte) string) Option {
	return func(c *config) { c.fingerprint = fp }
}

// WithKeepHeader sets which response headers are stored and replayed, by
// canonical name. Default DefaultKeepHeader. Headers named in the
// response's Connection header are never stored.
func WithKeepHeader(keep func(name string) bool) Option {
	return func(c *config) {
		if keep == nil {
			keep = DefaultKeepHeader
		}
		c.keep = keep
	}
}

// WithLease sets how long a request owns its key while the handler runs;
// the store's Do renews it every lease/3 while the handler runs (on stores
// that do), so it bounds how long a crashed server blocks the key, not how
// long a handler may take. A retry meanwhile is answered 409 with a
// Retry-After of at most the lease. Default DefaultLease (30 s); d must be > 0.
func WithLease(d time.Duration) Option {
	return func(c *config) { c.lease = d }
}

// WithTTL sets how long a stored response is replayed, counted from the
// first request. A handler still running when it passes keeps its key (a
// retry meanwhile is answered 409), and its response is then replayed for d
// from when it was stored (store.AcquireOptions.TTL). Default 0: the store's
// own TTL (store.WithTTL; for Records and MemoryRecords by default
// store.DefaultRecordsTTL, 24 hours).
func WithTTL(d time.Duration) Option {
	return func(c *config) { c.ttl = d }
}

// WithMaxKeyLen sets the longest Idempotency-Key accepted, in bytes; a longer
// one is answered 400. Default DefaultMaxKeyLen (255); at most
// store.MaxIDLen, scope included.
func WithMaxKeyLen(n int) Option {
	return func(c *config) { c.maxKeyLen = n }
}

// WithMaxBody sets the largest request body read for a request with a key,
// in bytes; a larger one is answered 413 and the handler does not run.
// Default DefaultMaxBody (8 MiB).
func WithMaxBody(n int64) Option {
	return func(c *config) { c.maxBody = n }
}

// WithLogger sets where the middleware logs what it cannot tell the client:
// a store error after the handler ran (the response was sent but may not be
// stored). Default slog.Default().
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l == nil {
			l = slog.Default()
		}
		c.log = l
	}
}

// Fingerprint is the default request fingerprint: the hex SHA-256 of the
// method, the escaped URL path and the SHA-256 of the body. The query string
// and the headers are not part of it; use WithFingerprint to add them.
func Fingerprint(r *http.Request, body []byte) string {
	b := sha256.Sum256(body)
	h := sha256.New()
	h.Write([]byte(r.Method))
	h.Write([]byte{0})
	h.Write([]byte(r.URL.EscapedPath()))
	h.Write([]byte{0})
	h.Write(b[:])
	return hex.EncodeToString(h.Sum(nil))
}

// notStored are the response headers DefaultKeepHeader leaves out: the
// hop-by-hop headers of RFC 9110 section 7.6.1, Date (per response; net/http
// sets a fresh one), Set-Cookie (a session must not be re-issued from, or
// kept at rest in, the store) and the replay marker itself.
var notStored = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true,
	"Proxy-Authorization": true, "Proxy-Connection": true, "Te": true,
	"Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
	"Date": true, "Set-Cookie": true, HeaderReplayed: true,
}

// DefaultKeepHeader says whether a response header is stored and replayed:
// every header but the hop-by-hop ones, Date, Set-Cookie, trailers
// (http.TrailerPrefix) and Idempotent-Replayed.
func DefaultKeepHeader(name string) bool {
	return !notStored[textproto.CanonicalMIMEHeaderKey(name)] && !strings.HasPrefix(name, http.TrailerPrefix)
}

// dropConnectionTokens removes from h the headers that sent's Connection
// header names: they are hop-by-hop too.
func dropConnectionTokens(h, sent http.Header) {
	for _, v := range sent.Values("Connection") {
		for _, tok := range strings.Split(v, ",") {
			if tok = strings.TrimSpace(tok); tok != "" {
				delete(h, textproto.CanonicalMIMEHeaderKey(tok))
			}
		}
	}
}
