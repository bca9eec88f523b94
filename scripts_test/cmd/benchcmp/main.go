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
	"strconv"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/internal/redisproc"
)

type config struct {
	duration   time.Duration
	warmup     time.Duration
	goroutines []int
	ops        map[string]bool // nil = all
	pool       int
	serverCPU  int
	options    bool
	out        string
	smoke      bool
}

func main() {
	var cfg config
	var gs, ops string
	flag.DurationVar(&cfg.duration, "duration", time.Second, "measured window of each cell")
	flag.DurationVar(&cfg.warmup, "warmup", 150*time.Millisecond, "warm-up before each cell's window")
	flag.StringVar(&gs, "goroutines", "1,16,64,256", "concurrency levels, comma-separated")
	flag.StringVar(&ops, "ops", "", "operations to run, comma-separated (default all)")
	flag.IntVar(&cfg.pool, "pool", 400_000, "distinct ids per cell: a cell stops early when it has used them all")
	flag.IntVar(&cfg.serverCPU, "server-cpu", -1, "pin redis-server to this CPU with taskset (-1: do not pin)")
	flag.BoolVar(&cfg.options, "options", true, "also measure the rueidis client options (MaxFlushDelay, DisableCache, PipelineMultiplex)")
	flag.StringVar(&cfg.out, "out", "", "also write the Markdown report to this file")
	flag.BoolVar(&cfg.smoke, "smoke", false, "tiny run that only checks every variant works")
	flag.Parse()
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
		cfg.duration, cfg.warmup, cfg.goroutines, cfg.pool, cfg.options = 30*time.Millisecond, 10*time.Millisecond, []int{1, 4}, 2000, false
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

	var cells []cellPlan
	for _, op := range operations() {
		if cfg.ops != nil && !cfg.ops[op.name] {
			continue
		}
		for _, g := range cfg.goroutines {
			for _, v := range op.variants {
				cells = append(cells, cellPlan{op: op, v: v, g: g})
			}
		}
	}
	var optCells []optionPlan
	if cfg.options {
		optCells = optionPlans(cfg)
		if cfg.smoke {
			optCells = optCells[:1]
		}
	}
	total := len(cells) + len(optCells)
	started := time.Now()
	var results []*cellResult
	var failed []string
	for i, c := range cells {
		r, err := e.measure(ctx, c.op, c.v, c.g, e.rc)
		if err != nil {
			return fmt.Errorf("%s %s g=%d: %w", c.op.name, c.v.name, c.g, err)
		}
		results = append(results, r)
		fmt.Fprintf(progress, "[%3d/%d %s] %-10s g=%-3d %-34s %9.0f ops/s  p99 %-7s %5.1f allocs/op  srv %5.2f µs/op\n",
			i+1, total, time.Since(started).Round(time.Second), c.op.name, c.g, c.v.name, r.OpsPerSec(),
			fmtDur(r.Hist.quantile(0.99)), r.AllocsPerOp(), r.SrvUsecPerOp())
		if r.Errors > 0 {
			failed = append(failed, fmt.Sprintf("%s %s g=%d: %d errors, first: %v", c.op.name, c.v.name, c.g, r.Errors, r.FirstErr))
		}
	}
	var optResults []*cellResult
	for i, p := range optCells {
		r, err := e.measureOption(ctx, p)
		if err != nil {
			return fmt.Errorf("options %s %s g=%d: %w", p.op.name, p.name, p.g, err)
		}
		optResults = append(optResults, r)
		fmt.Fprintf(progress, "[%3d/%d %s] options    g=%-3d %-34s %9.0f ops/s  p99 %-7s srv CPU %5.2f µs/op\n",
			len(cells)+i+1, total, time.Since(started).Round(time.Second), p.g, p.op.name+" "+p.name, r.OpsPerSec(),
			fmtDur(r.Hist.quantile(0.99)), r.SrvCPUPerOp())
		if r.Errors > 0 {
			failed = append(failed, fmt.Sprintf("options %s g=%d: %d errors, first: %v", p.name, p.g, r.Errors, r.FirstErr))
		}
	}
	writeTables(w, results)
	if len(optResults) > 0 {
		writeOptions(w, optResults)
	}
	writeGoals(w, results)
	fmt.Fprintf(w, "\nLoad average at the end: %s; total time %s.\n", loadavg(), time.Since(started).Round(time.Second))
	if len(failed) > 0 {
		return errors.New("variants failed:\n  " + strings.Join(failed, "\n  "))
	}
	return nil
}

type cellPlan struct {
	op *operation
	v  variant
	g  int
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
		m.redis = kv["redis_version"] + " (" + kv["mem_allocator"] + ")"
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
