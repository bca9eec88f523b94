package kafka_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redisonce/redisonce/integrations/kafka"
	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
)

// The process test's worker: the test binary re-executed with workerEnv set.
const workerEnv = "REDISONCE_KAFKA_WORKER"

const (
	procLease = 3 * time.Second // seconds: a live holder keeps it under load
	procSlow  = 4 * time.Second // longer than the session timeout (3 s)
)

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) != "" {
		if err := runWorker(); err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runWorker is one group member until SIGTERM. fn's effect is one Redis
// command (HINCRBY effects <id> 1); a slow record first says which worker
// holds it (SET inside:<worker> <id>). Outcomes are counted in Redis as they
// happen, so a SIGKILLed worker's counts survive.
func runWorker() error {
	w, prefix := os.Getenv(workerEnv), os.Getenv("K_PREFIX")
	opt, err := store.ClientOptions(os.Getenv("K_REDIS"))
	if err != nil {
		return err
	}
	rc, err := rueidis.NewClient(opt)
	if err != nil {
		return err
	}
	defer rc.Close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	e := &env{brokers: strings.Split(os.Getenv("K_BROKERS"), ","), topic: os.Getenv("K_TOPIC"), group: os.Getenv("K_GROUP"), rc: rc, prefix: prefix}
	do := func(cmd rueidis.Completed) { _ = rc.Do(context.WithoutCancel(ctx), cmd).Error() }
	c, err := kafka.New(must.Store(store.NewClaims(rc, store.WithPrefix(prefix+"claims:"))),
		func(ctx context.Context, r *kgo.Record) error {
			if string(r.Key) == "slow" {
				do(rc.B().Set().Key(prefix + "inside:" + w).Value(string(r.Value)).Build())
				select {
				case <-time.After(procSlow):
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return e.effect(ctx, r)
		}, e.groupOpts(), kafka.WithID(kafka.HeaderID("payment-id")), kafka.WithLease(procLease),
		kafka.WithReport(func(r *kgo.Record, o kafka.Outcome, err error) {
			do(rc.B().Hincrby().Key(prefix + "outcomes").Field(string(o)).Increment(1).Build())
			if o == kafka.OutcomeInFlight {
				do(rc.B().Hincrby().Key(prefix + "inflight").Field(string(r.Value)).Increment(1).Build())
			}
		}))
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

// Three member processes of one group on 6 partitions; one record in 40 takes
// 4 s (longer than the session timeout); member 0 is SIGKILLed inside such a
// handler, so its partitions move (a rebalance while the others' handlers
// run) and their uncommitted records are read again; one payment in 10 is
// produced again while they run. Afterwards every effect exactly once,
// every partition committed to its end, in-flight retries bounded by the
// lease.
func TestProcessesKilledMidHandler(t *testing.T) {
	const parts, n, workers = 6, 300, 3
	e := newEnv(t, parts)
	ctx := context.Background()
	id := func(i int) string { return fmt.Sprintf("pay-%04d", i) }
	rec := func(i, partition int) *kgo.Record {
		r := payment(int32(partition%parts), id(i))
		if i%40 == 7 {
			r.Key = []byte("slow")
		}
		return r
	}
	var rs []*kgo.Record
	for i := range n {
		rs = append(rs, rec(i, i))
	}
	e.produce(t, rs...)

	procs := make([]*exec.Cmd, workers)
	for w := range procs {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), workerEnv+"="+strconv.Itoa(w), "K_PREFIX="+e.prefix, "K_REDIS="+e.redisURL,
			"K_BROKERS="+strings.Join(e.brokers, ","), "K_TOPIC="+e.topic, "K_GROUP="+e.group)
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs[w] = cmd
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
	start := time.Now()
	var victimID string
	for victimID == "" && time.Since(start) < 30*time.Second {
		s, err := e.rc.Do(ctx, e.rc.B().Get().Key(e.prefix+"inside:0").Build()).ToString()
		if err != nil && !rueidis.IsRedisNil(err) {
			t.Fatal(err)
		}
		victimID = s
		time.Sleep(20 * time.Millisecond)
	}
	if victimID == "" {
		t.Fatal("worker 0 never entered a slow handler")
	}
	time.Sleep(500 * time.Millisecond) // well inside the 4 s handler
	if err := procs[0].Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = procs[0].Wait()
	killedAt := time.Since(start)

	var dups []*kgo.Record
	for i := 0; i < n; i += 10 {
		dups = append(dups, rec(i, i+1)) // the same payment, another partition
	}
	e.produce(t, dups...)
	per := make([]int64, parts)
	for _, r := range append(rs, dups...) {
		per[r.Partition]++
	}

	var committed []int64
	done := waitFor(90*time.Second, func() bool {
		committed = e.committed(t, parts)
		return len(e.effects(t)) == n && slices.Equal(committed, per)
	})
	took := time.Since(start)
	for _, p := range procs[1:] {
		_ = p.Process.Signal(syscall.SIGTERM)
		_ = p.Wait()
	}
	eff := e.effects(t)
	outcomes, _ := e.rc.Do(ctx, e.rc.B().Hgetall().Key(e.prefix+"outcomes").Build()).AsIntMap()
	inflight, _ := e.rc.Do(ctx, e.rc.B().Hgetall().Key(e.prefix+"inflight").Build()).AsIntMap()
	lost, twice := 0, 0
	for i := range n {
		switch eff[id(i)] {
		case 0:
			lost++
		case 1:
		default:
			twice++
			t.Errorf("%s: effect ran %d times", id(i), eff[id(i)])
		}
	}
	var totalInFlight int64
	for _, v := range inflight {
		totalInFlight += v
	}
	// An id is held at most procSlow + procLease (a live slow handler, or the
	// victim's until its lease runs out), and each in-flight retry waits at
	// least 2/3 of a lease. The ids that can meet a holder: the victim's, the
	// republished ones, and the victim's partitions' records read again.
	perHeld := int64((procSlow+procLease)/(2*procLease/3)) + 2
	bound := int64(len(dups)+n/40+1) * perHeld
	t.Logf("%d payments (%d slow), %d produced again, %d member processes on %d partitions, member 0 SIGKILLed at %v inside %s; done in %v",
		n, n/40, len(dups), workers, parts, killedAt.Round(time.Millisecond), victimID, took.Round(time.Millisecond))
	t.Logf("effects: %d exactly once, %d lost, %d more than once; outcomes %v; committed %v (ends %v)",
		len(eff)-twice, lost, twice, outcomes, committed, per)
	t.Logf("in-flight retries: %d in all (bound %d), the victim's id %d", totalInFlight, bound, inflight[victimID])
	if !done {
		t.Errorf("not done after 90 s: %d effects of %d, committed %v of %v", len(eff), n, committed, per)
	}
	if lost != 0 || len(eff) != n {
		t.Errorf("%d payments lost, %d effects for %d payments", lost, len(eff), n)
	}
	if totalInFlight > bound {
		t.Errorf("%d in-flight retries, more than the lease allows (%d): a busy loop", totalInFlight, bound)
	}
	if outcomes[string(kafka.OutcomeDuplicate)] < int64(len(dups)) {
		t.Errorf("%d duplicates, want at least the %d produced again", outcomes[string(kafka.OutcomeDuplicate)], len(dups))
	}
}

// startWorker starts member process w of e's group (runWorker), killed when
// the test ends.
func startWorker(t *testing.T, e *env, w int) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), workerEnv+"="+strconv.Itoa(w), "K_PREFIX="+e.prefix, "K_REDIS="+e.redisURL,
		"K_BROKERS="+strings.Join(e.brokers, ","), "K_TOPIC="+e.topic, "K_GROUP="+e.group)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

// A member SIGKILLed in the middle of a batch: one partition, 60 records
// produced before the member starts, so one poll hands it all of them and it
// claims them together; record 20 takes 4 s, and the member is killed 500 ms
// into it, holding the claims of records 20..59 (checked on the raw keys),
// its commits of 0..19 behind it. A second member then takes the partition:
// every record's effect exactly once (per id), the ones the victim held run
// by the second member once the victim's leases ran out, and the partition
// committed to its end.
func TestProcessKilledMidBatch(t *testing.T) {
	const n, slow = 60, 20
	e := newEnv(t, 1)
	ctx := context.Background()
	id := func(i int) string { return fmt.Sprintf("pay-%04d", i) }
	var rs []*kgo.Record
	for i := range n {
		r := payment(0, id(i))
		if i == slow {
			r.Key = []byte("slow")
		}
		rs = append(rs, r)
	}
	e.produce(t, rs...)

	victim := startWorker(t, e, 0)
	if !waitFor(30*time.Second, func() bool {
		s, err := e.rc.Do(ctx, e.rc.B().Get().Key(e.prefix+"inside:0").Build()).ToString()
		return err == nil && s == id(slow)
	}) {
		t.Fatal("the member never entered the slow record")
	}
	time.Sleep(500 * time.Millisecond) // well inside the 4 s handler
	var held []string
	for i := slow; i < n; i++ {
		v, err := e.rc.Do(ctx, e.rc.B().Get().Key(e.prefix+"claims:"+id(i)).Build()).ToString()
		if err == nil && strings.HasPrefix(v, "~") {
			held = append(held, id(i))
		}
	}
	if err := victim.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = victim.Wait()
	done := map[string]int64{}
	for i := range slow {
		v, _ := e.rc.Do(ctx, e.rc.B().Get().Key(e.prefix+"claims:"+id(i)).Build()).ToString()
		if v == "1" {
			done[id(i)]++
		}
	}
	effAtKill := e.effects(t)

	start := time.Now()
	second := startWorker(t, e, 1)
	var committed []int64
	finished := waitFor(60*time.Second, func() bool {
		committed = e.committed(t, 1)
		return len(e.effects(t)) == n && committed[0] == n
	})
	took := time.Since(start)
	_ = second.Process.Signal(syscall.SIGTERM)
	_ = second.Wait()
	eff := e.effects(t)
	outcomes, _ := e.rc.Do(ctx, e.rc.B().Hgetall().Key(e.prefix+"outcomes").Build()).AsIntMap()
	t.Logf("killed inside %s holding %d of the %d claims after it; %d of the %d before it committed, %d effects at the kill; "+
		"the second member done in %v: outcomes %v, committed %v", id(slow), len(held), n-slow, len(done), slow, len(effAtKill),
		took.Round(time.Millisecond), outcomes, committed)
	if len(held) != n-slow {
		t.Errorf("the victim held %d claims of records %d..%d at the kill, want all %d: the batch was not claimed together",
			len(held), slow, n-1, n-slow)
	}
	if !finished {
		t.Errorf("not done after 60 s: %d effects of %d, committed %v", len(eff), n, committed)
	}
	for i := range n {
		if got := eff[id(i)]; got != 1 {
			t.Errorf("%s: effect ran %d times, want 1", id(i), got)
		}
	}
	for i := slow + 1; i < n; i++ {
		if effAtKill[id(i)] != 0 {
			t.Errorf("%s: effect before the kill, behind the slow record of its partition", id(i))
		}
	}
}
