package scripts_test

import (
	"bufio"
	"context"
	"crypto/sha1"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/redis/rueidis/mock"

	"github.com/redisonce/redisonce"
	"github.com/redisonce/redisonce/internal/faultnet"
	"github.com/redisonce/redisonce/internal/redisproc"
	"github.com/redisonce/redisonce/store"
)

// The lease faults: fn's context never outlives the lease, a
// paused owner sees its loss on waking, a retried commit after a takeover is
// ErrLeaseLost, a final write survives a failure that is not its own, and a
// slow link at half the lease loses nothing. Every test records times and
// counts and asserts the property under the fault, with real redis-servers.

// shaNames maps each embedded script's SHA1 to its name, so that a hookClient
// can tell which script a command runs.
var shaNames = func() map[string]string {
	m := map[string]string{}
	for _, s := range redisonce.All() {
		m[s.SHA1] = s.Name
	}
	return m
}()

// hookClient is a real rueidis client whose script calls pass through hook
// first: hook may answer in the server's place (a fault: a lost reply, a
// stalled or failing call) or let the call through (ok false).
type hookClient struct {
	rueidis.Client
	hook func(ctx context.Context, script string, cmd rueidis.Completed) (r rueidis.RedisResult, ok bool)
}

func (c *hookClient) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	if args := cmd.Commands(); len(args) > 1 && c.hook != nil {
		name := ""
		switch args[0] {
		case "EVALSHA":
			name = shaNames[args[1]]
		case "EVAL": // the heartbeats always send EVAL; any script after NOSCRIPT
			name = shaNames[fmt.Sprintf("%x", sha1.Sum([]byte(args[1])))]
		}
		if r, ok := c.hook(ctx, name, cmd); ok {
			return r
		}
	}
	return c.Client.Do(ctx, cmd)
}

// DoMulti passes each command through hook as Do does (a Batch's gathered
// calls go out as one DoMulti); the ones hook leaves go to the server in
// one DoMulti, and the replies come back in order.
func (c *hookClient) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	out := make([]rueidis.RedisResult, len(cmds))
	var pass []rueidis.Completed
	var at []int
	var wg sync.WaitGroup
	for i, cmd := range cmds {
		name := ""
		if args := cmd.Commands(); len(args) > 1 && c.hook != nil {
			switch args[0] {
			case "EVALSHA":
				name = shaNames[args[1]]
			case "EVAL":
				name = shaNames[fmt.Sprintf("%x", sha1.Sum([]byte(args[1])))]
			}
		}
		if name == "" {
			pass, at = append(pass, cmd), append(at, i)
			continue
		}
		// Each hooked command on its own: a stalled one holds up only itself.
		wg.Go(func() {
			if r, ok := c.hook(ctx, name, cmd); ok {
				out[i] = r
				return
			}
			out[i] = c.Client.Do(ctx, cmd)
		})
	}
	if len(pass) > 0 {
		for j, r := range c.Client.DoMulti(ctx, pass...) {
			out[at[j]] = r
		}
	}
	wg.Wait()
	return out
}

// extendsStall is a hook under which every lease extension (extend.lua,
// renew.lua, extend_many.lua) hangs until its context ends and nothing reaches the server: the
// owner is cut off from Redis for everything but its claim and final write.
func extendsStall(ctx context.Context, script string, _ rueidis.Completed) (rueidis.RedisResult, bool) {
	if script != "extend" && script != "renew" && script != "extend_many" {
		return rueidis.RedisResult{}, false
	}
	<-ctx.Done()
	return mock.ErrorResult(ctx.Err()), true
}

// leaseRun is what one owner's fn saw: when it started, the deadline its
// context reported, and when its context was cancelled.
type leaseRun struct {
	start, cancelled, deadline time.Time
	hasDeadline                bool
}

// TestLeaseContextEndsBeforeTakeover: owner A's extensions never reach the
// server (its lease runs out there one lease after its claim arrived); B
// tries every few ms. A's fn context must be cancelled before B's fn starts,
// and its Deadline must say when, no later than the claim's send time plus
// the lease: the send time of the claim command that ran (the hook sees it
// leave), which on a fresh server is the EVAL after EVALSHA's NOSCRIPT.
// Claims and Records, two lease lengths.
func TestLeaseContextEndsBeforeTakeover(t *testing.T) {
	// Not parallel: its margins are tens of ms, and a binary busy with
	// the parallel tests delays timers and the proxy far more than that.
	srv := newServer(t, redisproc.Options{})
	base := newClient(t, srv.URL())
	var claimSent time.Time // A's last claim or acquire command, as it left
	hooked := &hookClient{Client: base, hook: func(ctx context.Context, script string, cmd rueidis.Completed) (rueidis.RedisResult, bool) {
		if script == "claim" || script == "acquire" {
			claimSent = time.Now()
		}
		return extendsStall(ctx, script, cmd)
	}}
	for _, lease := range []time.Duration{300 * time.Millisecond, 700 * time.Millisecond} {
		for _, kind := range []string{"claims", "records", "batch"} {
			t.Run(fmt.Sprintf("%s/%v", kind, lease), func(t *testing.T) {
				prefix := uniquePrefix(t)
				a, b := leaseDoers(kind, hooked, base, prefix, lease)
				ctx := context.Background()
				var ra leaseRun
				start := time.Now()
				aDone, aStarted := make(chan error, 1), make(chan struct{})
				go func() {
					aDone <- a(ctx, func(ctx context.Context) error {
						ra.start = time.Now()
						ra.deadline, ra.hasDeadline = ctx.Deadline()
						close(aStarted)
						<-ctx.Done()
						ra.cancelled = time.Now()
						return ctx.Err()
					})
				}()
				select {
				case <-aStarted:
				case err := <-aDone:
					t.Fatalf("A's Do did not run fn: %v", err)
				}
				var bStart time.Time
				deadline := time.Now().Add(10 * lease)
				for bStart.IsZero() && time.Now().Before(deadline) {
					err := b(ctx, func(context.Context) error { bStart = time.Now(); return nil })
					if err != nil && !errors.Is(err, store.ErrInFlight) {
						t.Fatalf("B: %v", err)
					}
					time.Sleep(2 * time.Millisecond)
				}
				if err := <-aDone; err == nil {
					t.Error("A's Do succeeded though its lease was never extended")
				}
				if bStart.IsZero() {
					t.Fatalf("B never took over within %v", 10*lease)
				}
				// A's fn started after its claim's reply: claimSent is written.
				sent := claimSent
				t.Logf("A's Do called %v, its claim sent +%v; A started +%v, deadline +%v (%v), cancelled +%v; B started +%v",
					start.Format("15:04:05.000"), sent.Sub(start), ra.start.Sub(sent), ra.deadline.Sub(sent), ra.hasDeadline, ra.cancelled.Sub(sent), bStart.Sub(sent))
				if sent.Before(start) {
					t.Fatalf("the hook saw no claim of A's")
				}
				if !ra.cancelled.Before(bStart) {
					t.Errorf("B's fn started %v before A's context was cancelled", ra.cancelled.Sub(bStart))
				}
				if !ra.hasDeadline || ra.deadline.After(sent.Add(lease)) {
					t.Errorf("A's ctx.Deadline() = %v, %v; want the local lease deadline, at most the claim's send time + lease (+%v)", ra.deadline.Sub(sent), ra.hasDeadline, lease)
				}
				if ra.cancelled.Before(ra.deadline) {
					t.Errorf("A's context was cancelled %v before the deadline it reported", ra.deadline.Sub(ra.cancelled))
				}
			})
		}
	}
}

// leaseDoers returns Do for owner A (on ca) and for B (on cb) as one shape.
// aOpts are options for A's store only.
func leaseDoers(kind string, ca, cb rueidis.Client, prefix string, lease time.Duration, aOpts ...store.Option) (a, b func(context.Context, func(context.Context) error) error) {
	const id = "lease-id"
	aOpts = append([]store.Option{store.WithPrefix(prefix)}, aOpts...)
	if kind == "batch" {
		// Claims.Batch: the id claimed up front, then run by Batch.Do, its
		// extensions and final write gathered (store/claims_lease_batch.go).
		sa, sb := mustStore(store.NewClaims(ca, aOpts...)), mustStore(store.NewClaims(cb, store.WithPrefix(prefix)))
		do := func(s *store.Claims) func(context.Context, func(context.Context) error) error {
			return func(ctx context.Context, fn func(context.Context) error) error {
				b, err := s.Batch(ctx, []string{id}, lease)
				if err != nil {
					return err
				}
				defer b.Close()
				_, err = b.Do(ctx, id, fn)
				return err
			}
		}
		return do(sa), do(sb)
	}
	if kind == "claims" {
		sa, sb := mustStore(store.NewClaims(ca, aOpts...)), mustStore(store.NewClaims(cb, store.WithPrefix(prefix)))
		do := func(s *store.Claims) func(context.Context, func(context.Context) error) error {
			return func(ctx context.Context, fn func(context.Context) error) error {
				_, err := s.Do(ctx, id, lease, fn)
				return err
			}
		}
		return do(sa), do(sb)
	}
	sa, sb := mustStore(store.NewRecords(ca, aOpts...)), mustStore(store.NewRecords(cb, store.WithPrefix(prefix)))
	do := func(s *store.Records) func(context.Context, func(context.Context) error) error {
		return func(ctx context.Context, fn func(context.Context) error) error {
			_, _, err := s.Do(ctx, id, store.AcquireOptions{Lease: lease}, func(ctx context.Context) ([]byte, error) {
				return []byte("r"), fn(ctx)
			})
			return err
		}
	}
	return do(sa), do(sb)
}

// TestLeaseRetriedCommitAfterTakeover: A's lease runs out (its extensions
// never reach Redis), B takes the id over, runs and commits; A's fn ignores
// its cancelled context and succeeds, and A's first commit runs but its reply
// is lost. The retry finds the processed mark, which is B's: Do must say
// ErrLeaseLost, not success. Without the takeover, the same lost reply is
// A's own commit, and Do succeeds.
func TestLeaseRetriedCommitAfterTakeover(t *testing.T) {
	t.Parallel()
	srv := newServer(t, redisproc.Options{})
	base := newClient(t, srv.URL())
	const lease = 300 * time.Millisecond
	ctx := context.Background()
	var commits atomic.Int32
	loseFirstCommitReply := func(ctx context.Context, script string, cmd rueidis.Completed) (rueidis.RedisResult, bool) {
		if script == "commit" && commits.Load() == 0 {
			r := base.Do(ctx, cmd)
			if err := r.Error(); err != nil {
				return r, true // NOSCRIPT: it did not run, and the store sends EVAL
			}
			commits.Add(1)
			return mock.ErrorResult(io.ErrUnexpectedEOF), true
		}
		if script == "commit" {
			commits.Add(1)
		}
		return rueidis.RedisResult{}, false
	}

	t.Run("AfterTakeover", func(t *testing.T) {
		commits.Store(0)
		hooked := &hookClient{Client: base, hook: func(ctx context.Context, script string, cmd rueidis.Completed) (rueidis.RedisResult, bool) {
			if r, ok := extendsStall(ctx, script, cmd); ok {
				return r, true
			}
			return loseFirstCommitReply(ctx, script, cmd)
		}}
		prefix := uniquePrefix(t)
		a, b := mustStore(store.NewClaims(hooked, store.WithPrefix(prefix))), mustStore(store.NewClaims(base, store.WithPrefix(prefix)))
		bCommitted := make(chan struct{})
		type result struct {
			ran bool
			err error
		}
		aDone, aStarted := make(chan result, 1), make(chan struct{})
		go func() {
			ran, err := a.Do(ctx, "m", lease, func(ctx context.Context) error {
				close(aStarted)
				<-ctx.Done()
				<-bCommitted // the effect completes anyway, after B's
				return nil
			})
			aDone <- result{ran, err}
		}()
		select {
		case <-aStarted:
		case r := <-aDone:
			t.Fatalf("A's Do did not run fn: %v, %v", r.ran, r.err)
		}
		for deadline := time.Now().Add(10 * lease); ; {
			ran, err := b.Do(ctx, "m", lease, func(context.Context) error { return nil })
			if ran && err == nil {
				break
			}
			if (err != nil && !errors.Is(err, store.ErrInFlight)) || time.Now().After(deadline) {
				t.Fatalf("B = %v, %v", ran, err)
			}
			time.Sleep(2 * time.Millisecond)
		}
		close(bCommitted)
		r := <-aDone
		if n := commits.Load(); n < 2 {
			t.Fatalf("A's commit ran %d times; the test wants a retry", n)
		}
		if !r.ran || !errors.Is(r.err, store.ErrLeaseLost) {
			t.Errorf("A's Do after a takeover and a retried commit = %v, %v; want true, ErrLeaseLost", r.ran, r.err)
		}
	})

	t.Run("NoTakeover", func(t *testing.T) {
		commits.Store(0)
		s := mustStore(store.NewClaims(&hookClient{Client: base, hook: loseFirstCommitReply}, store.WithPrefix(uniquePrefix(t))))
		ran, err := s.Do(ctx, "m", lease, func(context.Context) error { return nil })
		if !ran || err != nil || commits.Load() != 2 {
			t.Errorf("Do whose first commit's reply was lost = %v, %v after %d commits; want true, nil after 2", ran, err, commits.Load())
		}
		if ok, err := s.Seen(ctx, "m"); !ok || err != nil {
			t.Errorf("Seen = %v, %v; want the id processed", ok, err)
		}
	})
}

// TestLeaseFinalWriteRetriedOnForeignContextError: the final write fails
// twice with context.DeadlineExceeded that is not its own (what rueidis
// returns to every command waiting on a redial that ran under another
// command's context, docs/upstream-rueidis-redial.md), without reaching the
// server. Its own budget is far from spent, so Do retries it and succeeds.
func TestLeaseFinalWriteRetriedOnForeignContextError(t *testing.T) {
	t.Parallel()
	srv := newServer(t, redisproc.Options{})
	base := newClient(t, srv.URL())
	ctx := context.Background()
	for _, tc := range []struct{ kind, script string }{{"claims", "commit"}, {"records", "update"}, {"batch", "commit"}} {
		t.Run(tc.kind, func(t *testing.T) {
			var failed atomic.Int32
			hooked := &hookClient{Client: base, hook: func(ctx context.Context, script string, _ rueidis.Completed) (rueidis.RedisResult, bool) {
				if script == tc.script && failed.Add(1) <= 2 {
					return mock.ErrorResult(fmt.Errorf("dial: %w", context.DeadlineExceeded)), true
				}
				return rueidis.RedisResult{}, false
			}}
			prefix := uniquePrefix(t)
			a, _ := leaseDoers(tc.kind, hooked, base, prefix, time.Second)
			ran := 0
			if err := a(ctx, func(context.Context) error { ran++; return nil }); err != nil {
				t.Errorf("Do whose final write met a foreign context deadline twice: %v; want success", err)
			}
			// A second Do finds the outcome stored and does not run fn.
			if err := a(ctx, func(context.Context) error { ran++; return nil }); err != nil || ran != 1 {
				t.Errorf("redelivery: %v, fn ran %d times; want once", err, ran)
			}
		})
	}
}

// TestLeaseSlowLink: a link whose round trip is half the lease (a proxy adds
// lease/4 each way; the client's connections open and the scripts loaded by
// a first Do) and no other fault: no Do loses its lease, though fn runs for
// two leases. Claims and
// Records, two Do calls each. (The lease is long so that the slack the
// pacing leaves at this round trip, lease/4 - margin, is hundreds of ms: a
// loaded 2-core machine delays the proxy's own goroutines too.)
func TestLeaseSlowLink(t *testing.T) {
	// Not parallel: its margins are tens of ms, and a binary busy with
	// the parallel tests delays timers and the proxy far more than that.
	const lease = 1600 * time.Millisecond
	for _, kind := range []string{"claims", "records", "batch"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, redisproc.Options{})
			p, err := faultnet.Listen(srv.Addr)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Close() })
			p.SetLatency(lease / 4)
			c := newClient(t, "redis://"+p.Addr())
			// Open the client's connections first: rueidis sends each command
			// on one of its pipelined connections picked at random, and dials
			// each on first use (a round trip and more, through this link).
			// 64 concurrent PINGs reach every one of them (4 by default)
			// except with probability 4 * (3/4)^64 < 1e-7.
			var warm sync.WaitGroup
			for range 64 {
				warm.Go(func() { _ = c.Do(context.Background(), c.B().Ping().Build()).Error() })
			}
			warm.Wait()
			// And load the scripts: an EVALSHA that meets NOSCRIPT costs the
			// claim a second round trip (a cold start, measured apart: the
			// first Do on a new server lost its lease in 1 of 8 runs here).
			warmDo, _ := leaseDoers(kind, c, c, uniquePrefix(t)+"warm", lease)
			if err := warmDo(context.Background(), func(context.Context) error { return nil }); err != nil {
				t.Fatalf("warm-up Do: %v", err)
			}
			losses := 0
			for i := range 2 {
				// Every event, to show how the extensions went if one is lost.
				var mu sync.Mutex
				var events []string
				start := time.Now()
				obs := store.ObserverFunc(func(_ context.Context, e store.Event) {
					mu.Lock()
					defer mu.Unlock()
					events = append(events, fmt.Sprintf("sent +%v answered +%v: %s %s %v", e.Start.Sub(start).Round(time.Millisecond),
						e.Start.Add(e.Duration).Sub(start).Round(time.Millisecond), e.Op, e.Outcome, e.Err))
				})
				a, _ := leaseDoers(kind, c, c, uniquePrefix(t)+strconv.Itoa(i), lease, store.WithObserver(obs))
				err := a(context.Background(), func(ctx context.Context) error {
					select {
					case <-ctx.Done():
						losses++
						return context.Cause(ctx)
					case <-time.After(2 * lease):
						return nil
					}
				})
				t.Logf("Do %d with RTT %v and lease %v: %v in %v", i, lease/2, lease, err, time.Since(start))
				if err != nil {
					mu.Lock()
					t.Errorf("Do %d: %v; its events:\n%s", i, err, strings.Join(events, "\n"))
					mu.Unlock()
				}
			}
			if losses != 0 {
				t.Errorf("%d of 2 Do calls lost their lease at RTT = lease/2", losses)
			}
		})
	}
}

// TestLeasePausedOwner: owner A runs in a child process (the test binary,
// TestLeaseOwnerProcess) whose fn acts every millisecond after checking
// ctx.Err(); the test SIGSTOPs it past its lease, B takes over, then A is
// resumed. No act of A may come after B's fn started: A must see its lease
// gone on its first check after waking, before any round trip.
func TestLeasePausedOwner(t *testing.T) {
	// Not parallel: its margins are tens of ms, and a binary busy with
	// the parallel tests delays timers and the proxy far more than that.
	srv := newServer(t, redisproc.Options{})
	base := newClient(t, srv.URL())
	const lease = 300 * time.Millisecond
	for _, kind := range []string{"claims", "records", "batch"} {
		t.Run(kind, func(t *testing.T) {
			prefix := uniquePrefix(t)
			a := startOwner(t, nil, srv.URL(), kind, prefix, lease)
			a.read(t, "ready", 30*time.Second)
			a.read(t, "act", 5*time.Second)
			if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			paused := time.Now()
			bStart := takeOver(t, kind, base, prefix, lease, 20*lease)
			if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
				t.Fatal(err)
			}
			a.read(t, "lost", 10*time.Second)
			after := a.actsFrom(bStart)
			t.Logf("paused %v; B started +%v; A: %d acts, %d after B started; %s", paused.Format("15:04:05.000"), bStart.Sub(paused), len(a.acts), after, a.lost)
			if after != 0 {
				t.Errorf("the paused owner acted %d times after B's takeover", after)
			}
		})
	}
}

// takeOver runs B's Do every 2 ms until its fn runs (the id is taken over),
// and returns when B's fn started; it fails the test after timeout.
func takeOver(t *testing.T, kind string, c rueidis.Client, prefix string, lease, timeout time.Duration) time.Time {
	t.Helper()
	_, b := leaseDoers(kind, c, c, prefix, lease)
	var bStart time.Time
	for deadline := time.Now().Add(timeout); bStart.IsZero() && time.Now().Before(deadline); {
		err := b(context.Background(), func(context.Context) error { bStart = time.Now(); return nil })
		if err != nil && !errors.Is(err, store.ErrInFlight) {
			t.Fatalf("B: %v", err)
		}
		time.Sleep(2 * time.Millisecond)
	}
	if bStart.IsZero() {
		t.Fatalf("B never took over within %v", timeout)
	}
	return bStart
}

// owner is a child process running TestLeaseOwnerProcess: its acts (the
// times it read before a ctx.Err() that was nil) and the line it printed on
// seeing its lease lost.
type owner struct {
	cmd    *exec.Cmd
	lines  chan string
	acts   []int64
	lost   string
	lostAt int64 // the time A read before the ctx.Err() that reported the loss
}

// startOwner starts the owner for kind on url, with wrap (say, "ip netns
// exec NAME") before the test binary, and kills it when the test ends.
func startOwner(t *testing.T, wrap []string, url, kind, prefix string, lease time.Duration) *owner {
	t.Helper()
	args := append(append([]string{}, wrap...), os.Args[0], "-test.run=^TestLeaseOwnerProcess$", "-test.count=1")
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), "REDISONCE_LEASE_OWNER="+strings.Join([]string{url, kind, prefix, lease.String()}, ","))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	o := &owner{cmd: cmd, lines: make(chan string, 1<<16)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			o.lines <- sc.Text()
		}
		close(o.lines)
	}()
	return o
}

// read consumes the owner's lines until one starts with until.
func (o *owner) read(t *testing.T, until string, timeout time.Duration) {
	t.Helper()
	tm := time.After(timeout)
	for {
		select {
		case l, ok := <-o.lines:
			if !ok {
				t.Fatalf("owner exited before %q", until)
			}
			if ns, ok := strings.CutPrefix(l, "act "); ok {
				n, _ := strconv.ParseInt(ns, 10, 64)
				o.acts = append(o.acts, n)
			} else if rest, ok := strings.CutPrefix(l, "lost "); ok {
				o.lost = l
				ns, _, _ := strings.Cut(rest, " ")
				o.lostAt, _ = strconv.ParseInt(ns, 10, 64)
			}
			if strings.HasPrefix(l, until) {
				return
			}
		case <-tm:
			t.Fatalf("no %q from the owner within %v", until, timeout)
		}
	}
}

// actsFrom counts the owner's acts at or after at.
func (o *owner) actsFrom(at time.Time) int {
	n := 0
	for _, a := range o.acts {
		if a >= at.UnixNano() {
			n++
		}
	}
	return n
}

// TestLeaseOwnerProcess is the owner TestLeasePausedOwner pauses: run only
// in the child process it starts. fn prints "ready", then every millisecond
// reads the clock, checks ctx.Err() and, if the context is live, acts: it
// prints "act <the time read, ns>". Once ctx.Err() reports the loss it
// prints "lost <the time read, ns> <cause>" and returns.
func TestLeaseOwnerProcess(t *testing.T) {
	env := os.Getenv("REDISONCE_LEASE_OWNER")
	if env == "" {
		t.Skip("the child process of TestLeasePausedOwner")
	}
	f := strings.Split(env, ",")
	lease, err := time.ParseDuration(f[3])
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, f[0])
	a, _ := leaseDoers(f[1], c, c, f[2], lease)
	w := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	say := func(s string) { mu.Lock(); _, _ = w.WriteString(s + "\n"); _ = w.Flush(); mu.Unlock() }
	err = a(context.Background(), func(ctx context.Context) error {
		say("ready")
		for end := time.Now().Add(30 * time.Second); time.Now().Before(end); {
			now := time.Now()
			if ctx.Err() != nil {
				say("lost " + strconv.FormatInt(now.UnixNano(), 10) + " " + context.Cause(ctx).Error())
				return ctx.Err()
			}
			say("act " + strconv.FormatInt(now.UnixNano(), 10))
			time.Sleep(time.Millisecond)
		}
		say("lost never")
		return nil
	})
	say(fmt.Sprintf("done %v", err))
}

// TestLeaseFinalWriteSurvivesStall: Do X's final write during a server stall
// (DEBUG SLEEP 1.5 s, shorter than the write's 5 s budget) right after the
// client's connection broke (CLIENT KILL). On one connection, the final write
// waits for the redial that Do Y's lease extension started; Y's lease runs
// out during the stall, Y's extension is cancelled, and rueidis fails the
// dial, and every command waiting on it, with Y's context error
// (docs/upstream-rueidis-redial.md). X's write is retried, lands after the
// stall, and X's Do succeeds: the message is not run again. Claims and
// Records.
func TestLeaseFinalWriteSurvivesStall(t *testing.T) {
	// Not parallel: its margins are tens of ms, and a binary busy with
	// the parallel tests delays timers and the proxy far more than that.
	for _, kind := range []string{"claims", "records", "batch"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, redisproc.Options{})
			rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true, PipelineMultiplex: -1})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(rc.Close)
			var afterBreak atomic.Bool
			yDialing := make(chan struct{}, 16)
			hooked := &hookClient{Client: rc, hook: func(ctx context.Context, script string, cmd rueidis.Completed) (rueidis.RedisResult, bool) {
				if (script == "extend" || script == "renew" || script == "extend_many") && afterBreak.Load() {
					select {
					case yDialing <- struct{}{}:
					default:
					}
				}
				return rueidis.RedisResult{}, false
			}}
			prefix := uniquePrefix(t)
			const yLease = 600 * time.Millisecond
			y, _ := leaseDoers(kind, hooked, hooked, prefix+"y", yLease)
			x, _ := leaseDoers(kind, hooked, hooked, prefix+"x", time.Minute)
			ctx := context.Background()
			yStarted, yDone := make(chan struct{}), make(chan error, 1)
			go func() {
				yDone <- y(ctx, func(ctx context.Context) error { close(yStarted); <-ctx.Done(); return ctx.Err() })
			}()
			<-yStarted
			const stall = 1500 * time.Millisecond
			var stallStart time.Time
			ran := 0
			start := time.Now()
			err = x(ctx, func(context.Context) error {
				ran++
				if _, err := srv.Do("CLIENT", "KILL", "TYPE", "normal"); err != nil {
					return err
				}
				stallStart = time.Now()
				go func() { _, _ = srv.Do("DEBUG", "SLEEP", "1.5") }()
				time.Sleep(50 * time.Millisecond)
				afterBreak.Store(true)
				// Two of Y's extensions after the break: the first finds the
				// dead connection, the second (or a later one) starts the redial.
				for range 2 {
					select {
					case <-yDialing:
					case <-time.After(5 * time.Second):
						return errors.New("no extension of Y after the break")
					}
				}
				time.Sleep(20 * time.Millisecond)
				return nil
			})
			took := time.Since(start)
			t.Logf("X's Do: %v after %v (the stall began +%v, lasted %v); Y's Do: %v", err, took, stallStart.Sub(start), stall, <-yDone)
			if err != nil {
				t.Fatalf("X's Do whose final write met the stall: %v; want success (budget 5 s, stall %v)", err, stall)
			}
			if !time.Now().After(stallStart.Add(stall)) {
				t.Errorf("X's Do returned before the stall ended: its final write did not wait for the server")
			}
			if err := x(ctx, func(context.Context) error { ran++; return nil }); err != nil || ran != 1 {
				t.Errorf("X's redelivery: %v, fn ran %d times; want the outcome stored and fn run once", err, ran)
			}
		})
	}
}
