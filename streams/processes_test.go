package streams_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
	"github.com/redisonce/redisonce/streams"
)

// The worker processes of TestProcesses: this test binary, re-executed with
// workerEnv set, runs TestWorkerProcess only.
const (
	procMessages   = 2000
	procDuplicates = 200 // re-published: every 10th id XADDed again
	procWorkers    = 3
	procConcurrent = 8
	procLease      = 2 * time.Second // extensions every 667 ms: room for a loaded machine
	procVictim     = "m0100"         // its first handler is SIGKILLed mid-run
)

// procSlow are ids whose handler runs 2.5 leases: slower than the reclaim
// idle (the lease), so other workers reclaim them while they run.
var procSlow = map[string]bool{"m0500": true, "m1500": true}

// procEffect is the handler's effect, one atomic script (all or nothing):
// it counts every run (runs), refuses a holder whose lease is gone (the
// fence: the claim key must still hold its token), and applies the effect
// once per id (applied, a set written in the same step as the ledger and the
// log), which keeps a run whose commit a kill prevented from applying twice.
var procEffect = rueidis.NewLuaScript(`
redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
if redis.call('GET', KEYS[5]) ~= '~' .. ARGV[2] then
  redis.call('HINCRBY', KEYS[6], 'fenced', 1)
  return -1
end
if redis.call('SADD', KEYS[2], ARGV[1]) == 0 then
  redis.call('HINCRBY', KEYS[6], 'deduped', 1)
  return 0
end
redis.call('HINCRBY', KEYS[3], 'total', ARGV[3])
redis.call('RPUSH', KEYS[4], ARGV[1])
return 1`)

// TestWorkerProcess is one worker of TestProcesses; it skips unless run as
// one. It handles the stream until SIGTERM (a graceful shutdown) or SIGKILL.
func TestWorkerProcess(t *testing.T) {
	name := os.Getenv(workerEnv)
	if name == "" {
		t.Skip("a worker process of TestProcesses")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	rc := newClient(t, "redis://"+os.Getenv("REDISONCE_STREAMS_ADDR"))
	claims := must.Store(store.NewClaims(rc, store.WithPrefix("w:"), store.WithTTL(time.Hour)))
	h := func(ctx context.Context, m streams.Message) error {
		id := m.Values["msg_id"]
		switch {
		case id == procVictim && rc.Do(ctx, rc.B().Set().Key("victim").Value(strconv.Itoa(os.Getpid())).Nx().Build()).Error() == nil:
			// The parent SIGKILLs this process now, mid-handler.
			time.Sleep(time.Minute)
		case procSlow[id]:
			time.Sleep(5 * procLease / 2)
		default:
			time.Sleep(time.Duration(len(id)%3) * time.Millisecond)
		}
		l, _ := store.LeaseFromContext(ctx)
		return procEffect.Exec(ctx, rc, []string{"runs", "applied", "ledger", "log", "w:" + id, "stats"},
			[]string{id, l.Token, m.Values["amount"]}).Error()
	}
	obs := store.ObserverFunc(func(ctx context.Context, e store.Event) {
		rc.Do(context.WithoutCancel(ctx), rc.B().Hincrby().Key("outcomes").Field(string(e.Outcome)).Increment(1).Build())
	})
	c, err := streams.New(rc, claims, "pay", "ledger", name, h, streams.WithIDField("msg_id"),
		streams.WithConcurrency(procConcurrent), streams.WithLease(procLease), streams.WithRetryDelay(100*time.Millisecond),
		streams.WithShutdownGrace(3*procLease), streams.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Run(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestProcesses: three worker processes consume 2,000 payments, 200 of them
// published twice; the worker holding one payment's handler is SIGKILLed
// mid-handler, and two handlers run longer than the reclaim idle. Afterwards
// every payment's effect is applied exactly once, nothing is lost or left
// pending, and only handlers the kill interrupted ran again.
func TestProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	srv, rc := newServer(t)
	ctx := context.Background()
	start := time.Now()
	type worker struct {
		cmd *exec.Cmd
		out bytes.Buffer
	}
	workers := make([]*worker, procWorkers)
	for i := range workers {
		w := &worker{cmd: exec.Command(os.Args[0], "-test.run=^TestWorkerProcess$", "-test.count=1")}
		w.cmd.Env = append(os.Environ(), workerEnv+"=worker-"+strconv.Itoa(i), "REDISONCE_STREAMS_ADDR="+srv.Addr)
		w.cmd.Stdout, w.cmd.Stderr = &w.out, &w.out
		if err := w.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		workers[i] = w
		t.Cleanup(func() { _ = w.cmd.Process.Kill(); _ = w.cmd.Wait() })
	}

	// The producer, then the duplicates.
	var want int64
	publish := func(i int) rueidis.Completed {
		return rc.B().Xadd().Key("pay").Id("*").FieldValue().FieldValue("msg_id", fmt.Sprintf("m%04d", i)).
			FieldValue("amount", strconv.Itoa(i%7+1)).Build()
	}
	for lo := 0; lo < procMessages; lo += 100 {
		cmds := make(rueidis.Commands, 0, 100)
		for i := lo; i < lo+100; i++ {
			cmds = append(cmds, publish(i))
			want += int64(i%7 + 1)
		}
		for _, r := range rc.DoMulti(ctx, cmds...) {
			if err := r.Error(); err != nil {
				t.Fatal(err)
			}
		}
	}
	var last string
	for i := 0; i < procMessages; i += procMessages / procDuplicates {
		id, err := rc.Do(ctx, publish(i)).ToString()
		if err != nil {
			t.Fatal(err)
		}
		last = id
	}

	// SIGKILL the worker in the victim's handler.
	var victim *worker
	deadline := time.Now().Add(30 * time.Second)
	for victim == nil {
		if time.Now().After(deadline) {
			t.Fatal("no worker ran the victim's handler in 30 s")
		}
		pid, err := rc.Do(ctx, rc.B().Get().Key("victim").Build()).AsInt64()
		for _, w := range workers {
			if err == nil && int64(w.cmd.Process.Pid) == pid {
				victim = w
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	killedAt := time.Since(start)
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The leases held just after the kill: the dead worker's stay until
	// they expire. The runners claim each read's ids up front (one call per
	// read), so besides its running handlers' ids they hold those of the
	// entries it had read and not started.
	heldAtKill := leasedIDs(t, rc, "w:")
	_ = victim.cmd.Wait()

	// Wait until every payment is applied, every entry was read and nothing
	// is pending.
	done := func() bool {
		n, _ := rc.Do(ctx, rc.B().Scard().Key("applied").Build()).AsInt64()
		if n != procMessages {
			return false
		}
		res, err := rc.Do(ctx, rc.B().Arbitrary("XPENDING").Keys("pay").Args("ledger").Build()).ToArray()
		if err != nil {
			return false
		}
		p, _ := res[0].AsInt64()
		groups, err := rc.Do(ctx, rc.B().XinfoGroups().Key("pay").Build()).ToArray()
		if err != nil || len(groups) != 1 {
			return false
		}
		g, _ := groups[0].AsStrMap()
		return p == 0 && g["last-delivered-id"] == last
	}
	deadline = time.Now().Add(60 * time.Second)
	for !done() {
		if time.Now().After(deadline) {
			for _, w := range workers {
				t.Logf("worker output:\n%s", w.out.String())
			}
			t.Fatal("not every payment applied and acked within 60 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	settled := time.Since(start)

	// A graceful shutdown of the survivors.
	for _, w := range workers {
		if w == victim {
			continue
		}
		_ = w.cmd.Process.Signal(syscall.SIGTERM)
		if err := w.cmd.Wait(); err != nil {
			t.Errorf("a worker after SIGTERM: %v\n%s", err, w.out.String())
		}
	}

	// The effects.
	total, _ := rc.Do(ctx, rc.B().Hget().Key("ledger").Field("total").Build()).AsInt64()
	logged, err := rc.Do(ctx, rc.B().Lrange().Key("log").Start(0).Stop(-1).Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	runs, err := rc.Do(ctx, rc.B().Hgetall().Key("runs").Build()).AsIntMap()
	if err != nil {
		t.Fatal(err)
	}
	stats, _ := rc.Do(ctx, rc.B().Hgetall().Key("stats").Build()).AsIntMap()
	outcomes, _ := rc.Do(ctx, rc.B().Hgetall().Key("outcomes").Build()).AsIntMap()
	entries, _ := rc.Do(ctx, rc.B().Xlen().Key("pay").Build()).AsInt64()
	once := map[string]int{}
	for _, id := range logged {
		once[id]++
	}
	var rerun []string
	var allRuns int64
	for id, n := range runs {
		allRuns += n
		if n > 1 {
			rerun = append(rerun, fmt.Sprintf("%s×%d", id, n))
		}
	}
	t.Logf("%d entries (%d payments, %d re-published) by %d worker processes, %d handlers each; lease %v",
		entries, procMessages, procDuplicates, procWorkers, procConcurrent, procLease)
	t.Logf("worker %d SIGKILLed mid-handler at %v; everything applied and acked at %v",
		victim.cmd.Process.Pid, killedAt.Round(time.Millisecond), settled.Round(time.Millisecond))
	t.Logf("effects applied %d (ledger %d, want %d); effect runs %d; ids run again %d %v; fenced %d, deduped %d",
		len(logged), total, want, allRuns, len(rerun), rerun, stats["fenced"], stats["deduped"])
	t.Logf("outcomes reported by the workers (the killed one's lost with it): %v", outcomes)

	if len(logged) != procMessages || len(once) != procMessages || total != want {
		t.Errorf("applied %d effects for %d ids, ledger %d; want %d, %d, %d", len(logged), len(once), total, procMessages, procMessages, want)
	}
	for i := range procMessages {
		if id := fmt.Sprintf("m%04d", i); once[id] != 1 {
			t.Errorf("%s applied %d times, want 1", id, once[id])
		}
	}
	// Only handlers the kill interrupted may have run again (a kill after an
	// effect and before its commit): the killed worker's running handlers,
	// and the commits gathered behind the ones that returned (the runner
	// lets at most the concurrency of them wait for their commit).
	if len(rerun) > 2*procConcurrent {
		t.Errorf("%d ids ran more than once, want at most %d (the killed worker's handlers and the commits behind them)", len(rerun), 2*procConcurrent)
	}
	for id := range procSlow {
		if runs[id] != 1 {
			t.Errorf("slow handler %s ran %d times, want 1: a live holder's lease is kept", id, runs[id])
		}
	}
	if stats["fenced"] != 0 {
		t.Errorf("%d effects refused by the fence: no holder should have lost its lease", stats["fenced"])
	}
	if outcomes[string(store.Outcome("duplicate"))] < procDuplicates {
		t.Errorf("%d duplicates acked, want >= %d (the re-published ones)", outcomes[string(store.Outcome("duplicate"))], procDuplicates)
	}
	// Every id leased at the kill (the victim's batches among them) was
	// applied exactly once, and ran at most twice (a kill between an
	// effect and its commit).
	t.Logf("%d ids leased just after the kill", len(heldAtKill))
	for _, id := range heldAtKill {
		if once[id] != 1 || runs[id] < 1 || runs[id] > 2 {
			t.Errorf("%s, leased at the kill: applied %d times, run %d times; want 1, 1..2", id, once[id], runs[id])
		}
	}
	// The kill landed before the victim's effect: it ran once, elsewhere.
	if runs[procVictim] != 1 {
		t.Errorf("the victim's effect ran %d times, want 1", runs[procVictim])
	}
}

// leasedIDs returns the ids whose claim key (prefix + id) holds a lease
// ("~<token>") now.
func leasedIDs(t *testing.T, rc rueidis.Client, prefix string) []string {
	t.Helper()
	ctx := context.Background()
	var ids []string
	for cursor := uint64(0); ; {
		res, err := rc.Do(ctx, rc.B().Scan().Cursor(cursor).Match(prefix+"*").Count(1000).Build()).AsScanEntry()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range res.Elements {
			if v, err := rc.Do(ctx, rc.B().Get().Key(k).Build()).ToString(); err == nil && strings.HasPrefix(v, "~") {
				ids = append(ids, strings.TrimPrefix(k, prefix))
			}
		}
		if cursor = res.Cursor; cursor == 0 {
			return ids
		}
	}
}
