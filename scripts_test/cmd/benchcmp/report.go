package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

const tableHead = "| goroutines | variant | ops/s | rounds | p50 | p99 | allocs/op | B/op | client CPU µs/op | srv µs/op | srv CPU µs/op |\n" +
	"|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"

func writeTables(w io.Writer, results []*cellResult) {
	fmt.Fprintf(w, "## Results\n\n")
	fmt.Fprintf(w, "ops/s is the median of the rounds (each round one window per variant, in rotated order), "+
		"rounds the lowest and highest; ops/s counts ids (a batch of 100 is 100 ops); p50/p99 are per call (a batch is one call); "+
		"p50/p99, allocs/op, B/op and srv CPU pool every round, srv µs/op is the median round; allocs/op and B/op are the client's heap allocations per op (runtime.MemStats over the window, rueidis' "+
		"and go-redis' own goroutines included); srv µs/op is INFO commandstats usec of the commands the client sent "+
		"(EVALSHA, or the plain commands) per op; client CPU µs/op is the client process's user+sys CPU time per op (the runner's own bookkeeping included); srv CPU µs/op is the server process's used_cpu_user+sys per op "+
		"(parsing and network I/O included).\n\n")
	for _, op := range operations() {
		var rows []*cellResult
		for _, r := range results {
			if r.Op == op.name {
				rows = append(rows, r)
			}
		}
		if len(rows) == 0 {
			continue
		}
		fmt.Fprintf(w, "### %s — %s\n\n", op.name, op.about)
		fmt.Fprint(w, tableHead)
		for _, r := range rows {
			writeRow(w, r, r.Variant)
		}
		fmt.Fprintln(w)
	}
}

func writeRow(w io.Writer, r *cellResult, name string) {
	errs := ""
	if r.Errors > 0 {
		errs = fmt.Sprintf(" (%d errors)", r.Errors)
	}
	lo, hi := r.RateRange()
	fmt.Fprintf(w, "| %d | %s%s | %s | %s–%s | %s | %s | %s | %s | %s | %s | %s |\n", r.Goroutines, name, errs,
		fmtRate(r.OpsPerSec()), fmtRate(lo), fmtRate(hi), fmtDur(r.Hist.quantile(0.50)), fmtDur(r.Hist.quantile(0.99)),
		fmtNum(r.AllocsPerOp(), 2), fmtNum(r.BytesPerOp(), 0), fmtNum(r.CliCPUPerOp(), 2), fmtNum(r.SrvUsecPerOp(), 2), fmtNum(r.SrvCPUPerOp(), 2))
}

func writeOptions(w io.Writer, results []*cellResult) {
	fmt.Fprintf(w, "## Client options\n\n")
	fmt.Fprintf(w, "The redisonce variant on a client built from store.ClientOptions with one setting changed.\n\n")
	var op string
	for _, r := range results {
		if r.Op != op {
			if op != "" {
				fmt.Fprintln(w)
			}
			op = r.Op
			fmt.Fprintf(w, "### %s\n\n%s", op, tableHead)
		}
		writeRow(w, r, r.Variant)
	}
	fmt.Fprintln(w)
}

// goal is one checked target.
type goal struct {
	what     string
	measured float64
	target   string
	ok       bool
	note     string
}

func writeGoals(w io.Writer, results []*cellResult, srv []*srvPairs, cl *clusterResult) {
	find := func(op, role string, g int) *cellResult {
		for _, r := range results {
			if r.Op == op && r.Goroutines == g && roleOf(op, r.Variant) == role {
				return r
			}
		}
		return nil
	}
	var goals []goal
	// Every ratio is taken per round: the two variants of a round ran one
	// after the other, so a burst of load from elsewhere on the machine hits
	// both far more often than it hits one; the verdict is the median of the
	// paired ratios.
	ratio := func(what, op string, num, den string, g int, min float64) {
		a, b := find(op, num, g), find(op, den, g)
		if a == nil || b == nil {
			return
		}
		pr := paired(a.Rates, b.Rates)
		if len(pr) == 0 {
			return
		}
		v := median(pr)
		goals = append(goals, goal{what: what, measured: v, target: fmt.Sprintf("≥ %.2f×", min), ok: v >= min,
			note: fmt.Sprintf("rounds %s; median ops/s %s vs %s", fmtRatios(pr), fmtRate(a.OpsPerSec()), fmtRate(b.OpsPerSec()))})
	}
	ratio("Claim / go-redis SetNX, 64 goroutines", "Claim", roleStore, roleSetNX, 64, 2.5)
	ratio("Claim / rueidis SET NX PX, 64 goroutines", "Claim", roleStore, roleRaw, 64, 0.95)
	ratio("Claim / minimal script, 64 goroutines", "Claim", roleStore, roleMinimal, 64, 0.95)
	ratio("ClaimMany(100) / DoMulti of 100 EVALSHA minimal, 64 goroutines", "ClaimMany", roleStore, roleMinimal, 64, 0.9)
	ratio("ClaimMany(100) / DoMulti of 100 SET NX PX, 64 goroutines", "ClaimMany", roleStore, roleRaw, 64, 0.8)
	ratio("ClaimMany(100) / ClaimMany before claim_many (standalone), 64 goroutines", "ClaimMany", roleStore, rolePrevious, 64, 1)
	ratio("AppendMany(100) / 100 pipelined AppendWithID, messages/s, 64 goroutines", "AppendMany", roleStore, rolePrevious, 64, 3)
	ratio("records lifecycle / go-job's Redis store, 64 goroutines", "Lifecycle", roleStore, roleGoJob, 64, 1.5)
	ratio("records lifecycle / go-job's Redis store, 16 goroutines", "Lifecycle", roleStore, roleGoJob, 16, 1)
	ratio("records lifecycle / go-job's Redis store, 1 goroutine", "Lifecycle", roleStore, roleGoJob, 1, 1)
	ratio("AckMany(100) / DoMulti of 100 EVALSHA minimal, 64 goroutines", "AckMany", roleStore, roleMinimal, 64, 0.9)

	if cl != nil && len(cl.ratios) > 0 {
		v := median(cl.ratios)
		goals = append(goals, goal{what: "ClaimMany(100) on the 3-master cluster, hash-tagged ids / before claim_many, 64 goroutines", measured: v,
			target: "≥ 2.00×", ok: v >= 2, note: fmt.Sprintf("rounds %s; median ids/s %s vs %s", fmtRatios(cl.ratios), fmtRate(median(cl.store)), fmtRate(median(cl.prev)))})
	}
	// Server time per op: the dedicated alternating comparison.
	for _, p := range srv {
		if len(p.usecRatios) == 0 {
			continue
		}
		v := median(p.usecRatios)
		limit := 1.1
		if p.op == "RecordsDo" || p.op == "Replay" {
			limit = 1.2 // the goal for Records.Do and the duplicate's replay
		}
		goals = append(goals, goal{what: p.op + " server µs/op / minimal script's", measured: v, target: fmt.Sprintf("≤ %.2f×", limit), ok: v <= limit,
			note: fmt.Sprintf("%d alternating pairs, middle half %s; %.2f vs %.2f µs/op; CPU time ratio %.2f",
				len(p.usecRatios), fmtIQR(p.usecRatios), median(p.usec[0]), median(p.usec[1]), median(p.cpuRatios))})
	}
	srvRounds := func(op, role string) []float64 {
		var v []float64
		for _, r := range results {
			if r.Op == op && roleOf(r.Op, r.Variant) == role {
				v = append(v, r.SrvRounds...)
			}
		}
		return v
	}
	allocs := func(op string, limit float64) {
		r := find(op, roleStore, 64)
		if r == nil {
			return
		}
		v := r.AllocsPerOp()
		goals = append(goals, goal{what: op + " client allocs/op, 64 goroutines", measured: v, target: fmt.Sprintf("≤ %g", limit), ok: v <= limit,
			note: fmt.Sprintf("%.0f B/op", r.BytesPerOp())})
	}
	allocs("Claim", 2)
	allocs("Append", 4)
	allocs("Acquire", 8)
	// The lifecycle allocates at most 19 times per lifecycle (the records
	// layout's goal, BENCHMARKS.md). The runner's own bookkeeping adds a few hundredths per op
	// under load, so the whole allocations are compared.
	if r := find("Lifecycle", roleStore, 64); r != nil {
		v := r.AllocsPerOp()
		goals = append(goals, goal{what: "Lifecycle client allocs/op (whole), 64 goroutines", measured: math.Round(v), target: "≤ 19", ok: math.Round(v) <= 19,
			note: fmt.Sprintf("%.2f allocs/op measured, %.0f B/op", v, r.BytesPerOp())})
	}
	// The server's CPU per lifecycle, at most 1.5× go-job's store's.
	if a, b := find("Lifecycle", roleStore, 64), find("Lifecycle", roleGoJob, 64); a != nil && b != nil && b.SrvCPUPerOp() > 0 {
		v := a.SrvCPUPerOp() / b.SrvCPUPerOp()
		goals = append(goals, goal{what: "records lifecycle server CPU / go-job's Redis store's, 64 goroutines", measured: v, target: "≤ 1.50×", ok: v <= 1.5,
			note: fmt.Sprintf("%.1f vs %.1f µs of server CPU per lifecycle", a.SrvCPUPerOp(), b.SrvCPUPerOp())})
	}
	if v := srvRounds("Unacked", roleStore); len(v) > 0 {
		// Load from elsewhere only ever adds to a round's time: the least
		// disturbed round is the verdict, the median is shown.
		s := slices.Min(v)
		goals = append(goals, goal{what: "Unacked of a 1000-message tail, server µs", measured: s, target: "≤ 1000", ok: s <= 1000,
			note: fmt.Sprintf("least disturbed of %d rounds; median %.0f µs; the minimal script's least disturbed %.0f µs",
				len(v), median(v), minOr(srvRounds("Unacked", roleMinimal)))})
	}

	fmt.Fprintf(w, "## Goals (ratios from this run)\n\n| goal | measured | target | met | |\n|---|---:|---:|---|---|\n")
	for _, g := range goals {
		met := "yes"
		if !g.ok {
			met = "**no**"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", g.what, fmtNum(g.measured, 2), g.target, met, g.note)
	}
}

// roleOf finds a result's variant role by name.
func roleOf(op, variant string) string {
	for _, o := range operations() {
		if o.name != op {
			continue
		}
		for _, v := range o.variants {
			if v.name == variant {
				return v.role
			}
		}
	}
	return ""
}

func fmtRate(v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

func fmtNum(v float64, prec int) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	return strings.TrimSpace(fmt.Sprintf("%.*f", prec, v))
}

// paired returns a[k]/b[k] for the rounds both have.
func paired(a, b []float64) []float64 {
	var out []float64
	for k := 0; k < len(a) && k < len(b); k++ {
		if b[k] > 0 && !math.IsNaN(a[k]) && !math.IsNaN(b[k]) {
			out = append(out, a[k]/b[k])
		}
	}
	return out
}

func fmtRatios(v []float64) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = fmt.Sprintf("%.2f", x)
	}
	return strings.Join(parts, ", ")
}

// fmtIQR is the 25th to 75th percentile of v.
func fmtIQR(v []float64) string {
	s := append([]float64(nil), v...)
	slices.Sort(s)
	return fmt.Sprintf("%.2f–%.2f", s[len(s)/4], s[(3*len(s))/4])
}

func minOr(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	return slices.Min(v)
}

// goroutineLevels lists the concurrency levels measured for op.
func goroutineLevels(results []*cellResult, op string) []int {
	var out []int
	for _, r := range results {
		if r.Op == op && !slices.Contains(out, r.Goroutines) {
			out = append(out, r.Goroutines)
		}
	}
	return out
}
