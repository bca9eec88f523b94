package scripts_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/store"
	"github.com/redisonce/redisonce/store/storetest"
)

// The reliability tests (cluster_*, faults_*, acl_*, tls_*) run every store
// through the same fault, cluster and privilege scenarios. A store takes part
// by one entry in reliabilityStores: how to run its conformance suite on a
// client, and a workload that drives it under load and then checks, from the
// raw keys, that every acknowledged effect is there and no operation was half
// applied.

// storeKind is one store under the reliability tests.
type storeKind struct {
	name string
	// prefix is the store's default key prefix (the ACL line grants it).
	prefix string
	// conformance runs the store's storetest suite on stores built on c, each
	// with a prefix of its own under base (so an ACL can confine it), and opts.
	conformance func(t *testing.T, c rueidis.Client, base string, opts ...store.Option)
	// workload returns a load generator for stores on c under prefix; tags,
	// when set, are hash tags the workload puts in every id, so a test can
	// choose the cluster slots it hits.
	workload func(c rueidis.Client, prefix string, tags []string) workload
	// probes returns every operation of the store on stores under prefix,
	// for the tests that put a key in a bad state (memory full, wrong type).
	probes func(c rueidis.Client, prefix string) []probe
	// seed gives id the state an ordinary operation leaves behind.
	seed func(ctx context.Context, c rueidis.Client, prefix, id string) error
	// wrongType is a raw command that puts a value of a type the store never
	// writes at key.
	wrongType func(key string) []string
}

// probe is one operation of a store, run on one id.
type probe struct {
	name string
	// write: the operation runs a write script (refused when memory is full,
	// unless frees).
	write bool
	// frees: the operation only removes data; its script carries
	// flags=allow-oom, so it runs, and frees memory, when memory is full.
	frees bool
	// readsWhenFull: refused a write when memory is full, the operation
	// answers an id that holds a record from a read instead (Records.Do: a
	// pending record is ErrInFlight); a fresh id is still refused (OOM).
	readsWhenFull bool
	// run runs the operation on id; called reports whether a callback the
	// operation takes (Do's fn) ran.
	run func(ctx context.Context, id string) (called bool, err error)
	// wrongTypeOK: the operation succeeds on a key of the wrong type (a read
	// that only checks existence, or a delete) instead of failing.
	wrongTypeOK bool
}

// reliabilityStores lists every store the reliability tests cover.
var reliabilityStores = []storeKind{
	{
		name:   "claims",
		prefix: store.DefaultClaimsPrefix,
		conformance: func(t *testing.T, c rueidis.Client, base string, opts ...store.Option) {
			storetest.TestClaims(t, storetest.ClaimsHarness{
				New: func(t *testing.T, more ...store.Option) (*store.Claims, error) {
					o := append([]store.Option{store.WithPrefix(base + uniquePrefix(t))}, opts...)
					return store.NewClaims(c, append(o, more...)...)
				},
				Wait: time.Sleep,
				Tick: 100 * time.Millisecond,
			})
		},
		workload: func(c rueidis.Client, prefix string, tags []string) workload {
			return newClaimsLoad(c, prefix, tags)
		},
		probes: claimsProbes,
		seed: func(ctx context.Context, c rueidis.Client, prefix, id string) error {
			_, err := mustStore(store.NewClaims(c, store.WithPrefix(prefix))).Claim(ctx, id)
			return err
		},
		wrongType: func(key string) []string { return []string{"HSET", key, "f", "v"} },
	},
	{
		name:   "outbox",
		prefix: "gateway:outbox:",
		conformance: func(t *testing.T, c rueidis.Client, base string, opts ...store.Option) {
			storetest.TestOutbox(t, storetest.OutboxHarness{
				New: func(t *testing.T, more ...store.Option) (*store.Outbox, error) {
					o := append([]store.Option{store.WithPrefix(base + uniquePrefix(t))}, opts...)
					return store.NewOutbox(c, append(o, more...)...)
				},
				Wait: time.Sleep,
				Tick: 100 * time.Millisecond,
			})
		},
		workload: func(c rueidis.Client, prefix string, tags []string) workload {
			return newOutboxLoad(c, prefix, tags)
		},
		probes:    outboxProbes,
		seed:      outboxSeedTail,
		wrongType: func(key string) []string { return []string{"SET", key, "1"} },
	},
	{
		name:   "records",
		prefix: "idempotency:",
		conformance: func(t *testing.T, c rueidis.Client, base string, opts ...store.Option) {
			storetest.TestRecords(t, storetest.RecordsHarness{
				New: func(t *testing.T, more ...store.Option) (*store.Records, error) {
					o := append([]store.Option{store.WithPrefix(base + uniquePrefix(t))}, opts...)
					return store.NewRecords(c, append(o, more...)...)
				},
				Wait: time.Sleep,
				Now:  time.Now, // the servers run on this machine
				Tick: 100 * time.Millisecond,
			})
		},
		workload: func(c rueidis.Client, prefix string, tags []string) workload {
			return newRecordsLoad(c, prefix, tags)
		},
		probes:    recordsProbes,
		seed:      recordsSeed,
		wrongType: func(key string) []string { return []string{"RPUSH", key, "{\"status\":\"completed\"}"} },
	},
}

func claimsProbes(c rueidis.Client, prefix string) []probe {
	s := mustStore(store.NewClaims(c, store.WithPrefix(prefix), store.WithTTL(time.Hour)))
	return []probe{
		{name: "Claim", write: true, run: func(ctx context.Context, id string) (bool, error) {
			_, err := s.Claim(ctx, id)
			return false, err
		}},
		{name: "ClaimMany", write: true, run: func(ctx context.Context, id string) (bool, error) {
			_, err := s.ClaimMany(ctx, []string{id})
			return false, err
		}},
		{name: "Remember", write: true, run: func(ctx context.Context, id string) (bool, error) {
			return false, s.Remember(ctx, id)
		}},
		{name: "Do", write: true, run: func(ctx context.Context, id string) (bool, error) {
			called := false
			_, err := s.Do(ctx, id, time.Minute, func(context.Context) error { called = true; return nil })
			return called, err
		}},
		{name: "Seen", run: func(ctx context.Context, id string) (bool, error) {
			_, err := s.Seen(ctx, id)
			return false, err
		}, wrongTypeOK: true},
		{name: "Forget", write: true, frees: true, run: func(ctx context.Context, id string) (bool, error) {
			return false, s.Forget(ctx, id)
		}, wrongTypeOK: true},
	}
}

// workload is a stream of operations on one store, run by several workers at
// once, that remembers what the store acknowledged.
type workload interface {
	// Op runs worker w's i-th operation and returns the error the store
	// surfaced, if any. A reply that breaks the store's contract is not
	// returned but kept for Check.
	Op(ctx context.Context, w, i int) error
	// Check reads the raw keys through c and fails t when an acknowledged
	// effect is missing, an operation was applied in part, or a reply broke
	// the contract. It returns the number of keys it checked.
	Check(t *testing.T, c rueidis.Client) int
}

// loadOpts bounds a load run: it stops after ops operations per worker or
// after d, whichever comes first. Workers are numbered from first, so a second
// run on the same workload with another first uses fresh ids.
type loadOpts struct {
	workers int
	ops     int
	d       time.Duration
	first   int
}

// loadResult is what a load run saw.
type loadResult struct {
	ops    int64   // operations run
	errs   []error // errors surfaced by the store (the first 50)
	nerrs  int64   // number of errors surfaced
	faults int64   // faults injected, as counted by the fault function
}

// runLoad runs wl with o.workers workers while fault, if not nil, runs
// alongside and injects faults until the load is over (its ctx is cancelled);
// fault returns how many faults it injected.
func runLoad(t *testing.T, wl workload, o loadOpts, fault func(ctx context.Context) int64) loadResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), o.d)
	defer cancel()
	var res loadResult
	var mu sync.Mutex
	var faultsDone = make(chan int64, 1)
	if fault != nil {
		go func() { faultsDone <- fault(ctx) }()
	}
	var wg sync.WaitGroup
	for w := o.first; w < o.first+o.workers; w++ {
		wg.Go(func() {
			for i := 0; i < o.ops && ctx.Err() == nil; i++ {
				// Each operation gets its own bounded context: the load's
				// deadline must not cut an operation in half.
				octx, ocancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := wl.Op(octx, w, i)
				ocancel()
				atomic.AddInt64(&res.ops, 1)
				if err != nil {
					atomic.AddInt64(&res.nerrs, 1)
					mu.Lock()
					if len(res.errs) < 50 {
						res.errs = append(res.errs, err)
					}
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	cancel()
	if fault != nil {
		res.faults = <-faultsDone
	}
	return res
}

// checkRecovers runs wl again, without faults, on fresh ids: first a short
// warm-up in which each connection a fault broke may fail once (a client
// notices a dead idle connection only when it next uses it), with retryable
// errors only, then a run in which not one operation may fail.
func checkRecovers(t *testing.T, wl workload) {
	t.Helper()
	warm := runLoad(t, wl, loadOpts{workers: 8, ops: 10, d: 10 * time.Second, first: 200}, nil)
	reportErrors(t, "warm-up after the faults", warm, retryable)
	after := runLoad(t, wl, loadOpts{workers: 4, ops: 50, d: 10 * time.Second, first: 100}, nil)
	if after.nerrs > 0 {
		t.Errorf("%d of %d operations failed after the faults stopped: %v", after.nerrs, after.ops, after.errs)
	}
}

// errorKinds summarises the errors res kept: each distinct text with the
// ids and numbers taken out, and how often it occurred.
func errorKinds(res loadResult) map[string]int {
	m := map[string]int{}
	for _, err := range res.errs {
		m[noIDs.ReplaceAllString(err.Error(), "#")]++
	}
	return m
}

var noIDs = regexp.MustCompile(`"[^"]*"|[0-9]+`)

// retryable reports whether err is one a caller may simply retry: the
// operation may or may not have happened (a connection was lost) and the
// store's contract makes the retry safe. Script errors, unexpected replies
// and invalid arguments are not.
func retryable(err error) bool {
	if err == nil {
		return true
	}
	for _, s := range []error{store.ErrUnexpectedReply, store.ErrInvalidArgument} {
		if errors.Is(err, s) {
			return false
		}
	}
	if _, ok := rueidis.IsRedisErr(err); ok {
		return false
	}
	return true
}

// reportErrors fails t with the errors res saw, if any fails the filter ok.
func reportErrors(t *testing.T, what string, res loadResult, ok func(error) bool) {
	t.Helper()
	for _, err := range res.errs {
		if !ok(err) {
			t.Errorf("%s: %d of %d operations failed; a failure the caller cannot retry: %v (all shown: %v)",
				what, res.nerrs, res.ops, err, res.errs)
			return
		}
	}
}

// taggedID returns an id for worker w's operation i, with one of tags as its
// hash tag when tags are given.
func taggedID(tags []string, w, i int, rest string) string {
	if len(tags) == 0 {
		return fmt.Sprintf("w%d-%d%s", w, i, rest)
	}
	return fmt.Sprintf("{%s}w%d-%d%s", tags[(w+i)%len(tags)], w, i, rest)
}

// claimsLoad drives Claims: Claim, Do and ClaimMany on fresh ids (each must
// win) and Claim on a few shared ids (exactly one winner each).
type claimsLoad struct {
	s      *store.Claims
	prefix string
	tags   []string

	mu         sync.Mutex
	tried      map[string]bool // every id an operation was sent for
	acked      map[string]bool // ids the store said this caller processed
	sharedWins map[string]int  // winners per shared id
	sharedErrs map[string]bool // shared ids an attempt on failed
	violations []string        // replies that broke the contract
}

func newClaimsLoad(c rueidis.Client, prefix string, tags []string) *claimsLoad {
	return &claimsLoad{
		s: mustStore(store.NewClaims(c, store.WithPrefix(prefix))), prefix: prefix, tags: tags,
		tried: map[string]bool{}, acked: map[string]bool{},
		sharedWins: map[string]int{}, sharedErrs: map[string]bool{},
	}
}

func (l *claimsLoad) shared(i int) string {
	if len(l.tags) == 0 {
		return fmt.Sprintf("shared-%d", i%16)
	}
	return fmt.Sprintf("{%s}shared-%d", l.tags[i%len(l.tags)], i%16)
}

func (l *claimsLoad) Op(ctx context.Context, w, i int) error {
	id := taggedID(l.tags, w, i, "")
	var ids []string
	switch i % 4 {
	case 0, 1:
		ids = []string{id}
	case 2:
		ids = []string{id + "a", l.shared(i), id + "b"}
	case 3:
		ids = []string{l.shared(i)}
	}
	l.mu.Lock()
	for _, id := range ids {
		l.tried[id] = true
	}
	l.mu.Unlock()

	var won []bool
	var err error
	switch i % 4 {
	case 0, 3:
		var ok bool
		ok, err = l.s.Claim(ctx, ids[0])
		won = []bool{ok}
	case 1:
		var ran bool
		ran, err = l.s.Do(ctx, id, time.Minute, func(context.Context) error { return nil })
		won = []bool{ran}
	case 2:
		won, err = l.s.ClaimMany(ctx, ids)
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	for j, id := range ids {
		isShared := (i%4 == 3) || (i%4 == 2 && j == 1)
		if err != nil {
			// ClaimMany fills in what it learned; a lone call learned nothing.
			if isShared {
				l.sharedErrs[id] = true
			}
			continue
		}
		switch {
		case isShared && won[j]:
			l.sharedWins[id]++
			l.acked[id] = true
		case isShared:
		case !won[j]:
			l.violations = append(l.violations, fmt.Sprintf("op %d of worker %d: fresh id %q lost", i, w, id))
		default:
			l.acked[id] = true
		}
	}
	return err
}

var leaseValue = regexp.MustCompile(`^~[0-9a-f]{32}$`)

func (l *claimsLoad) Check(t *testing.T, c rueidis.Client) int {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, v := range l.violations {
		t.Error(v)
	}
	for id := range l.tried {
		k := raw(t, c, l.prefix+id)
		switch {
		case l.acked[id] && (k.Type != "string" || k.Str != "1"):
			t.Errorf("acknowledged claim %q: raw key %+v, want the string \"1\"", id, k)
		case k.Type == "none":
		case k.Type != "string" || (k.Str != "1" && !leaseValue.MatchString(k.Str)):
			t.Errorf("claim %q: raw key %+v is neither \"1\" nor a lease", id, k)
		case leaseValue.MatchString(k.Str) && k.PTTL < 0:
			t.Errorf("claim %q: a lease without expiry: %+v", id, k)
		}
	}
	for id, n := range l.sharedWins {
		if n > 1 {
			t.Errorf("shared id %q: %d winners", id, n)
		}
	}
	for id := range l.tried {
		if _, won := l.sharedWins[id]; !won && isSharedID(id) && !l.sharedErrs[id] {
			t.Errorf("shared id %q: every attempt lost, none failed, yet nobody won", id)
		}
	}
	return len(l.tried)
}

func isSharedID(id string) bool {
	return regexp.MustCompile(`(^|})shared-\d+$`).MatchString(id)
}
