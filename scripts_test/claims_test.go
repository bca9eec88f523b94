package scripts_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/internal/redisproc"
	"github.com/redisonce/redisonce/store"
	"github.com/redisonce/redisonce/store/storetest"
)

var prefixSeq atomic.Int64

// uniquePrefix returns a key prefix no other test uses.
func uniquePrefix(t *testing.T) string {
	return fmt.Sprintf("t%d:%s:", prefixSeq.Add(1), t.Name())
}

func claimsHarness(url func(*testing.T) string) func(*testing.T) {
	return func(t *testing.T) {
		c := newClient(t, url(t))
		storetest.TestClaims(t, storetest.ClaimsHarness{
			New: func(t *testing.T, opts ...store.Option) (*store.Claims, error) {
				return store.NewClaims(c, append([]store.Option{store.WithPrefix(uniquePrefix(t))}, opts...)...)
			},
			Wait: time.Sleep,
			Tick: 100 * time.Millisecond,
		})
	}
}

// TestClaimsClusterConformance runs storetest.TestClaims on a cluster; the
// standalone run is store's TestRedisClaims.
func TestClaimsClusterConformance(t *testing.T) {
	claimsHarness(clusterURL)(t)
}

func TestClaimsClusterClientMode(t *testing.T) {
	c := newClient(t, clusterURL(t))
	if c.Mode() != rueidis.ClientModeCluster {
		t.Fatalf("client mode on the cluster = %v, want cluster", c.Mode())
	}
}

// TestClaimsSeedLayout: Claim writes exactly `SET bq:idemp:<id> 1 PX ttl`, and a
// key a `SET NX` deduper wrote counts as processed.
func TestClaimsSeedLayout(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, standaloneURL(t))
	s := must.Store(store.NewClaims(c, store.WithTTL(time.Minute)))
	id := keyFor(t, "")
	if won, err := s.Claim(ctx, id); err != nil || !won {
		t.Fatalf("Claim = %v, %v", won, err)
	}
	want := rawKey{Type: "string", Str: "1", PTTL: 60000}
	if diff := cmp.Diff(want, raw(t, c, "bq:idemp:"+id), approxTTL); diff != "" {
		t.Errorf("raw key (-want +got):\n%s", diff)
	}
	seedID := id + ":seed"
	do(t, c, "SET", "bq:idemp:"+seedID, "1", "NX", "PX", "60000")
	if won, err := s.Claim(ctx, seedID); err != nil || won {
		t.Errorf("Claim of a seed-written id = %v, %v; want false", won, err)
	}
	if seen, err := s.Seen(ctx, seedID); err != nil || !seen {
		t.Errorf("Seen of a seed-written id = %v, %v; want true", seen, err)
	}
}

// TestClaimsOddIDs: ids with NUL, braces and colons are stored under exactly
// prefix+id (no hash-tag or escaping surprises), on standalone and cluster.
func TestClaimsOddIDs(t *testing.T) {
	for name, url := range map[string]func(*testing.T) string{"standalone": standaloneURL, "cluster": clusterURL} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			c := newClient(t, url(t))
			prefix := uniquePrefix(t)
			s := must.Store(store.NewClaims(c, store.WithPrefix(prefix)))
			for _, id := range []string{"a\x00b", "{x}", "}{", "a:b:{c}", "\xff\xfe"} {
				if won, err := s.Claim(ctx, id); err != nil || !won {
					t.Fatalf("Claim(%q) = %v, %v", id, won, err)
				}
				if diff := cmp.Diff(rawKey{Type: "string", Str: "1", PTTL: -1}, raw(t, c, prefix+id)); diff != "" {
					t.Errorf("key %q (-want +got):\n%s", prefix+id, diff)
				}
			}
		})
	}
}

// TestClaimsBadInputSendsNothing: refused calls leave no key and send no command
// (the server's command count does not move).
func TestClaimsBadInputSendsNothing(t *testing.T) {
	ctx := context.Background()
	srv := newServer(t, redisproc.Options{})
	c := newClient(t, srv.URL())
	s := must.Store(store.NewClaims(c))
	before := commandCount(t, c)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	long := strings.Repeat("x", store.MaxIDLen+1)
	checks := []struct {
		name   string
		err    error
		target error
	}{}
	add := func(name string, err, target error) {
		checks = append(checks, struct {
			name   string
			err    error
			target error
		}{name, err, target})
	}
	_, err := s.Claim(ctx, "")
	add("empty id", err, store.ErrInvalidArgument)
	_, err = s.Claim(ctx, long)
	add("long id", err, store.ErrInvalidArgument)
	_, err = s.ClaimMany(ctx, []string{"ok", ""})
	add("batch with an empty id", err, store.ErrInvalidArgument)
	_, err = store.NewClaims(c, store.WithTTL(-time.Second))
	add("negative ttl", err, store.ErrInvalidArgument)
	_, err = s.Do(ctx, "ok", -time.Second, func(context.Context) error { return nil })
	add("negative lease", err, store.ErrInvalidArgument)
	_, err = s.Claim(cancelled, "ok")
	add("cancelled context", err, context.Canceled)
	for _, ch := range checks {
		if !errors.Is(ch.err, ch.target) {
			t.Errorf("%s: error = %v, want %v", ch.name, ch.err, ch.target)
		}
	}
	// The second reading counts the first INFO, and nothing else may be sent.
	if after := commandCount(t, c); after != before+1 {
		t.Errorf("refused calls sent %d commands", after-before-1)
	}
	if n, err := c.Do(ctx, c.B().Dbsize().Build()).AsInt64(); err != nil || n != 0 {
		t.Errorf("DBSIZE after refused calls = %d, %v; want 0", n, err)
	}
	if _, err := store.OpenClaims(srv.URL(), store.WithTTL(-1)); !errors.Is(err, store.ErrInvalidArgument) {
		t.Errorf("OpenClaims with a negative TTL: %v", err)
	}
}

// commandCount is the server's total number of commands processed before the
// INFO that reads it.
func commandCount(t *testing.T, c rueidis.Client) int64 {
	t.Helper()
	info, err := c.Do(context.Background(), c.B().Info().Section("stats").Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "total_commands_processed:"); ok {
			var n int64
			fmt.Sscan(v, &n)
			return n
		}
	}
	t.Fatal("no total_commands_processed in INFO")
	return 0
}

// TestClaimsConcurrentOneWinner: 64 goroutines over 4 clients claim the same id,
// 100 rounds, exactly one winner each round; and the same through Do.
func TestClaimsConcurrentOneWinner(t *testing.T) {
	ctx := context.Background()
	url := standaloneURL(t)
	prefix := uniquePrefix(t)
	var stores []*store.Claims
	for range 4 {
		stores = append(stores, must.Store(store.NewClaims(newClient(t, url), store.WithPrefix(prefix))))
	}
	for round := range 100 {
		id := fmt.Sprint("id-", round)
		var wins, runs atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for g := range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s := stores[g%len(stores)]
				<-start
				if g%2 == 0 {
					won, err := s.Claim(ctx, id)
					if err != nil {
						t.Errorf("Claim: %v", err)
					}
					if won {
						wins.Add(1)
					}
					return
				}
				ran, err := s.Do(ctx, id+":do", time.Minute, func(context.Context) error { runs.Add(1); return nil })
				if err != nil && !errors.Is(err, store.ErrInFlight) {
					t.Errorf("Do: %v", err)
				}
				_ = ran
			}()
		}
		close(start)
		wg.Wait()
		if w, r := wins.Load(), runs.Load(); w != 1 || r != 1 {
			t.Fatalf("round %d: %d Claim winners and %d Do runs, want 1 and 1", round, w, r)
		}
	}
}

// TestClaimManyNoScript: after SCRIPT FLUSH a batch reloads the script and every
// entry runs exactly once.
func TestClaimManyNoScript(t *testing.T) {
	ctx := context.Background()
	for name, url := range map[string]func(*testing.T) string{"standalone": standaloneURL, "cluster": clusterURL} {
		t.Run(name, func(t *testing.T) {
			c := newClient(t, url(t))
			s := must.Store(store.NewClaims(c, store.WithPrefix(uniquePrefix(t))))
			for round := range 3 {
				for _, n := range c.Nodes() {
					if err := n.Do(ctx, n.B().ScriptFlush().Build()).Error(); err != nil {
						t.Fatal(err)
					}
				}
				ids := []string{fmt.Sprint("a", round), fmt.Sprint("b", round), fmt.Sprint("a", round)}
				got, err := s.ClaimMany(ctx, ids)
				if err != nil {
					t.Fatalf("ClaimMany after SCRIPT FLUSH: %v", err)
				}
				if diff := cmp.Diff([]bool{true, true, false}, got); diff != "" {
					t.Errorf("round %d (-want +got):\n%s", round, diff)
				}
			}
			// Single calls fall back to EVAL too.
			for _, n := range c.Nodes() {
				_ = n.Do(ctx, n.B().ScriptFlush().Build()).Error()
			}
			if won, err := s.Claim(ctx, "single"); err != nil || !won {
				t.Errorf("Claim after SCRIPT FLUSH = %v, %v", won, err)
			}
		})
	}
}

// TestClaimManyAcrossSlots: a batch whose ids live on all three masters.
func TestClaimManyAcrossSlots(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, cluster3URL(t))
	s := must.Store(store.NewClaims(c, store.WithPrefix(uniquePrefix(t))))
	ids := make([]string, 300)
	want := make([]bool, len(ids))
	for i := range ids {
		ids[i] = fmt.Sprint("m", i%200) // 100 duplicates
		want[i] = i < 200
	}
	got, err := s.ClaimMany(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ClaimMany (-want +got):\n%s", diff)
	}
	perNode := map[string]int64{}
	for addr, n := range c.Nodes() {
		perNode[addr], _ = n.Do(ctx, n.B().Dbsize().Build()).AsInt64()
	}
	spread := 0
	for _, k := range perNode {
		if k > 0 {
			spread++
		}
	}
	if spread < 3 {
		t.Errorf("keys landed on %d nodes (%v); the test wants a batch spanning all masters", spread, perNode)
	}
	got, err = s.ClaimMany(ctx, ids[:200])
	if err != nil {
		t.Fatal(err)
	}
	for i, won := range got {
		if won {
			t.Fatalf("second batch: %q won again", ids[i])
		}
	}
}

// TestClaimsClose: a store made with NewClaims leaves the caller's client open;
// one made with OpenClaims closes its own.
func TestClaimsClose(t *testing.T) {
	ctx := context.Background()
	url := standaloneURL(t)
	c := newClient(t, url)
	if err := must.Store(store.NewClaims(c)).Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
		t.Errorf("borrowed client closed by Close: %v", err)
	}
	s, err := store.OpenClaims(url, store.WithPrefix(uniquePrefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := s.Claim(ctx, "y"); !errors.Is(err, rueidis.ErrClosing) {
		t.Errorf("Claim after Close = %v, want rueidis.ErrClosing", err)
	}
	if _, err := store.OpenClaims("redis://127.0.0.1:1"); err == nil {
		t.Error("OpenClaims on a closed port succeeded")
	}
}
