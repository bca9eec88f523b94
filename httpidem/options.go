package httpidem

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"net/textproto"
	"strings"
	"time"

	"github.com/redisonce/redisonce/store"
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
	scopeMode   int // scopeUnset until WithScope, WithCredentialScope or WithSharedKeys
	retry5xx    bool
	detach      bool // the handler runs detached from the client's disconnect
	shutdown    context.Context
	retryAfter  time.Duration
	wait        time.Duration
	problemType string
	obs         store.Observer
	fingerprint func(*http.Request, []byte) string
	keep        func(name string) bool
	lease, ttl  time.Duration
	maxKeyLen   int
	maxBody     int64
	log         *slog.Logger
	logKey      bool // log lines name the key (WithLogKey)
}

func newConfig(opts []Option) *config {
	c := &config{
		methods:     map[string]bool{http.MethodPost: true, http.MethodPatch: true},
		fingerprint: Fingerprint,
		keep:        DefaultKeepHeader,
		lease:       DefaultLease,
		detach:      true,
		maxKeyLen:   DefaultMaxKeyLen,
		maxBody:     DefaultMaxBody,
		log:         slog.Default(),
	}
	for i, o := range opts {
		if o == nil {
			c.bad(fmt.Sprintf("httpidem: option %d is nil", i))
			continue
		}
		o(c)
	}
	return c
}

// The key spaces (handler.recordKey).
const (
	scopeUnset = iota
	scopeShared
	scopeCredential
	scopeFunc
)

// bad records the first bad option, for Middleware to refuse.
func (c *config) bad(detail string) {
	if c.badOption == "" {
		c.badOption = detail
	}
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

// WithScope scopes keys to what scope returns for a request — the
// authenticated account or tenant: two callers' equal keys never meet, so a
// caller never replays another's response, and a 422 never tells one caller
// that another used a key. Return a stable identity of the caller: the
// account id, not the session cookie or the access token, so that a retry
// sent after a token was refreshed (or from another session of the same
// account) replays instead of running again. For a cookie-session app this is
// the way to scope (the session's user id, read by your session middleware
// placed before this one); callers for whom scope returns the same string
// ("" included) share keys. The scope is part of the record key, in a space
// of its own that no header value reaches. One of WithScope,
// WithCredentialScope and WithSharedKeys is required; the last given wins.
// WithScope(nil) is a bad option.
func WithScope(scope func(*http.Request) string) Option {
	return func(c *config) {
		if scope == nil {
			c.bad("httpidem: WithScope(nil): give a scope function, WithCredentialScope() or WithSharedKeys()")
			return
		}
		c.scope, c.scopeMode = scope, scopeFunc
	}
}

// WithCredentialScope scopes keys to the request's credentials: a SHA-256 of
// its Authorization header(s) and the TLS client certificate it presented
// (CredentialScope), so callers with other credentials never share a key.
// Requests that carry none share the anonymous key space, apart from every
// credentialed one. It cannot tell apart two callers who send no
// credentials (cookie sessions, a gateway that authenticates for you), and
// it takes a caller whose credentials change between a request and its retry
// (a refreshed OAuth token, a rotated API key) for another caller, whose
// retry runs again: where that happens, use WithScope with the account id.
func WithCredentialScope() Option {
	return func(c *config) { c.scope, c.scopeMode = nil, scopeCredential }
}

// WithSharedKeys makes every caller share one key space: the record key is
// the header value, in a space of its own. Any caller who sends another's
// key value (with the same method, path, query and body) gets that caller's
// stored response, headers and body, and with another request a 422 that
// tells them the key is in use. Use it only when keys are unguessable and
// never shared between callers who must not see each other's responses, or
// behind a gateway that already scopes the header.
func WithSharedKeys() Option {
	return func(c *config) { c.scope, c.scopeMode = nil, scopeShared }
}

// CredentialScope is WithCredentialScope's identity of a request: "cred-"
// and the hex SHA-256 of its Authorization header(s) and TLS client
// certificate, or "" for a request that carries neither.
func CredentialScope(r *http.Request) string {
	if h := credentialHash(r); h != "" {
		return "cred-" + h
	}
	return ""
}

// credentialHash is the hex SHA-256 of r's credentials, "" without any.
func credentialHash(r *http.Request) string {
	auth := r.Header.Values("Authorization")
	var cert []byte
	if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
		cert = r.TLS.PeerCertificates[0].Raw
	}
	if len(auth) == 0 && cert == nil {
		return ""
	}
	h := sha256.New()
	for _, a := range auth {
		fmt.Fprintf(h, "authorization %d:%s\n", len(a), a)
	}
	fmt.Fprintf(h, "cert %d:", len(cert))
	h.Write(cert)
	return hex.EncodeToString(h.Sum(nil))
}

// WithRetry5xx makes a 5xx response not stored: it reaches the client as
// written, the key's record is released, and a retry runs the handler again
// — for a handler whose every 5xx means no effect happened. By default a 5xx
// is a final answer like any other, stored and replayed (as Stripe replays
// its 500s): the handler started, and may have had its effect. A handler can
// also decide per request (NotDone).
func WithRetry5xx() Option {
	return func(c *config) { c.retry5xx = true }
}

// WithCancelOnDisconnect makes the handler's context end when the client
// goes away (the request's context, as without this middleware). By default
// the handler runs detached from the client: its context (still carrying the
// request's values) ends only when the key's lease is lost or the
// WithShutdown context ends, so an effect is never cut in half because a
// client timed out or hung up, and the response it writes is stored for the
// retry. The cost of cancelling: a handler that stops half-way may leave an
// effect done but unanswered. Whatever it then writes (nothing: an empty 200;
// a 5xx) is stored and replayed like any answer, whether or not the client is
// there; a handler that knows it stopped before its effect calls NotDone, so
// that the retry runs it again.
func WithCancelOnDisconnect() Option {
	return func(c *config) { c.detach = false }
}

// WithShutdown ties the handler's context to ctx: when ctx ends (cancel it
// when the server shuts down, after http.Server.Shutdown's grace period, say)
// the handler's context ends with ctx's cause. Default none: a detached
// handler runs to its end, and http.Server.Shutdown waits for it.
func WithShutdown(ctx context.Context) Option {
	return func(c *config) { c.shutdown = ctx }
}

// WithRetryAfter caps the Retry-After of a 409 (a retry while the first
// request with the key runs). The header says how long the holder's lease
// has left, rounded up to whole seconds, at least 1 and at most d: when a
// holder that died lets the key go, so a client that obeys it retries once
// or twice, not once a second for a whole lease; for a live holder that
// finishes sooner, WithWait answers the retry as soon as it does. Default
// 0: the lease (WithLease).
func WithRetryAfter(d time.Duration) Option {
	return func(c *config) { c.retryAfter = d }
}

// WithWait makes a retry that arrives while the first request with its key
// runs wait up to d for it to finish, and get its stored response (replayed)
// instead of a 409; when d passes first, or the first gives the key back
// (NotDone, WithRetry5xx) and the retry then runs the handler itself, it is
// answered as without the wait. The wait is pushed: the store's Do waits
// (store.AcquireOptions.Wait), notified by the first request's final write
// (on Redis a shard-channel message, no polling; a waiter re-reads the record
// at least once a second in case a notice is missed), so a waiting request
// costs the server nothing while it waits. It does hold its connection and a
// goroutine: keep d to about how long the handler takes. A waiting request
// keeps waiting when its client hangs up (until the answer or d). Default 0:
// a 409 at once.
func WithWait(d time.Duration) Option {
	return func(c *config) { c.wait = d }
}

// WithProblemType sets the "type" of the problem+json bodies the middleware
// answers with (400 for a bad or missing key, 409, 413, 422, 500, 503): a URI
// of your API's documentation of its idempotency rules, as the IETF draft's
// examples do ("https://developer.example.com/idempotency"). Default
// "about:blank" (the status says what the problem is).
func WithProblemType(uri string) Option {
	return func(c *config) { c.problemType = uri }
}

// WithObserver makes the middleware report to o, as a store.Event with Store
// "httpidem", Op "respond" and Outcome OutcomeNotStored, every response it
// sent but did not store (Err says why: it wraps ErrNotStored). They are
// logged too (WithLogger). Default none. The store's own observer
// (store.WithObserver) still sees the store's operations.
func WithObserver(o store.Observer) Option {
	return func(c *config) { c.obs = o }
}

// WithFingerprint sets how a request is fingerprinted; the same key with a
// different fingerprint is answered 422 and the handler does not run. The
// function gets the request and its whole body, and returns at most
// 256 bytes (the store's limit). Default Fingerprint (method, path, query
// string and a SHA-256 of the body). nil: no fingerprint, a key is never checked against
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
// the store's Do renews it every lease/4 while the handler runs (on stores
// that do), so it bounds how long a crashed server blocks the key, not how
// long a handler may take: a retry meanwhile is answered 409 with
// Retry-After the lease time left (WithRetryAfter), or waits (WithWait). The
// lease is also renewed while the handler's response is being stored, which
// the store retries through an outage for as long as it holds the lease
// (store.Records.Do): a Redis away for less than the lease loses no outcome.
// Default DefaultLease (30 s); d must be > 0.
func WithLease(d time.Duration) Option {
	return func(c *config) { c.lease = d }
}

// WithTTL sets how long a stored response is replayed, counted from the
// first request. A handler still running when it passes keeps its key (a
// retry meanwhile is answered 409, or waits: WithWait), and its response is
// then replayed for d from when it was stored (store.AcquireOptions.TTL).
// Default 0: the store's own TTL (store.WithTTL; for store.Records by
// default store.DefaultRecordsTTL, 24 hours).
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
// stored), at Error; a response sent but not stored (ErrNotStored's reasons:
// NotDone, a 5xx under WithRetry5xx, too large, streamed past the limit,
// hijacked, a panic), at Warn. Default
// slog.Default(). Keys can carry user data: a line names neither the key
// nor an error text quoting it (store.Event.ErrorText(false)) unless
// WithLogKey.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l == nil {
			l = slog.Default()
		}
		c.log = l
	}
}

// Fingerprint is the default request fingerprint: the hex SHA-256 of the
// method, the escaped URL path, the SHA-256 of the body and the raw query
// string, so the same key with another method, path, body or query is
// answered 422. The query is compared as sent (byte for byte: "?a=1&b=2" and
// "?b=2&a=1" differ); a request without a query hashes method, path and
// body alone. Headers are not part of it; use WithFingerprint to add them.
func Fingerprint(r *http.Request, body []byte) string {
	b := sha256.Sum256(body)
	h := sha256.New()
	h.Write([]byte(r.Method))
	h.Write([]byte{0})
	h.Write([]byte(r.URL.EscapedPath()))
	h.Write([]byte{0})
	h.Write(b[:])
	if r.URL.RawQuery != "" || r.URL.ForceQuery {
		// after the fixed-length body digest: unambiguous
		h.Write([]byte{'?'})
		h.Write([]byte(r.URL.RawQuery))
	}
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

// WithLogKey makes the middleware's log lines (WithLogger) carry the record
// key (the scope, query-escaped, ":" and the Idempotency-Key; the header
// value alone with WithSharedKeys) as the attribute "key", and store errors
// with their full text, which quotes it: as store.SlogWithKey does for the
// store's observer. Default off: keys can carry user data.
func WithLogKey() Option {
	return func(c *config) { c.logKey = true }
}
