package scripts_test

import (
	"context"
	"errors"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce"
	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/internal/recordlayout"
	"github.com/redisonce/redisonce/internal/redisproc"
	"github.com/redisonce/redisonce/store"
)

// Fences that never go back, checked on real servers: the scripts by hand
// with raw keys, and the stores across expiry, Forget, Delete, Release, a
// takeover and a restart of a server that lost its data. The conformance
// suite (storetest "Fences") runs the same sequences on the memory twins and
// on Redis; these add what only a real server can show.

// serverFence reads the server's clock as a fence: TIME's seconds and
// microseconds as nanoseconds since the epoch (the microseconds times 1000).
func serverFence(t *testing.T, c rueidis.Client) uint64 {
	t.Helper()
	arr, err := c.Do(context.Background(), c.B().Time().Build()).AsStrSlice()
	if err != nil || len(arr) != 2 {
		t.Fatalf("TIME: %v %v", arr, err)
	}
	sec, err1 := strconv.ParseUint(arr[0], 10, 64)
	usec, err2 := strconv.ParseUint(arr[1], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("TIME: %v", arr)
	}
	return sec*1_000_000_000 + usec*1000
}

// clockFence checks that s is a clock fence read between lo and hi: a
// canonical 19-digit decimal, a whole number of microseconds.
func clockFence(t *testing.T, what, s string, lo, hi uint64) uint64 {
	t.Helper()
	f, err := strconv.ParseUint(s, 10, 64)
	if err != nil || strconv.FormatUint(f, 10) != s || len(s) != 19 {
		t.Fatalf("%s: fence %q is not a canonical 19-digit decimal", what, s)
	}
	if f%1000 != 0 || f < lo || f > hi {
		t.Errorf("%s: fence %d, want the server's clock in ns at µs precision, within [%d, %d]", what, f, lo, hi)
	}
	return f
}

// fenceQuoted is a quoted canonical 19-digit decimal, as reply renders a fence.
var fenceQuoted = regexp.MustCompile(`"[1-9][0-9]{18}"`)

// normFences replaces, in a rendered reply, every quoted clock fence read
// within [lo, hi] (a whole number of microseconds) by "{fence}".
func normFences(got string, lo, hi uint64) string {
	return fenceQuoted.ReplaceAllStringFunc(got, func(q string) string {
		f, err := strconv.ParseUint(q[1:len(q)-1], 10, 64)
		if err != nil || f%1000 != 0 || f < lo || f > hi {
			return q
		}
		return "{fence}"
	})
}

// createdFence reports whether r holds the fence it was created with (never
// taken over): the server's clock in ns at CreatedAt, the same TIME read.
func createdFence(r store.Record) bool {
	return r.Fence != 0 && r.Fence/1_000_000 == uint64(r.CreatedAt.UnixMilli())
}

// evalRaw runs script name on keys with args and returns the raw reply.
func evalRaw(t *testing.T, c rueidis.Client, name string, keys []string, args ...string) rueidis.RedisMessage {
	t.Helper()
	s, ok := redisonce.Get(name)
	if !ok {
		t.Fatalf("no script %q", name)
	}
	m, err := c.Do(context.Background(), c.B().Evalsha().Sha1(s.SHA1).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()).ToMessage()
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return m
}

func TestFenceScriptsClaim(t *testing.T) {
	c := newClient(t, standaloneURL(t))
	loadScripts(t, c)
	key := keyFor(t, "raw:")

	// A lease won answers its fence, the server's clock; a mark ("1") answers 1.
	lo := serverFence(t, c)
	m := evalRaw(t, c, "claim", []string{key}, "60000", "~tok")
	hi := serverFence(t, c)
	s, err := m.ToString()
	if err != nil || !m.IsString() {
		t.Fatalf("claim of a lease = %s, want its fence as a string", m.String())
	}
	first := clockFence(t, "claim ~tok", s, lo, hi)
	if m := evalRaw(t, c, "claim", []string{key + ":mark"}, "0", "1"); reply(m) != "1" {
		t.Errorf("claim of a mark = %s, want 1", reply(m))
	}
	if m := evalRaw(t, c, "claim", []string{key}, "60000", "~other"); !m.IsInt64() || reply(m)[0] != '-' {
		t.Errorf("claim in flight = %s, want -(ms left)", reply(m))
	}

	// Back to back in one pipeline (release, claim, forget, claim...): every
	// lease granted for the key has a fence above the one before, even when
	// the commands run within the same microsecond.
	rel, _ := redisonce.Get("release")
	fgt, _ := redisonce.Get("forget")
	clm, _ := redisonce.Get("claim")
	var cmds rueidis.Commands
	for i := 0; i < 100; i++ {
		if i%2 == 0 {
			cmds = append(cmds, c.B().Evalsha().Sha1(rel.SHA1).Numkeys(1).Key(key).Arg("tok").Build())
		} else {
			cmds = append(cmds, c.B().Evalsha().Sha1(fgt.SHA1).Numkeys(1).Key(key).Build())
		}
		cmds = append(cmds, c.B().Evalsha().Sha1(clm.SHA1).Numkeys(1).Key(key).Arg("60000", "~tok").Build())
	}
	last := first
	for i, r := range c.DoMulti(context.Background(), cmds...) {
		if i%2 == 0 {
			if err := r.Error(); err != nil {
				t.Fatalf("release/forget: %v", err)
			}
			continue
		}
		s, err := r.ToString()
		if err != nil {
			t.Fatalf("claim %d: %v", i/2, err)
		}
		f := clockFence(t, "claim after a delete", s, first, ^uint64(0))
		if f <= last {
			t.Errorf("claim %d: fence %d, not above %d granted before it", i/2, f, last)
		}
		last = f
	}

	// In one MULTI (the commands run back to back, nothing between them):
	// claim, forget, claim, release, claim.
	frg := c.B().Evalsha().Sha1(fgt.SHA1).Numkeys(1).Key(key).Build()
	var multi rueidis.Commands
	multi = append(multi, c.B().Multi().Build(), frg)
	for i := 0; i < 3; i++ {
		multi = append(multi, c.B().Evalsha().Sha1(clm.SHA1).Numkeys(1).Key(key).Arg("60000", "~tok").Build())
		if i == 0 {
			multi = append(multi, frg)
		} else {
			multi = append(multi, c.B().Evalsha().Sha1(rel.SHA1).Numkeys(1).Key(key).Arg("tok").Build())
		}
	}
	multi = append(multi, c.B().Exec().Build())
	res := c.DoMulti(context.Background(), multi...)
	arr, err := res[len(res)-1].ToArray()
	if err != nil || len(arr) != 7 {
		t.Fatalf("EXEC = %v, %v", arr, err)
	}
	for i := 1; i < 7; i += 2 {
		s, err := arr[i].ToString()
		if err != nil {
			t.Fatalf("claim in MULTI: %s", arr[i].String())
		}
		f := clockFence(t, "claim in MULTI", s, last, ^uint64(0))
		if f <= last {
			t.Errorf("claim %d in MULTI: fence %d, not above %d granted before it", i/2, f, last)
		}
		last = f
	}

	// A lease that expired: the next one's fence is above its fence.
	k2 := key + ":short"
	m = evalRaw(t, c, "claim", []string{k2}, "5", "~tok")
	s, _ = m.ToString()
	f1, _ := strconv.ParseUint(s, 10, 64)
	time.Sleep(50 * time.Millisecond)
	m = evalRaw(t, c, "claim", []string{k2}, "60000", "~tok")
	s, err = m.ToString()
	if f2, _ := strconv.ParseUint(s, 10, 64); err != nil || f2 <= f1 {
		t.Errorf("claim after the lease expired: %q, %v; want a fence above %d", s, err, f1)
	}

	// claim_many: each lease won has its fence, a mark 1, the rest as claim.lua.
	k3, k4 := key+":{b}1", key+":{b}2"
	do(t, c, "SET", k4, "1")
	lo = serverFence(t, c)
	m = evalRaw(t, c, "claim_many", []string{k3, k4, k3}, "60000", "~tok")
	arr, err = m.ToArray()
	hi = serverFence(t, c)
	if err != nil || len(arr) != 3 {
		t.Fatalf("claim_many = %v, %v", arr, err)
	}
	if s, err := arr[0].ToString(); err != nil {
		t.Errorf("claim_many element 1 = %s, want a fence", arr[0].String())
	} else {
		clockFence(t, "claim_many", s, lo, hi)
	}
	if got := reply(arr[1]); got != "0" {
		t.Errorf("claim_many element 2 = %s, want 0 (processed)", got)
	}
	if got := reply(arr[2]); got != "-1" {
		t.Errorf("claim_many element 3 = %s, want -1 (in flight: the first occurrence won)", got)
	}
}

// acquireFence runs acquire.lua on key and returns its acquired flag and fence.
func acquireFence(t *testing.T, c rueidis.Client, key, lease string) (int64, string) {
	t.Helper()
	m := evalRaw(t, c, "acquire", []string{key}, "0", "tokB", "", lease)
	arr, err := m.ToArray()
	if err != nil || len(arr) != 10 {
		t.Fatalf("acquire = %v, %v", arr, err)
	}
	flag, _ := strconv.ParseInt(reply(arr[0]), 10, 64)
	fence, err := arr[7].ToString()
	if err != nil {
		t.Fatalf("acquire fence = %s", arr[7].String())
	}
	return flag, fence
}

func TestFenceScriptsAcquire(t *testing.T) {
	c := newClient(t, standaloneURL(t))
	loadScripts(t, c)
	key := keyFor(t, "raw:")
	seed := func(fence string) {
		t.Helper()
		v := recordlayout.Encode(recordlayout.Fields{Status: "pending", CreatedMS: 1000, UpdatedMS: 2000, LeaseMS: 1, Fence: fence, Token: "tokA"})
		do(t, c, "SET", key, string(v))
	}

	// A new record: the clock's fence.
	lo := serverFence(t, c)
	flag, s := acquireFence(t, c, key, "1")
	hi := serverFence(t, c)
	if flag != 1 {
		t.Errorf("acquire of an absent key: flag %d, want 1 (created)", flag)
	}
	created := clockFence(t, "new record", s, lo, hi)
	time.Sleep(5 * time.Millisecond)
	// Its takeover: the clock again, above it; flag 2.
	lo = serverFence(t, c)
	flag, s = acquireFence(t, c, key, "0")
	hi = serverFence(t, c)
	if flag != 2 {
		t.Errorf("takeover: flag %d, want 2 (taken over)", flag)
	}
	if f := clockFence(t, "takeover", s, lo, hi); f <= created {
		t.Errorf("takeover fence %d, not above %d", f, created)
	}

	// A record whose fence is ahead of the clock (written by a server whose
	// clock was ahead, or one since stepped back) is taken over at its fence
	// + 1, exactly, past 2^53 and across a carry.
	for _, tc := range []struct{ seed, want string }{
		{"9000000000000000001", "9000000000000000002"},
		{"8999999999999999999", "9000000000000000000"},
		{"9999999999999999998", "9999999999999999999"},
	} {
		seed(tc.seed)
		if flag, s := acquireFence(t, c, key, "0"); flag != 2 || s != tc.want {
			t.Errorf("takeover of fence %s: flag %d fence %s, want 2, %s", tc.seed, flag, s, tc.want)
		}
	}
	// The largest fence is never taken over.
	seed("9999999999999999999")
	if flag, s := acquireFence(t, c, key, "0"); flag != 0 || s != "9999999999999999999" {
		t.Errorf("takeover at the largest fence: flag %d fence %s, want 0 and the fence kept", flag, s)
	}
	// A fence below the clock (a small one, or one from long ago): the clock's.
	seed("7")
	lo = serverFence(t, c)
	_, s = acquireFence(t, c, key, "0")
	clockFence(t, "takeover of fence 7", s, lo, serverFence(t, c))

	// The limit: a fence ahead of the clock lives in its record only. Once
	// the record is deleted (or expires, or the server loses it), the next
	// record gets the clock's fence, lower than the one ahead: a fence goes
	// back only after the clock went back (or a fence was written ahead of
	// it) and the key was lost.
	seed("9000000000000000001")
	do(t, c, "DEL", key)
	lo = serverFence(t, c)
	_, s = acquireFence(t, c, key, "0")
	if f := clockFence(t, "after a future fence was deleted", s, lo, serverFence(t, c)); f >= 9000000000000000001 {
		t.Errorf("fence %d: the clock is past 2255?", f)
	}
}

// fenceOfClaimsDo runs s.Do on id and returns the fence fn saw.
func fenceOfClaimsDo(t *testing.T, s *store.Claims, id string) uint64 {
	t.Helper()
	var fence uint64
	ran, err := s.Do(context.Background(), id, 10*time.Second, func(ctx context.Context) error {
		l, _ := store.LeaseFromContext(ctx)
		fence = l.Fence
		return nil
	})
	if !ran || err != nil {
		t.Fatalf("Do(%q) = %v, %v", id, ran, err)
	}
	return fence
}

// fenceOfRecordsDo runs s.Do on key and returns the fence fn saw.
func fenceOfRecordsDo(t *testing.T, s *store.Records, key string) uint64 {
	t.Helper()
	var fence uint64
	_, replayed, err := s.Do(context.Background(), key, store.AcquireOptions{Lease: 10 * time.Second}, func(ctx context.Context) ([]byte, error) {
		l, _ := store.LeaseFromContext(ctx)
		fence = l.Fence
		return []byte("r"), nil
	})
	if replayed || err != nil {
		t.Fatalf("Do(%q) = replayed %v, %v", key, replayed, err)
	}
	return fence
}

func TestFenceAcrossRestartWithoutData(t *testing.T) {
	srv := newServer(t, redisproc.Options{}) // no RDB, no AOF: a restart loses every key
	c := newClient(t, srv.URL())
	claims := must.Store(store.NewClaims(c, store.WithPrefix("f:c:")))
	records := must.Store(store.NewRecords(c, store.WithPrefix("f:r:")))

	c1 := fenceOfClaimsDo(t, claims, "m")
	r1 := fenceOfRecordsDo(t, records, "k")
	if c1 == 0 || r1 == 0 {
		t.Fatalf("fences %d, %d; want both above 0", c1, r1)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	// A new client: the old one's connections died with the server.
	c = newClient(t, srv.URL())
	claims = must.Store(store.NewClaims(c, store.WithPrefix("f:c:")))
	records = must.Store(store.NewRecords(c, store.WithPrefix("f:r:")))
	if seen, err := claims.Seen(context.Background(), "m"); err != nil || seen {
		t.Fatalf("Seen after the restart = %v, %v: the test needs a server that lost its data", seen, err)
	}
	if c2 := fenceOfClaimsDo(t, claims, "m"); c2 <= c1 {
		t.Errorf("Claims.Do after the restart: fence %d, not above %d before it", c2, c1)
	}
	if r2 := fenceOfRecordsDo(t, records, "k"); r2 <= r1 {
		t.Errorf("Records.Do after the restart: fence %d, not above %d before it", r2, r1)
	}
}

func TestFenceClaimsDoAfterExpiredLease(t *testing.T) {
	// A consumer that died holding a lease: its key expires, and the next
	// Do's fence is above the dead consumer's.
	c := newClient(t, standaloneURL(t))
	prefix := keyFor(t, "f:") + ":"
	s := must.Store(store.NewClaims(c, store.WithPrefix(prefix)))
	loadScripts(t, c)
	m := evalRaw(t, c, "claim", []string{prefix + "m"}, "20", "~dead")
	dead, err := m.ToString()
	if err != nil {
		t.Fatalf("claim = %s", m.String())
	}
	d, _ := strconv.ParseUint(dead, 10, 64)
	_, err = s.Do(context.Background(), "m", time.Second, func(context.Context) error { return nil })
	if !errors.Is(err, store.ErrInFlight) {
		t.Fatalf("Do within the dead consumer's lease = %v, want ErrInFlight", err)
	}
	time.Sleep(60 * time.Millisecond)
	if f := fenceOfClaimsDo(t, s, "m"); f <= d {
		t.Errorf("Do after the dead consumer's lease expired: fence %d, not above %d", f, d)
	}
}

func TestFenceAcrossFlushAll(t *testing.T) {
	// FLUSHALL between deliveries (an operator, or a failover to an empty
	// replica): the next lease's fence is above the one before the flush.
	srv := newServer(t, redisproc.Options{})
	c := newClient(t, srv.URL())
	claims := must.Store(store.NewClaims(c, store.WithPrefix("f:c:")))
	records := must.Store(store.NewRecords(c, store.WithPrefix("f:r:")))
	lastC, lastR := fenceOfClaimsDo(t, claims, "m"), fenceOfRecordsDo(t, records, "k")
	for i := 0; i < 20; i++ {
		do(t, c, "FLUSHALL")
		if f := fenceOfClaimsDo(t, claims, "m"); f <= lastC {
			t.Errorf("flush %d: Claims.Do fence %d, not above %d before it", i, f, lastC)
		} else {
			lastC = f
		}
		if f := fenceOfRecordsDo(t, records, "k"); f <= lastR {
			t.Errorf("flush %d: Records.Do fence %d, not above %d before it", i, f, lastR)
		} else {
			lastR = f
		}
	}
}

// TestFenceScriptsLeaseMany: lease_many.lua gives each key it wins a fence of
// its own — the call's clock read plus the key's rank among the keys won —
// above every fence granted for that key before (claim.lua's, then
// lease_many.lua's in an earlier call, back to back in one pipeline), and
// answers a processed key 0 and a held one -(ms left) without a fence.
func TestFenceScriptsLeaseMany(t *testing.T) {
	t.Parallel()
	c := newClient(t, standaloneURL(t))
	loadScripts(t, c)
	key := keyFor(t, "fence:many")
	k1, k2, k3, k4 := key+":{m}1", key+":{m}2", key+":{m}3", key+":{m}4"
	do(t, c, "SET", k3, "1")
	do(t, c, "SET", k4, "~other", "PX", "60000")
	// k1 leased and released by claim.lua first: lease_many must go above it.
	m := evalRaw(t, c, "claim", []string{k1}, "60000", "~old")
	s, err := m.ToString()
	if err != nil {
		t.Fatal(err)
	}
	before, _ := strconv.ParseUint(s, 10, 64)
	evalRaw(t, c, "release", []string{k1}, "old")
	lo := serverFence(t, c)
	m = evalRaw(t, c, "lease_many", []string{k1, k2, k3, k4}, "60000", "~t1", "~t2", "~t3", "~t4")
	hi := serverFence(t, c)
	arr, err := m.ToArray()
	if err != nil || len(arr) != 4 {
		t.Fatalf("lease_many = %v, %v", arr, err)
	}
	f := make([]uint64, 2)
	for i := range f {
		s, err := arr[i].ToString()
		if err != nil {
			t.Fatalf("lease_many element %d = %s, want a fence", i+1, arr[i].String())
		}
		f[i], _ = strconv.ParseUint(s, 10, 64)
		if len(s) != 19 || f[i]/1000*1000+uint64(i) != f[i] || f[i]-uint64(i) < lo || f[i]-uint64(i) > hi {
			t.Errorf("lease_many element %d = %s; want the clock in [%d, %d] at µs precision plus %d", i+1, s, lo, hi, i)
		}
	}
	if f[0] <= before || f[0] == f[1] {
		t.Errorf("fences %d, %d after claim.lua's %d: want distinct, above it", f[0], f[1], before)
	}
	if got := reply(arr[2]); got != "0" {
		t.Errorf("lease_many element 3 = %s, want 0 (processed)", got)
	}
	if n, err := arr[3].AsInt64(); err != nil || n >= 0 || n < -60000 {
		t.Errorf("lease_many element 4 = %s, want -(ms left on the holder's lease)", arr[3].String())
	}
	// Released and leased again, twice in one pipeline: each above the last.
	last := f[0]
	for range 2 {
		evalRaw(t, c, "release_many", []string{k1, k2}, "t1", "t2")
		m := evalRaw(t, c, "lease_many", []string{k1, k2}, "60000", "~t1", "~t2")
		arr, err := m.ToArray()
		if err != nil || len(arr) != 2 {
			t.Fatalf("lease_many again = %v, %v", arr, err)
		}
		s, _ := arr[0].ToString()
		g, _ := strconv.ParseUint(s, 10, 64)
		if g <= last {
			t.Errorf("k1 leased again: fence %d, want above %d", g, last)
		}
		last = g
	}
}
