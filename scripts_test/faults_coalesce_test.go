package scripts_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/internal/redisproc"
	"github.com/redisonce/redisonce/store"
)

// TestFaultCoalesceProcesses: several processes trigger one key in a burst
// while the parent SIGKILLs some of them (a replacement starts) and
// SIGSTOPs others past their lease, at random points. Every process runs a
// Coalescer on the same key with a fn that acts every millisecond while its
// context is live, and sweeps every 100 ms. From the processes' timestamped
// lines the test asserts, for each trial:
//
//   - every acknowledged trigger (Trigger returned without an error: it ran
//     the trigger or kept it) is covered by a run that started after the trigger was sent and
//     completed;
//   - runs never overlap: no run starts while another run's fn still acted
//     (a paused run's acts end before its pause; a killed one's at its kill);
//   - the run count is bounded: a run is started by a trigger that can have
//     arrived after the previous run's start (it returned after it), or, at
//     most once per fault, to redo a run that did not complete (fn
//     did not return, or its holder paused or died before ending the run).
func TestFaultCoalesceProcesses(t *testing.T) {
	srv := newServer(t, redisproc.Options{})
	for trial := range 2 {
		t.Run(fmt.Sprintf("trial%d", trial), func(t *testing.T) {
			runCoalesceTrial(t, srv.URL(), uniquePrefix(t), int64(trial))
		})
	}
}

// coRun is one run as the processes reported it.
type coRun struct {
	payload         string
	start, lastLive int64 // ns
	completed       bool  // fn returned with its context live
	ended           bool  // an end or lost line came
	proc            int
}

type coTrig struct {
	payload    string
	sent, back int64 // ns: the Trigger call was sent, and returned
	proc       int
}

func runCoalesceTrial(t *testing.T, url, prefix string, seed int64) {
	const (
		lease   = 300 * time.Millisecond
		burst   = 4 * time.Second
		settle  = 4 * time.Second
		workers = 3
	)
	rng := rand.New(rand.NewPCG(uint64(seed), 7))
	var mu sync.Mutex
	var procs []*coProc
	start := func() *coProc {
		mu.Lock()
		defer mu.Unlock()
		id := len(procs)
		// Each starts its burst now and ends it at the same instant.
		p := startCoProc(t, id, url, prefix, lease, time.Until(burstEnd(t)), settle)
		procs = append(procs, p)
		return p
	}
	setBurstEnd(t, time.Now().Add(burst))
	for range workers {
		start()
	}
	type fault struct {
		kind string
		proc int
		at   time.Time
	}
	var faults []fault
	killedAt := map[int]int64{}
	for time.Until(burstEnd(t)) > 600*time.Millisecond {
		time.Sleep(time.Duration(300+rng.IntN(400)) * time.Millisecond)
		mu.Lock()
		var live []*coProc
		for _, p := range procs {
			if !p.killed {
				live = append(live, p)
			}
		}
		mu.Unlock()
		// Hit a process in the middle of a run (a holder, usually with a
		// next pending) when one shows up within 300 ms; else any.
		p := live[rng.IntN(len(live))]
		for wait := time.Now().Add(300 * time.Millisecond); time.Now().Before(wait); time.Sleep(time.Millisecond) {
			if h := holder(live); h != nil {
				p = h
				break
			}
		}
		if rng.IntN(2) == 0 {
			at := time.Now()
			_ = p.cmd.Process.Signal(syscall.SIGKILL)
			p.killed = true
			killedAt[p.id] = at.UnixNano()
			faults = append(faults, fault{"SIGKILL", p.id, at})
			start()
		} else {
			_ = p.cmd.Process.Signal(syscall.SIGSTOP)
			faults = append(faults, fault{"SIGSTOP", p.id, time.Now()})
			time.Sleep(2 * lease)
			_ = p.cmd.Process.Signal(syscall.SIGCONT)
		}
	}
	if len(faults) < 2 {
		t.Fatalf("%d faults injected, want at least 2", len(faults))
	}
	// Collect every process's lines: the live ones say "bye" after the
	// settle time; the killed ones have exited.
	var runs []*coRun
	var trigs []coTrig
	for _, p := range procs {
		lines := p.wait(t, burst+settle+20*time.Second)
		byPayload := map[string]*coRun{}
		for _, l := range lines {
			f := strings.Fields(l)
			switch f[0] {
			case "trig": // trig <payload> <sent> <returned> <ran|kept>
				trigs = append(trigs, coTrig{payload: f[1], sent: atoi64(f[2]), back: atoi64(f[3]), proc: p.id})
			case "start": // start <payload> <ns>
				r := &coRun{payload: f[1], start: atoi64(f[2]), lastLive: atoi64(f[2]), proc: p.id}
				byPayload[f[1]+"@"+f[2]] = r
				runs = append(runs, r)
			case "end", "lost": // end|lost <payload> <start> <lastLive>
				if r := byPayload[f[1]+"@"+f[2]]; r != nil {
					r.lastLive, r.completed, r.ended = atoi64(f[3]), f[0] == "end", true
				}
			}
		}
		if at, ok := killedAt[p.id]; ok {
			for _, r := range byPayload {
				if !r.ended && r.lastLive < at {
					r.lastLive = at // no end line: it may have acted until the kill
				}
			}
		}
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].start < runs[j].start })
	timeline := func() string {
		var b strings.Builder
		for _, f := range faults {
			fmt.Fprintf(&b, "  %s proc %d at %s\n", f.kind, f.proc, f.at.Format("15:04:05.000"))
		}
		for _, r := range runs {
			fmt.Fprintf(&b, "  run %s proc %d %s..+%v completed %v\n", r.payload, r.proc, time.Unix(0, r.start).Format("15:04:05.000"),
				time.Duration(r.lastLive-r.start), r.completed)
		}
		return b.String()
	}
	if len(trigs) == 0 || len(runs) == 0 {
		t.Fatalf("%d acknowledged triggers, %d runs", len(trigs), len(runs))
	}
	// No overlap.
	for i := 1; i < len(runs); i++ {
		for j := 0; j < i; j++ {
			if runs[i].start < runs[j].lastLive {
				t.Errorf("run %s (proc %d) started %v before run %s (proc %d) last acted", runs[i].payload, runs[i].proc,
					time.Duration(runs[j].lastLive-runs[i].start), runs[j].payload, runs[j].proc)
			}
		}
	}
	// Every acknowledged trigger covered by a completed run that started after it.
	lost := 0
	for _, tr := range trigs {
		covered := false
		for _, r := range runs {
			if r.completed && r.start >= tr.sent {
				covered = true
				break
			}
		}
		if !covered {
			lost++
			if lost <= 3 {
				t.Errorf("trigger %s (proc %d, sent %s) is covered by no completed run that started after it", tr.payload, tr.proc,
					time.Unix(0, tr.sent).Format("15:04:05.000"))
			}
		}
	}
	// Bounded: each run is caused by a trigger that can have arrived after
	// the previous run's start, or redoes a run that did not complete (or
	// whose end was not written). A trigger arrived between its send and its
	// return: after the previous run's grant only if it returned after that
	// run started.
	extra := 0
	byPayload := map[string]coTrig{}
	for _, tr := range trigs {
		byPayload[tr.payload] = tr
	}
	for i := 1; i < len(runs); i++ {
		prev, cur := runs[i-1], runs[i]
		if !prev.completed {
			continue
		}
		caused := false
		for _, tr := range trigs {
			if tr.back > prev.start && tr.sent < cur.start {
				caused = true
				break
			}
		}
		// A trigger acknowledged by no line (its process was killed before
		// printing it, or its call failed) may have arrived any time after
		// it was sent: the run's own payload says when.
		if _, acked := byPayload[cur.payload]; !acked && !caused {
			caused = triggerSentBefore(cur.payload, cur.start)
		}
		// Or it redoes a run whose fn returned but whose holder paused or
		// died before its coalesce_finish: the same payload, run again after
		// the lease.
		for j := 0; j < i && !caused; j++ {
			caused = runs[j].payload == cur.payload
		}
		if !caused {
			// An extra run that no trigger explains: a fault's (a holder paused
			// or killed around its run's end). Each fault may cost one.
			extra++
			t.Logf("run %s at %s follows a completed run with no trigger that can have arrived in between", cur.payload,
				time.Unix(0, cur.start).Format("15:04:05.000"))
		}

	}
	if extra > len(faults) {
		t.Errorf("%d runs that no trigger explains, more than the %d faults", extra, len(faults))
	}
	completed := 0
	for _, r := range runs {
		if r.completed {
			completed++
		}
	}
	t.Logf("%d processes, faults %d, %d acknowledged triggers, %d runs (%d completed), %d not covered", len(procs), len(faults),
		len(trigs), len(runs), completed, lost)
	if testing.Verbose() || t.Failed() {
		t.Logf("timeline:\n%s", timeline())
	}
}

// triggerSentBefore reads a payload's send time ("<proc>-<seq>-<sent ns>"):
// whether it was sent before at.
func triggerSentBefore(payload string, at int64) bool {
	f := strings.Split(payload, "-")
	return len(f) == 3 && atoi64(f[2]) < at
}

func atoi64(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

var burstEnds sync.Map // test name -> time.Time

func setBurstEnd(t *testing.T, at time.Time) { burstEnds.Store(t.Name(), at) }
func burstEnd(t *testing.T) time.Time {
	v, _ := burstEnds.Load(t.Name())
	return v.(time.Time)
}

// holder is the process among ps whose last line starts a run, or nil.
func holder(ps []*coProc) *coProc {
	for _, p := range ps {
		p.mu.Lock()
		in := len(p.lines) > 0 && strings.HasPrefix(p.lines[len(p.lines)-1], "start ")
		p.mu.Unlock()
		if in {
			return p
		}
	}
	return nil
}

// coProc is one child process running TestCoalesceWorkerProcess.
type coProc struct {
	id     int
	cmd    *exec.Cmd
	killed bool
	mu     sync.Mutex
	lines  []string
	done   chan struct{}
}

func startCoProc(t *testing.T, id int, url, prefix string, lease, burst, settle time.Duration) *coProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCoalesceWorkerProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "REDISONCE_COALESCE_WORKER="+strings.Join([]string{url, prefix, strconv.Itoa(id),
		lease.String(), burst.String(), settle.String()}, ","))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &coProc{id: id, cmd: cmd, done: make(chan struct{})}
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-p.done })
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			p.mu.Unlock()
		}
		_ = cmd.Wait()
	}()
	return p
}

// wait returns the process's lines once it has exited.
func (p *coProc) wait(t *testing.T, timeout time.Duration) []string {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.done
		t.Errorf("process %d did not exit within %v", p.id, timeout)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lines
}

// TestCoalesceWorkerProcess is a process of TestFaultCoalesceProcesses: run
// only in the child processes it starts. It triggers key "k" every 5-15 ms
// for the burst, sweeping every 100 ms, then only sweeps for the settle time,
// then prints "bye". Lines: "trig <payload> <sent ns> <returned ns> ran|kept" for each
// acknowledged trigger; "start <payload> <ns>" when fn starts, and "end"
// (or "lost", when its context ended) "<payload> <start ns> <last live ns>"
// when it returns. fn acts for 30 ms, checking its context every ms.
func TestCoalesceWorkerProcess(t *testing.T) {
	env := os.Getenv("REDISONCE_COALESCE_WORKER")
	if env == "" {
		t.Skip("a child process of TestFaultCoalesceProcesses")
	}
	f := strings.Split(env, ",")
	lease, _ := time.ParseDuration(f[3])
	burst, _ := time.ParseDuration(f[4])
	settle, _ := time.ParseDuration(f[5])
	w := bufio.NewWriter(os.Stdout)
	var mu sync.Mutex
	say := func(s string) { mu.Lock(); _, _ = w.WriteString(s + "\n"); _ = w.Flush(); mu.Unlock() }
	c := newClient(t, f[0])
	co := must.Store(store.NewCoalescer(c, func(ctx context.Context, key string, payload []byte) error {
		start := time.Now().UnixNano()
		say(fmt.Sprintf("start %s %d", payload, start))
		last := start
		for end := time.Now().Add(30 * time.Millisecond); ; {
			now := time.Now()
			if ctx.Err() != nil {
				say(fmt.Sprintf("lost %s %d %d", payload, start, last))
				return ctx.Err()
			}
			last = now.UnixNano()
			if now.After(end) {
				break
			}
			time.Sleep(time.Millisecond)
		}
		say(fmt.Sprintf("end %s %d %d", payload, start, last))
		return nil
	}, store.CoalesceOptions{Lease: lease}, store.WithPrefix(f[1])))
	ctx := context.Background()
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
				_, _ = co.Sweep(ctx)
			}
		}
	}()
	for seq, end := 0, time.Now().Add(burst); time.Now().Before(end); seq++ {
		sent := time.Now().UnixNano()
		payload := fmt.Sprintf("%s-%d-%d", f[2], seq, sent)
		ran, err := co.Trigger(ctx, "k", []byte(payload))
		switch {
		case err == nil && ran:
			say(fmt.Sprintf("trig %s %d %d ran", payload, sent, time.Now().UnixNano()))
		case err == nil:
			say(fmt.Sprintf("trig %s %d %d kept", payload, sent, time.Now().UnixNano()))
		}
		time.Sleep(time.Duration(5+rand.IntN(10)) * time.Millisecond)
	}
	time.Sleep(settle)
	close(stop)
	co.Close()
	say("bye")
}
