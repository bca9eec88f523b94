// Command benchcmp measures the redisonce stores side by side with what a user
// would otherwise write (go-redis SetNX and Script.Run, raw rueidis commands, a
// minimal Lua script doing the same Redis commands), on a redis-server it
// starts itself, and prints Markdown tables: per operation and concurrency,
// ops/s, p50/p99 latency, client allocs/op and bytes/op, and server time per
// op, followed by the goals checked as ratios measured in the same run.
//
// `make bench` runs it pinned the way BENCHMARKS.md describes:
//
//	taskset -c 1 benchcmp -server-cpu 0 -out bench.out.md
//
// Progress goes to stderr, the tables to stdout (and -out). Every cell starts
// from an empty database (FLUSHALL), seeds what its operation needs, warms up,
// resets the server's statistics (CONFIG RESETSTAT) and then runs for
// -duration or until its id pool is used up.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/internal/redisproc"
)

type config struct {
	duration   time.Duration
	reps       int
	srvOnly    bool
	warmup     time.Duration
	goroutines []int
	ops        map[string]bool // nil = all
	pool       int
	serverCPU  int
	options    bool
	out        string
	smoke      bool
	cluster    bool
}

func main() {
	var cfg config
	var gs, ops string
	flag.DurationVar(&cfg.duration, "duration", 300*time.Millisecond, "measured window of each cell")
	flag.IntVar(&cfg.reps, "reps", 3, "rounds per cell; the report gives the median ops/s")
	flag.DurationVar(&cfg.warmup, "warmup", 100*time.Millisecond, "warm-up before each cell's window")
	flag.StringVar(&gs, "goroutines", "1,16,64,256", "concurrency levels, comma-separated")
	flag.StringVar(&ops, "ops", "", "operations to run, comma-separated (default all)")
	flag.IntVar(&cfg.pool, "pool", 150_000, "distinct ids per cell: a cell stops early when it has used them all")
	flag.IntVar(&cfg.serverCPU, "server-cpu", -1, "pin redis-server to this CPU with taskset (-1: do not pin)")
	flag.BoolVar(&cfg.options, "options", true, "also measure the rueidis client options (MaxFlushDelay, DisableCache, PipelineMultiplex)")
	flag.StringVar(&cfg.out, "out", "", "also write the Markdown report to this file")
	flag.BoolVar(&cfg.smoke, "smoke", false, "tiny run that only checks every variant works")
	flag.BoolVar(&cfg.cluster, "cluster", true, "also compare ClaimMany on a 3-master cluster of its own (hash-tagged ids)")
	flag.BoolVar(&cfg.srvOnly, "server-time-only", false, "run only the server-time comparison")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the client to this file")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	var err error
	if cfg.goroutines, err = parseInts(gs); err != nil {
		fatal(err)
	}
	if ops != "" {
		cfg.ops = map[string]bool{}
		for _, o := range strings.Split(ops, ",") {
			cfg.ops[strings.TrimSpace(o)] = true
		}
	}
	if cfg.smoke {
		cfg.duration, cfg.warmup, cfg.goroutines, cfg.pool, cfg.options, cfg.reps = 30*time.Millisecond, 10*time.Millisecond, []int{1, 4}, 20_000, false, 1
	}
	var w io.Writer = os.Stdout
	if cfg.out != "" {
		f, err := os.Create(cfg.out)
		if err != nil {
			fatal(err)
		}
		defer f.Close()
		w = io.MultiWriter(os.Stdout, f)
	}
	if err := run(context.Background(), cfg, w, os.Stderr); err != nil {
		pprof.StopCPUProfile()
		fatal(err)
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "benchcmp:", err)
	os.Exit(1)
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad concurrency %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// run starts a server, measures every selected operation and writes the report.
func run(ctx context.Context, cfg config, w, progress io.Writer) error {
	srv, err := redisproc.Start(redisproc.Options{})
	if err != nil {
		return err
	}
	defer srv.Stop()
	pinned := "not pinned"
	if cfg.serverCPU >= 0 {
		// -a: every thread of the server (main, bio, io threads).
		out, err := exec.Command("taskset", "-a", "-p", "-c", strconv.Itoa(cfg.serverCPU), strconv.Itoa(srv.Pid())).CombinedOutput()
		if err != nil {
			return fmt.Errorf("taskset redis-server: %v: %s", err, out)
		}
		pinned = "CPU " + strconv.Itoa(cfg.serverCPU)
	}
	e, err := newEnv(ctx, srv, cfg)
	if err != nil {
		return err
	}
	defer e.close()

	m := describeMachine(ctx, e)
	m.serverPin = pinned
	m.command = strings.Join(os.Args, " ")
	fmt.Fprint(w, m.markdown())

	// The schedule: per operation and concurrency, -reps rounds of every
	// variant, each round in a rotated order, so that a burst of load from
	// elsewhere on the machine hits different variants in different rounds;
	// the report gives the median round.
	var jobs, optJobs []job
	for _, op := range operations() {
		if (cfg.ops != nil && !cfg.ops[op.name]) || cfg.srvOnly {
			continue
		}
		for _, g := range cfg.goroutines {
			for rep := 0; rep < cfg.reps; rep++ {
				for k := range op.variants {
					v := op.variants[(k+rep)%len(op.variants)]
					jobs = append(jobs, job{op: op.name, variant: v.name, g: g, run: func(ctx context.Context) (*cellResult, error) {
						return e.measure(ctx, op, v, g, e.rc)
					}})
				}
			}
		}
	}
	if cfg.options && !cfg.srvOnly {
		plans := optionPlans(cfg)
		if cfg.smoke {
			plans = plans[:1]
		}
		for i := 0; i < len(plans); {
			// plans come grouped by (op, g): one round over the group per rep.
			j := i
			for j < len(plans) && plans[j].op == plans[i].op && plans[j].g == plans[i].g {
				j++
			}
			group := plans[i:j]
			for rep := 0; rep < cfg.reps; rep++ {
				for k := range group {
					p := group[(k+rep)%len(group)]
					optJobs = append(optJobs, job{op: p.op.name, variant: p.name, g: p.g, run: func(ctx context.Context) (*cellResult, error) {
						return e.measureOption(ctx, p)
					}})
				}
			}
			i = j
		}
	}
	total := len(jobs) + len(optJobs)
	started := time.Now()
	var failed []string
	done := 0
	runAll := func(jobs []job, tag string) ([]*cellResult, error) {
		var out []*cellResult
		byKey := map[string]*cellResult{}
		for _, j := range jobs {
			r, err := j.run(ctx)
			if err != nil {
				return nil, fmt.Errorf("%s%s %s g=%d: %w", tag, j.op, j.variant, j.g, err)
			}
			done++
			fmt.Fprintf(progress, "[%3d/%d %4s] %s%-10s g=%-3d %-36s %9.0f ops/s  p99 %-7s %5.1f allocs/op  srv %5.2f µs/op  load %s\n",
				done, total, time.Since(started).Round(time.Second), tag, j.op, j.g, j.variant, r.OpsPerSec(),
				fmtDur(r.Hist.quantile(0.99)), r.AllocsPerOp(), r.SrvUsecPerOp(), loadavg1())
			key := j.op + "\x00" + j.variant + "\x00" + strconv.Itoa(j.g)
			if agg := byKey[key]; agg != nil {
				agg.merge(r)
			} else {
				byKey[key] = r
				out = append(out, r)
			}
		}
		for _, r := range out {
			if r.Errors > 0 {
				failed = append(failed, fmt.Sprintf("%s%s %s g=%d: %d errors, first: %v", tag, r.Op, r.Variant, r.Goroutines, r.Errors, r.FirstErr))
			}
		}
		return out, nil
	}
	results, err := runAll(jobs, "")
	if err != nil {
		return err
	}
	var srvTime []*srvPairs
	for _, op := range operations() {
		if cfg.ops != nil && !cfg.ops[op.name] {
			continue
		}
		p, err := e.measureServerTime(ctx, op)
		if err != nil {
			return fmt.Errorf("server time %s: %w", op.name, err)
		}
		if p != nil {
			srvTime = append(srvTime, p)
			fmt.Fprintf(progress, "[%4s] server time %-10s %d pairs: µs/op ratio %.2f, CPU ratio %.2f  load %s\n",
				time.Since(started).Round(time.Second), op.name, len(p.usecRatios), median(p.usecRatios), median(p.cpuRatios), loadavg1())
		}
	}
	optResults, err := runAll(optJobs, "options ")
	if err != nil {
		return err
	}
	var clusterRes *clusterResult
	if cfg.cluster && !cfg.srvOnly && (cfg.ops == nil || cfg.ops["ClaimMany"]) {
		if clusterRes, err = measureClusterClaimMany(ctx, cfg, e.ids, progress); err != nil {
			return fmt.Errorf("cluster: %w", err)
		}
	}
	writeTables(w, results)
	writeServerTime(w, srvTime)
	if len(optResults) > 0 {
		writeOptions(w, optResults)
	}
	if cfg.options && !cfg.srvOnly {
		tries := 9
		if cfg.smoke {
			tries = 1
		}
		costs, err := e.measureConnect(ctx, tries)
		if err != nil {
			return fmt.Errorf("connect: %w", err)
		}
		writeConnect(w, costs)
	}
	if clusterRes != nil {
		writeCluster(w, clusterRes)
	}
	writeGoals(w, results, srvTime, clusterRes)
	fmt.Fprintf(w, "\nLoad average at the end: %s; total time %s.\n", loadavg(), time.Since(started).Round(time.Second))
	if len(failed) > 0 {
		return errors.New("variants failed:\n  " + strings.Join(failed, "\n  "))
	}
	return nil
}

// job is one measurement of the schedule.
type job struct {
	op, variant string
	g           int
	run         func(context.Context) (*cellResult, error)
}

func loadavg1() string {
	l, _, _ := strings.Cut(loadavg(), " ")
	return l
}

// machine describes where the numbers were taken.
type machine struct {
	cpus, model, kernel, redis, goVersion, gomaxprocs, affinity, load, serverPin, command string
}

func describeMachine(ctx context.Context, e *env) machine {
	m := machine{goVersion: runtime.Version(), gomaxprocs: strconv.Itoa(runtime.GOMAXPROCS(0)), load: loadavg()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		n := 0
		for _, l := range strings.Split(string(b), "\n") {
			k, v, _ := strings.Cut(l, ":")
			switch strings.TrimSpace(k) {
			case "processor":
				n++
			case "model name":
				m.model = strings.TrimSpace(v)
			}
		}
		m.cpus = strconv.Itoa(n)
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
				m.affinity = strings.TrimSpace(v)
			}
		}
	}
	if info, err := e.admin.Do(ctx, e.admin.B().Info().Section("server").Build()).ToString(); err == nil {
		kv := parseInfo(info)
		m.redis = kv["redis_version"]
	}
	return m
}

func (m machine) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Machine\n\n")
	fmt.Fprintf(&b, "- CPUs (nproc of the machine): %s × %s; kernel %s\n", m.cpus, m.model, m.kernel)
	fmt.Fprintf(&b, "- redis-server %s, started by benchcmp (internal/redisproc), pinned: %s\n", m.redis, m.serverPin)
	fmt.Fprintf(&b, "- client: %s, GOMAXPROCS %s, CPUs allowed %s\n", m.goVersion, m.gomaxprocs, m.affinity)
	fmt.Fprintf(&b, "- load average at the start: %s\n", m.load)
	fmt.Fprintf(&b, "- command: `%s`\n\n", m.command)
	return b.String()
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// newAdmin opens the client used between cells (FLUSHALL, CONFIG RESETSTAT, INFO).
func newAdmin(url string) (rueidis.Client, error) {
	opt, err := rueidis.ParseURL(url)
	if err != nil {
		return nil, err
	}
	opt.DisableCache = true
	return rueidis.NewClient(opt)
}
