package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"sync/atomic"
	"time"
)

// srvPairs is the dedicated server-time comparison of one operation: the
// redisonce variant and the minimal script, alternating in short windows on
// the same seeded state, each window's server time read after its own
// CONFIG RESETSTAT. Alternating every few tens of milliseconds puts the two
// sides of each pair under the same load from elsewhere on the machine, which
// the longer main-table windows cannot.
type srvPairs struct {
	op         string
	usec       [2][]float64 // commandstats µs/op per window: [0] redisonce, [1] minimal
	cpu        [2][]float64 // server process CPU µs/op per window
	usecRatios []float64
	cpuRatios  []float64
}

// srvWindows and srvWindow size the comparison: 2 × 24 windows of 40 ms.
const (
	srvWindows    = 24
	srvWindow     = 40 * time.Millisecond
	srvGoroutines = 64
)

func (e *env) measureServerTime(ctx context.Context, op *operation) (*srvPairs, error) {
	var store, minimal *variant
	for i := range op.variants {
		switch op.variants[i].role {
		case roleStore:
			store = &op.variants[i]
		case roleMinimal:
			minimal = &op.variants[i]
		}
	}
	if store == nil || minimal == nil {
		return nil, nil
	}
	if err := e.adminDo(ctx, e.admin.B().Flushall().Sync().Build()); err != nil {
		return nil, err
	}
	if op.seed != nil {
		if err := op.seed(ctx, e); err != nil {
			return nil, fmt.Errorf("seed: %w", err)
		}
	}
	limit := int64(len(e.ids))
	if op.pool > 0 {
		limit = min(limit, int64(op.pool))
	}
	if op.reuse {
		limit = math.MaxInt64 / 2
	}
	var calls [2]callFunc
	for i, v := range []*variant{store, minimal} {
		c, err := v.setup(ctx, e, e.rc)
		if err != nil {
			return nil, err
		}
		calls[i] = c
	}
	// Both sides draw ids from one counter, so neither meets the other's
	// keys; a short warm-up of each loads its script.
	var next atomic.Int64
	windows, warmup := srvWindows, 20*time.Millisecond
	if e.cfg.smoke {
		windows, warmup = 2, 5*time.Millisecond
	}
	for _, c := range calls {
		var warm cellResult
		drive(ctx, srvGoroutines, op.batch, &next, limit, warmup, c, &warm)
		if warm.Errors > 0 {
			return nil, fmt.Errorf("warm-up: %w", warm.FirstErr)
		}
	}
	p := &srvPairs{op: op.name}
	for k := 0; k < windows; k++ {
		if !op.reuse && next.Load() > limit/2 {
			// Start the pool over on a fresh database (outside any window).
			if err := e.adminDo(ctx, e.admin.B().Flushall().Sync().Build()); err != nil {
				return nil, err
			}
			if op.seed != nil {
				if err := op.seed(ctx, e); err != nil {
					return nil, fmt.Errorf("seed: %w", err)
				}
			}
			next.Store(0)
		}
		var got [2]*cellResult
		for j := range 2 {
			side := (j + k) % 2 // alternate which side goes first
			if err := e.adminDo(ctx, e.admin.B().ConfigResetstat().Build()); err != nil {
				return nil, err
			}
			cpu0, err := e.serverCPU(ctx)
			if err != nil {
				return nil, err
			}
			r := &cellResult{}
			drive(ctx, srvGoroutines, op.batch, &next, limit, srvWindow, calls[side], r)
			cpu1, err := e.serverCPU(ctx)
			if err != nil {
				return nil, err
			}
			if r.Errors > 0 {
				return nil, fmt.Errorf("%d errors, first: %w", r.Errors, r.FirstErr)
			}
			stats, err := e.commandStats(ctx)
			if err != nil {
				return nil, err
			}
			r.SrvUsec, _, _ = topLevel(stats)
			r.SrvCPU = (cpu1 - cpu0) * 1e6
			got[side] = r
		}
		if got[0].Items == 0 || got[1].Items == 0 {
			break // the id pool is used up
		}
		for side := range 2 {
			p.usec[side] = append(p.usec[side], got[side].SrvUsecPerOp())
			p.cpu[side] = append(p.cpu[side], got[side].SrvCPUPerOp())
		}
		p.usecRatios = append(p.usecRatios, got[0].SrvUsecPerOp()/got[1].SrvUsecPerOp())
		p.cpuRatios = append(p.cpuRatios, got[0].SrvCPUPerOp()/got[1].SrvCPUPerOp())
	}
	return p, nil
}

func writeServerTime(w io.Writer, ps []*srvPairs) {
	fmt.Fprintf(w, "## Server time: redisonce vs the minimal script\n\n")
	fmt.Fprintf(w, "The two alternate in %d pairs of %v windows at %d goroutines on the same seeded state "+
		"(CONFIG RESETSTAT before each window). µs/op from INFO commandstats (wall time inside Redis) and "+
		"the server process's CPU time per op (not inflated by preemption); ratios are per pair, "+
		"median and middle half.\n\n", srvWindows, srvWindow, srvGoroutines)
	fmt.Fprintf(w, "| operation | redisonce µs/op | minimal µs/op | ratio | middle half | redisonce CPU µs/op | minimal CPU µs/op | CPU ratio | middle half |\n")
	fmt.Fprintf(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, p := range ps {
		if len(p.usecRatios) == 0 {
			continue
		}
		fmt.Fprintf(w, "| %s | %.2f | %.2f | %.2f | %s | %.2f | %.2f | %.2f | %s |\n", p.op,
			median(p.usec[0]), median(p.usec[1]), median(p.usecRatios), fmtIQR(p.usecRatios),
			median(p.cpu[0]), median(p.cpu[1]), median(p.cpuRatios), fmtIQR(p.cpuRatios))
	}
	fmt.Fprintln(w)
}
