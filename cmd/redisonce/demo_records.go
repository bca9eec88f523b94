package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

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
	mu                                           sync.Mutex
	calls, ran, replays, inFlight, failed, stale int
	answered                                     int
}

func (s *recordsStats) add(f func(s *recordsStats)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

// apiServer is one API process.
type apiServer struct {
	name string
	recs *store.Records
}

// handle serves one request: an HTTP-like status and body.
func (a *apiServer) handle(ctx context.Context, p *provider, st *recordsStats, key, body string, sc scenario) (int, []byte, error) {
	st.add(func(s *recordsStats) { s.calls++ })
	o := store.AcquireOptions{Lease: recordsLease, Fingerprint: fingerprint(body)}
	res, replayed, err := a.recs.Do(ctx, key, o, func(ctx context.Context) ([]byte, error) {
		st.add(func(s *recordsStats) { s.ran++ })
		return p.charge(ctx, a.name, key, body, sc)
	})
	switch {
	case err == nil && replayed:
		st.add(func(s *recordsStats) { s.replays++ })
		return 200, res, nil
	case err == nil:
		return 200, res, nil
	case errors.Is(err, store.ErrInFlight):
		st.add(func(s *recordsStats) { s.inFlight++ })
		return 409, nil, nil
	case errors.Is(err, store.ErrFingerprintMismatch):
		return 422, nil, nil
	case errors.Is(err, store.ErrStaleOwner):
		st.add(func(s *recordsStats) { s.stale++ })
		return 504, nil, nil
	case errors.Is(err, errProvider503):
		st.add(func(s *recordsStats) { s.failed++ })
		return 503, nil, nil
	case errors.Is(err, errProviderTimeout):
		st.add(func(s *recordsStats) { s.failed++ })
		return 504, nil, nil
	}
	return 500, nil, fmt.Errorf("%s: %w", a.name, err)
}

// fingerprint is the request's digest, stored with its record.
func fingerprint(body string) string {
	h := sha256.Sum256([]byte(body))
	return hex.EncodeToString(h[:8])
}

func demoRecords(ctx context.Context, d *demo) (tally, error) {
	opts := []store.Option{store.WithPrefix(d.prefix + "records:"), store.WithTTL(10 * time.Minute)}
	servers := make([]*apiServer, recordsServers)
	for i := range servers {
		proc, err := d.newProcess()
		if err != nil {
			return tally{}, err
		}
		defer proc.client.Close()
		servers[i] = &apiServer{name: fmt.Sprintf("s%d", i+1), recs: store.NewRecords(proc.client, opts...)}
	}
	p := &provider{charges: map[string]int{}, attempts: map[string]int{},
		held: make(chan struct{})}
	st := &recordsStats{}

	rng := rand.New(rand.NewPCG(3, 4))
	keys := make([]string, recordsRequests)
	bodies := map[string]string{}
	scenarios := map[string]scenario{}
	counts := map[scenario]int{}
	for i := range keys {
		keys[i] = fmt.Sprintf("pay-%03d", i+1)
		bodies[keys[i]] = fmt.Sprintf("%d.%02d EUR", 10+rng.IntN(90), rng.IntN(100))
		sc := plain
		switch r := rng.IntN(20); {
		case r < 5:
			sc = lostResponse
		case r < 8:
			sc = impatient
		case r < 10:
			sc = transient
		}
		if i+1 == recordsStalledOn {
			sc = stalled
		}
		scenarios[keys[i]] = sc
		counts[sc]++
	}
	d.say("records", "%d API servers, %d clients sending %d payments with an Idempotency-Key, lease %v",
		recordsServers, recordsClients, recordsRequests, recordsLease)
	d.say("records", "on the first try: %d responses lost, %d charges slow (the client retries meanwhile), %d provider 503s, 1 server stall",
		counts[lostResponse], counts[impatient], counts[transient])

	var background sync.WaitGroup // first tries the client stopped waiting for
	bgErrs := make(chan error, recordsRequests)
	answers := map[string][]byte{}
	var amu sync.Mutex
	var stallStart time.Time
	// request runs one client request to completion: the answer it gets.
	request := func(client int, key string) error {
		body, sc := bodies[key], scenarios[key]
		try := 0
		server := func() *apiServer {
			defer func() { try++ }()
			if sc == stalled && try == 0 {
				return servers[1]
			}
			return servers[(client+try)%len(servers)]
		}
		switch sc {
		case impatient, stalled:
			// The first try runs on; the client stops waiting for it.
			first := server()
			if sc == stalled {
				stallStart = time.Now()
				d.say("records", "%s stalls on %s (its call to the provider hangs); Do keeps its lease alive", first.name, key)
			}
			background.Add(1)
			go func() {
				defer background.Done()
				code, _, err := first.handle(ctx, p, st, key, body, sc)
				switch {
				case err != nil:
					bgErrs <- err
				case sc == stalled && code != 504:
					bgErrs <- fmt.Errorf("%s's hung call on %s answered %d, want a provider timeout (504)", first.name, key, code)
				case sc == stalled:
					d.say("records", "%s's provider call on %s timed out after %v: Do dropped the record, so a retry can charge",
						first.name, key, time.Since(stallStart).Round(10*time.Millisecond))
				}
			}()
			if sc == stalled {
				// Retry only once the stalled server owns the record.
				select {
				case <-p.held:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			if err := sleep(ctx, recordsPatience); err != nil {
				return err
			}
		case lostResponse:
			if _, _, err := server().handle(ctx, p, st, key, body, sc); err != nil {
				return err
			}
		}
		for range recordsMaxTries {
			srv := server()
			code, res, err := srv.handle(ctx, p, st, key, body, sc)
			if err != nil {
				return err
			}
			switch code {
			case 200:
				if sc == stalled {
					d.say("records", "%s charged %s %v after the stall began, once the hung call had failed",
						srv.name, key, time.Since(stallStart).Round(10*time.Millisecond))
				}
				amu.Lock()
				answers[key] = res
				amu.Unlock()
				st.add(func(s *recordsStats) {
					s.answered++
					if s.answered%(recordsRequests/4) == 0 {
						d.say("records", "%d/%d requests answered (%d calls so far)", s.answered, recordsRequests, s.calls)
					}
				})
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

	errs := make(chan error, recordsClients)
	for c := range recordsClients {
		go func() {
			for i := c; i < len(keys); i += recordsClients {
				if err := request(c, keys[i]); err != nil {
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
	background.Wait()
	close(bgErrs)
	for err := range bgErrs {
		all = append(all, err)
	}
	if err := errors.Join(all...); err != nil {
		return tally{}, err
	}

	// A buggy client reuses a key with a different body: refused.
	reused := keys[12]
	code, _, err := servers[0].handle(ctx, p, st, reused, "999.99 EUR", plain)
	if err != nil {
		return tally{}, err
	}
	if code != 422 {
		return tally{}, fmt.Errorf("a different body under %s answered %d, want 422 (fingerprint mismatch)", reused, code)
	}
	st.add(func(s *recordsStats) { s.calls-- }) // not one of the payments' deliveries

	// Check: one charge per key, every answer is the stored record.
	effects := 0
	for _, key := range keys {
		n := p.charges[key]
		effects += n
		if n != 1 {
			return tally{}, fmt.Errorf("%s charged %d times, want exactly 1", key, n)
		}
		rec, ok, err := servers[0].recs.Get(ctx, key)
		if err != nil {
			return tally{}, err
		}
		if !ok || rec.Status != store.StatusCompleted || string(rec.Payload) != string(answers[key]) {
			return tally{}, fmt.Errorf("%s: record %+v (found %v), but the client was answered %q", key, rec, ok, answers[key])
		}
		// A failed call drops its record, so every record is the first of
		// its incarnation: nobody took a live owner's record over.
		if rec.Fence != 1 {
			return tally{}, fmt.Errorf("%s: fence %d, want 1 (no takeover of a live owner)", key, rec.Fence)
		}
	}
	// Every call ended one way: charged, replayed, in flight, failed, stale;
	// fn ran for the first, the fourth and the fifth only.
	if sum := effects + st.replays + st.inFlight + st.failed + st.stale; sum != st.calls {
		return tally{}, fmt.Errorf("%d calls, but charges %d + replays %d + in flight %d + failures %d + stale %d = %d",
			st.calls, effects, st.replays, st.inFlight, st.failed, st.stale, sum)
	}
	if st.ran != effects+st.failed+st.stale {
		return tally{}, fmt.Errorf("the handler ran %d times, want charges %d + failures %d + stale %d", st.ran, effects, st.failed, st.stale)
	}
	d.say("records", "done: %d calls for %d payments, each charged once", st.calls, recordsRequests)
	return tally{
		delivered:  st.calls,
		duplicates: st.replays + st.inFlight,
		unique:     recordsRequests,
		effects:    effects,
		replays:    st.replays,
		stale:      st.stale,
		notes: []string{
			fmt.Sprintf("%s found the first try still running (Do: ErrInFlight, answered 409)", plural(st.inFlight, "retry", "retries")),
			fmt.Sprintf("%s dropped the record (Do's default for an error), so the retry charged", plural(st.failed, "failed provider call", "failed provider calls")),
			"1 provider call hung for 3 leases: the lease was kept alive, retries got 409 meanwhile; a reused key with another body refused (ErrFingerprintMismatch)",
		},
	}, nil
}
