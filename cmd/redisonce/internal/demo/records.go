package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/redisonce/redisonce/httpidem"
	"github.com/redisonce/redisonce/store"
)

// The records section: clients send payment requests with an Idempotency-Key
// to a pool of API servers, and retry: after a lost response (the retry gets
// the stored result replayed), while the first try is still running (409, try
// again later), after a transient provider error (Do drops the record of a
// failed call, so the retry charges). One server's provider call hangs for
// three leases: Do keeps its lease alive meanwhile, so retries on other
// servers are told to come back later (409) instead of charging twice; when
// the call times out, the record is dropped and a retry charges. A request
// that reuses a key with a different body is refused.
//
// Each API server is an http.Handler: POST /payments behind the httpidem
// middleware on that server's records store. The handler only charges and
// answers 200 (or 503/504 when the provider fails); the middleware turns the
// Idempotency-Key into a stored response replayed with Idempotent-Replayed:
// true, a 409 with Retry-After, a 422, and drops the record of a 5xx.
const (
	recordsServers   = 3
	recordsClients   = 8
	recordsRequests  = 40
	recordsLease     = 400 * time.Millisecond
	recordsWork      = 3 * time.Millisecond  // one charge at the provider
	recordsSlow      = 60 * time.Millisecond // a slow first charge
	recordsPatience  = 15 * time.Millisecond // a client's timeout
	recordsBackoff   = 30 * time.Millisecond // a client's wait after a 409
	recordsMaxTries  = 100
	recordsStalledOn = 7 // request pay-007 meets the stalled server
)

// scenario is what happens to one request on its first try.
type scenario int

const (
	plain        scenario = iota
	lostResponse          // the response is lost: the client retries
	impatient             // the charge is slow: the client retries meanwhile
	transient             // the provider fails once with a retryable error
	stalled               // the provider call hangs past the lease, then fails
)

var (
	errProvider503     = errors.New("payment provider: 503 try again")
	errProviderTimeout = errors.New("payment provider: timed out")
)

// provider is the payment provider: the effect, counted per key.
type provider struct {
	mu       sync.Mutex
	charges  map[string]int
	attempts map[string]int
	// The stall: held is closed when the stalled server is inside its call
	// (it owns the record).
	held     chan struct{}
	heldOnce sync.Once
}

func (p *provider) charge(ctx context.Context, server, key, body string, sc scenario) ([]byte, error) {
	p.mu.Lock()
	p.attempts[key]++
	first := p.attempts[key] == 1
	p.mu.Unlock()
	wait := recordsWork
	switch {
	case first && sc == transient:
		return nil, errProvider503 // Do drops the record: a retry charges
	case first && sc == stalled:
		// The server hangs on a dead connection to the provider for three
		// leases (Do keeps the lease alive), then the call fails.
		p.heldOnce.Do(func() { close(p.held) })
		if err := sleep(ctx, 3*recordsLease); err != nil {
			return nil, err
		}
		return nil, errProviderTimeout
	case first && sc == impatient:
		wait = recordsSlow
	}
	if err := sleep(ctx, wait); err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.charges[key]++
	return fmt.Appendf(nil, "receipt: %s charged %s by %s", key, body, server), nil
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// recordsStats counts what the servers saw.
type recordsStats struct {
	mu                                    sync.Mutex
	calls, ran, replays, inFlight, failed int
	answered                              int
}

func (s *recordsStats) add(f func(s *recordsStats)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

// apiServer is one API process: its records store and its HTTP API.
type apiServer struct {
	name string
	recs *store.Records
	api  http.Handler
}

// scenarioKey carries a request's scenario to the provider, in its context.
type scenarioKey struct{}

// newAPI is a server's HTTP API: POST /payments charges the body's amount
// under the request's Idempotency-Key, behind httpidem. What the middleware
// logs (a store error after the handler ran) goes to logged.
func newAPI(name string, recs *store.Records, p *provider, st *recordsStats, logged *storeErrors) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /payments", func(w http.ResponseWriter, r *http.Request) {
		st.add(func(s *recordsStats) { s.ran++ })
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		sc, _ := r.Context().Value(scenarioKey{}).(scenario)
		res, err := p.charge(r.Context(), name, r.Header.Get(httpidem.HeaderKey), string(body), sc)
		switch {
		case err == nil:
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.Header().Set("X-Served-By", name)
			_, _ = w.Write(res)
		case errors.Is(err, errProviderTimeout):
			http.Error(w, err.Error(), http.StatusGatewayTimeout)
		default: // the provider's 503, or the request's context ended
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		}
	})
	// One client (the demo) sends every key: one key space. An API with
	// users scopes keys to the caller instead (httpidem.WithScope).
	return httpidem.Middleware(recs, httpidem.WithSharedKeys(), httpidem.WithLease(recordsLease), httpidem.WithLogger(slog.New(logged)))(mux)
}

// handle sends one request to the server's API, in process: the status and
// the body the client gets.
func (a *apiServer) handle(ctx context.Context, st *recordsStats, key, body string, sc scenario) (int, []byte, error) {
	st.add(func(s *recordsStats) { s.calls++ })
	req := httptest.NewRequestWithContext(context.WithValue(ctx, scenarioKey{}, sc), "POST", "/payments", strings.NewReader(body))
	req.Header.Set(httpidem.HeaderKey, key)
	rec := httptest.NewRecorder()
	a.api.ServeHTTP(rec, req)
	res := rec.Body.Bytes()
	switch rec.Code {
	case http.StatusOK:
		if rec.Header().Get(httpidem.HeaderReplayed) == "true" {
			st.add(func(s *recordsStats) { s.replays++ })
		}
		return rec.Code, res, nil
	case http.StatusConflict:
		if rec.Header().Get("Retry-After") == "" {
			return 0, nil, fmt.Errorf("%s answered 409 for %s without Retry-After", a.name, key)
		}
		st.add(func(s *recordsStats) { s.inFlight++ })
		return rec.Code, nil, nil
	case http.StatusUnprocessableEntity:
		return rec.Code, nil, nil
	case http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		st.add(func(s *recordsStats) { s.failed++ })
		return rec.Code, nil, nil
	}
	return 0, nil, fmt.Errorf("%s answered %d for %s: %s", a.name, rec.Code, key, res)
}

// storeErrors is the slog.Handler the middleware logs to: every error record
// is a store error under a request, which fails the demo. Warnings (a 5xx
// the demo's provider answered, not stored so that the retry charges) are
// the demo's own scenarios, and are dropped.
type storeErrors struct {
	mu   sync.Mutex
	errs []error
}

func (h *storeErrors) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelError }
func (h *storeErrors) WithAttrs([]slog.Attr) slog.Handler           { return h }
func (h *storeErrors) WithGroup(string) slog.Handler                { return h }

func (h *storeErrors) Handle(_ context.Context, r slog.Record) error {
	err := errors.New(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		if e, ok := a.Value.Any().(error); ok {
			err = fmt.Errorf("%s: %w", r.Message, e)
		}
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	h.errs = append(h.errs, err)
	return nil
}

func runRecords(ctx context.Context, d *Env) (Tally, error) {
	r, err := newRecordsRun(d)
	defer r.close()
	if err != nil {
		return Tally{}, err
	}
	r.plan()
	if err := r.serveAll(ctx); err != nil {
		return Tally{}, err
	}
	if err := r.reuseKey(ctx); err != nil {
		return Tally{}, err
	}
	effects, err := r.check(ctx)
	if err != nil {
		return Tally{}, err
	}
	st := r.st
	d.say("records", "done: %d calls for %d payments, each charged once", st.calls, recordsRequests)
	return Tally{
		Delivered:  st.calls,
		Duplicates: st.replays + st.inFlight,
		Unique:     recordsRequests,
		Effects:    effects,
		Replays:    st.replays,
		Stale:      0, // the lease is kept alive while the handler runs: nobody is superseded
		Notes: []string{
			"each server is POST /payments behind httpidem.Middleware; a retry gets the stored response with Idempotent-Replayed: true",
			fmt.Sprintf("%s found the first try still running (409 with Retry-After)", plural(st.inFlight, "retry", "retries")),
			fmt.Sprintf("%s not stored (a 5xx drops the record), so the retry charged", plural(st.failed, "failed provider call", "failed provider calls")),
			"1 provider call hung for 3 leases: the lease was kept alive, retries got 409 meanwhile; a reused key with another body answered 422",
		},
	}, nil
}

// recordsRun is the records section's state: the servers, the provider, the
// requests and their answers.
type recordsRun struct {
	d         *Env
	servers   []*apiServer
	procs     []*process
	p         *provider
	st        *recordsStats
	logged    *storeErrors
	keys      []string
	bodies    map[string]string
	scenarios map[string]scenario

	background sync.WaitGroup // first tries the client stopped waiting for
	bgErrs     chan error
	amu        sync.Mutex // guards answers and stallStart
	answers    map[string][]byte
	stallStart time.Time
}

// newRecordsRun opens one process per API server.
func newRecordsRun(d *Env) (*recordsRun, error) {
	r := &recordsRun{d: d, st: &recordsStats{}, logged: &storeErrors{},
		p: &provider{charges: map[string]int{}, attempts: map[string]int{},
			held: make(chan struct{})},
		bodies: map[string]string{}, scenarios: map[string]scenario{},
		answers: map[string][]byte{}, bgErrs: make(chan error, recordsRequests)}
	opts := []store.Option{store.WithPrefix(d.prefix + "records:"), store.WithTTL(10 * time.Minute)}
	for i := range recordsServers {
		proc, err := d.newProcess()
		if err != nil {
			return r, err
		}
		r.procs = append(r.procs, proc)
		recs, err := store.NewRecords(proc.client, opts...)
		if err != nil {
			return r, err
		}
		name := fmt.Sprintf("s%d", i+1)
		r.servers = append(r.servers, &apiServer{name: name, recs: recs, api: newAPI(name, recs, r.p, r.st, r.logged)})
	}
	return r, nil
}

func (r *recordsRun) close() {
	for _, p := range r.procs {
		p.client.Close()
	}
}

// plan draws the requests: a key, a body and what happens on the first try.
func (r *recordsRun) plan() {
	rng := rand.New(rand.NewPCG(3, 4))
	counts := map[scenario]int{}
	for i := range recordsRequests {
		key := fmt.Sprintf("pay-%03d", i+1)
		r.keys = append(r.keys, key)
		r.bodies[key] = fmt.Sprintf("%d.%02d EUR", 10+rng.IntN(90), rng.IntN(100))
		sc := plain
		switch x := rng.IntN(20); {
		case x < 5:
			sc = lostResponse
		case x < 8:
			sc = impatient
		case x < 10:
			sc = transient
		}
		if i+1 == recordsStalledOn {
			sc = stalled
		}
		r.scenarios[key] = sc
		counts[sc]++
	}
	r.d.say("records", "%d API servers, %d clients sending %d payments with an Idempotency-Key, lease %v",
		recordsServers, recordsClients, recordsRequests, recordsLease)
	r.d.say("records", "on the first try: %d responses lost, %d charges slow (the client retries meanwhile), %d provider 503s, 1 server stall",
		counts[lostResponse], counts[impatient], counts[transient])
}

// serveAll runs the clients, each sending its share of the requests, and
// waits for the first tries they stopped waiting for.
func (r *recordsRun) serveAll(ctx context.Context) error {
	errs := make(chan error, recordsClients)
	for c := range recordsClients {
		go func() {
			for i := c; i < len(r.keys); i += recordsClients {
				if err := r.request(ctx, c, r.keys[i]); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	var all []error
	for range recordsClients {
		all = append(all, <-errs)
	}
	r.background.Wait()
	close(r.bgErrs)
	for err := range r.bgErrs {
		all = append(all, err)
	}
	return errors.Join(all...)
}

// rotation picks the server of each try: a client's tries go round the
// pool, and the stalled request's first try meets the server that stalls.
type rotation struct {
	servers []*apiServer
	client  int
	try     int
	stalled bool
}

func (o *rotation) next() *apiServer {
	defer func() { o.try++ }()
	if o.stalled && o.try == 0 {
		return o.servers[1]
	}
	return o.servers[(o.client+o.try)%len(o.servers)]
}

// request runs one client request to completion: the answer it gets.
func (r *recordsRun) request(ctx context.Context, client int, key string) error {
	sc := r.scenarios[key]
	servers := &rotation{servers: r.servers, client: client, stalled: sc == stalled}
	switch sc {
	case impatient, stalled:
		if err := r.abandonFirstTry(ctx, servers.next(), key); err != nil {
			return err
		}
	case lostResponse:
		if _, _, err := servers.next().handle(ctx, r.st, key, r.bodies[key], sc); err != nil {
			return err
		}
	}
	return r.retryUntilAnswered(ctx, servers, key)
}

// abandonFirstTry starts the first try on first and stops waiting for it:
// a slow charge, or the stall.
func (r *recordsRun) abandonFirstTry(ctx context.Context, first *apiServer, key string) error {
	sc := r.scenarios[key]
	if sc == stalled {
		r.amu.Lock()
		r.stallStart = time.Now()
		r.amu.Unlock()
		r.d.say("records", "%s stalls on %s (its call to the provider hangs); the middleware's Do keeps its lease alive", first.name, key)
	}
	r.background.Add(1)
	go func() {
		defer r.background.Done()
		code, _, err := first.handle(ctx, r.st, key, r.bodies[key], sc)
		switch {
		case err != nil:
			r.bgErrs <- err
		case sc == stalled && code != 504:
			r.bgErrs <- fmt.Errorf("%s's hung call on %s answered %d, want a provider timeout (504)", first.name, key, code)
		case sc == stalled:
			r.amu.Lock()
			began := r.stallStart
			r.amu.Unlock()
			r.d.say("records", "%s's provider call on %s timed out after %v: its 504 was not stored, so a retry can charge",
				first.name, key, time.Since(began).Round(10*time.Millisecond))
		}
	}()
	if sc == stalled {
		// Retry only once the stalled server owns the record.
		select {
		case <-r.p.held:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return sleep(ctx, recordsPatience)
}

// retryUntilAnswered retries, backing off after a 409 or a 503, until a
// server answers 200.
func (r *recordsRun) retryUntilAnswered(ctx context.Context, servers *rotation, key string) error {
	sc := r.scenarios[key]
	for range recordsMaxTries {
		srv := servers.next()
		code, res, err := srv.handle(ctx, r.st, key, r.bodies[key], sc)
		if err != nil {
			return err
		}
		switch code {
		case 200:
			r.answered(srv, key, res)
			return nil
		case 409, 503:
			if err := sleep(ctx, recordsBackoff); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s answered %d for %s", srv.name, code, key)
		}
	}
	return fmt.Errorf("%s: no answer after %d tries", key, recordsMaxTries)
}

// answered records the answer a client got.
func (r *recordsRun) answered(srv *apiServer, key string, res []byte) {
	r.amu.Lock()
	defer r.amu.Unlock()
	if r.scenarios[key] == stalled {
		r.d.say("records", "%s charged %s %v after the stall began, once the hung call had failed",
			srv.name, key, time.Since(r.stallStart).Round(10*time.Millisecond))
	}
	r.answers[key] = res
	r.st.add(func(s *recordsStats) {
		s.answered++
		if s.answered%(recordsRequests/4) == 0 {
			r.d.say("records", "%d/%d requests answered (%d calls so far)", s.answered, recordsRequests, s.calls)
		}
	})
}

// reuseKey is a buggy client that reuses a key with a different body: refused.
func (r *recordsRun) reuseKey(ctx context.Context) error {
	reused := r.keys[12]
	code, _, err := r.servers[0].handle(ctx, r.st, reused, "999.99 EUR", plain)
	if err != nil {
		return err
	}
	if code != 422 {
		return fmt.Errorf("a different body under %s answered %d, want 422 (fingerprint mismatch)", reused, code)
	}
	r.st.add(func(s *recordsStats) { s.calls-- }) // not one of the payments' deliveries
	return nil
}

// check verifies one charge per key, that every key has a completed record
// and that a retry on any server replays the answer the client got; it
// returns the number of charges.
func (r *recordsRun) check(ctx context.Context) (int, error) {
	r.logged.mu.Lock()
	logged := errors.Join(r.logged.errs...)
	r.logged.mu.Unlock()
	if logged != nil {
		return 0, fmt.Errorf("the middleware logged store errors: %w", logged)
	}
	effects := 0
	for i, key := range r.keys {
		n := r.p.charges[key]
		effects += n
		if n != 1 {
			return 0, fmt.Errorf("%s charged %d times, want exactly 1", key, n)
		}
		rec, ok, err := r.servers[0].recs.Get(ctx, key)
		if err != nil {
			return 0, err
		}
		// A failed call drops its record, so every record is the first of
		// its incarnation: nobody took a live owner's record over.
		if !ok || rec.Status != store.StatusCompleted || rec.Fence != 1 {
			return 0, fmt.Errorf("%s: record %+v (found %v), want completed with fence 1", key, rec, ok)
		}
		// One more retry, outside the counts: the stored response, replayed.
		req := httptest.NewRequestWithContext(ctx, "POST", "/payments", strings.NewReader(r.bodies[key]))
		req.Header.Set(httpidem.HeaderKey, key)
		again := httptest.NewRecorder()
		r.servers[i%len(r.servers)].api.ServeHTTP(again, req)
		if again.Code != http.StatusOK || again.Header().Get(httpidem.HeaderReplayed) != "true" || again.Body.String() != string(r.answers[key]) {
			return 0, fmt.Errorf("%s: a retry got %d %v %q, but the client was answered %q", key, again.Code, again.Header(), again.Body, r.answers[key])
		}
	}
	// Every call ended one way: charged, replayed, in flight, failed; the
	// handler ran for the first and the last only.
	st := r.st
	if sum := effects + st.replays + st.inFlight + st.failed; sum != st.calls {
		return 0, fmt.Errorf("%d calls, but charges %d + replays %d + in flight %d + failures %d = %d",
			st.calls, effects, st.replays, st.inFlight, st.failed, sum)
	}
	if st.ran != effects+st.failed {
		return 0, fmt.Errorf("the handler ran %d times, want charges %d + failures %d", st.ran, effects, st.failed)
	}
	return effects, nil
}
