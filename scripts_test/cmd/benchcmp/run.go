package main

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"runtime"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// callFunc performs one call of an operation on the items first..first+batch-1
// of the id pool. It must not retain anything between calls and must return an
// error when the reply is not what the workload expects (a claim that did not
// create, an ack that removed nothing), so that every variant provably does the
// same work.
type callFunc func(ctx context.Context, first int) error

// cellResult is one measured cell: one variant of one operation at one
// concurrency.
type cellResult struct {
	Op         string
	Variant    string
	Goroutines int
	Batch      int

	Rates    []float64     // ops/s of each round
	Items    int64         // ids processed (calls * batch)
	Calls    int64         // calls made
	Elapsed  time.Duration // wall time of the measured window
	Errors   int64
	FirstErr error

	Hist hist // per-call latency

	CliCPU     float64 // the client process's user+sys CPU over the window, in µs
	Mallocs    uint64  // runtime.MemStats deltas over the window
	AllocBytes uint64

	SrvUsec     float64   // commandstats usec of the top-level commands
	SrvRounds   []float64 // srv µs/op of each round
	SrvCalls    int64     // commandstats calls of the top-level commands
	SrvCPU      float64   // used_cpu_user + used_cpu_sys delta, in µs
	SrvCommands string    // which top-level commands were counted
}

// OpsPerSec is items per second: the median of the rounds.
func (r *cellResult) OpsPerSec() float64 {
	return median(r.Rates)
}

// RateRange is the lowest and highest ops/s of the rounds.
func (r *cellResult) RateRange() (lo, hi float64) {
	if len(r.Rates) == 0 {
		return math.NaN(), math.NaN()
	}
	return slices.Min(r.Rates), slices.Max(r.Rates)
}

// merge adds another round of the same cell.
func (r *cellResult) merge(o *cellResult) {
	r.Items += o.Items
	r.Calls += o.Calls
	r.Elapsed += o.Elapsed
	r.Errors += o.Errors
	if r.FirstErr == nil {
		r.FirstErr = o.FirstErr
	}
	r.Hist.merge(&o.Hist)
	r.CliCPU += o.CliCPU
	r.Mallocs += o.Mallocs
	r.AllocBytes += o.AllocBytes
	r.SrvUsec += o.SrvUsec
	r.SrvRounds = append(r.SrvRounds, o.SrvRounds...)
	r.SrvCalls += o.SrvCalls
	r.SrvCPU += o.SrvCPU
	r.Rates = append(r.Rates, o.Rates...)
}

// AllocsPerOp is client heap allocations per item.
func (r *cellResult) AllocsPerOp() float64 { return per(float64(r.Mallocs), r.Items) }

// BytesPerOp is client heap bytes allocated per item.
func (r *cellResult) BytesPerOp() float64 { return per(float64(r.AllocBytes), r.Items) }

// SrvUsecPerOp is the server's command time (INFO commandstats) per item: the
// median of the rounds.
func (r *cellResult) SrvUsecPerOp() float64 {
	if len(r.SrvRounds) == 0 {
		return per(r.SrvUsec, r.Items)
	}
	return median(r.SrvRounds)
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// CliCPUPerOp is the client process's CPU time per item (the runner's own
// bookkeeping included, the same for every variant).
func (r *cellResult) CliCPUPerOp() float64 { return per(r.CliCPU, r.Items) }

// processCPU is this process's user + system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// SrvCPUPerOp is the server process's CPU time (INFO cpu) per item.
func (r *cellResult) SrvCPUPerOp() float64 { return per(r.SrvCPU, r.Items) }

func per(v float64, n int64) float64 {
	if n <= 0 {
		return math.NaN()
	}
	return v / float64(n)
}

// drive runs call from g goroutines until the deadline passes or the id pool
// [*next, limit) is used up, and returns what it saw. The goroutines start
// together; the window is from their release to the last one's return.
func drive(ctx context.Context, g, batch int, next *atomic.Int64, limit int64, d time.Duration, call callFunc, res *cellResult) {
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		hists   = make([]hist, g)
		calls   = make([]int64, g)
		errs    atomic.Int64
		errOnce sync.Once
	)
	var deadline time.Time
	for w := 0; w < g; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			h := &hists[w]
			<-start
			for {
				first := next.Add(int64(batch)) - int64(batch)
				if first+int64(batch) > limit {
					return
				}
				t0 := time.Now()
				if t0.After(deadline) {
					return
				}
				err := call(ctx, int(first))
				h.add(time.Since(t0))
				calls[w]++
				if err != nil {
					errs.Add(1)
					errOnce.Do(func() { res.FirstErr = err })
				}
			}
		}(w)
	}
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	c0 := processCPU()
	t0 := time.Now()
	deadline = t0.Add(d)
	close(start)
	wg.Wait()
	res.Elapsed = time.Since(t0)
	res.CliCPU = float64(processCPU()-c0) / 1e3
	runtime.ReadMemStats(&m1)
	res.Mallocs = m1.Mallocs - m0.Mallocs
	res.AllocBytes = m1.TotalAlloc - m0.TotalAlloc
	for w := range hists {
		res.Hist.merge(&hists[w])
		res.Calls += calls[w]
	}
	res.Items = res.Calls * int64(batch)
	res.Errors = errs.Load()
	if res.Elapsed > 0 {
		res.Rates = []float64{float64(res.Items) / res.Elapsed.Seconds()}
	}
}

// hist is a log-linear latency histogram: 32 sub-buckets per power of two
// (about 3% resolution), nanoseconds up to 2^40 (18 minutes). It does not
// allocate.
type hist struct {
	n      int64
	counts [41 * histSub]uint32
}

const histSubBits = 5
const histSub = 1 << histSubBits

func (h *hist) add(d time.Duration) {
	h.counts[histIndex(uint64(max(d, 1)))]++
	h.n++
}

func histIndex(v uint64) int {
	e := bits.Len64(v) // v in [2^(e-1), 2^e)
	if e <= histSubBits {
		return int(v)
	}
	if e > 40 {
		return len(hist{}.counts) - 1
	}
	sub := (v >> (e - 1 - histSubBits)) & (histSub - 1)
	return (e-histSubBits)*histSub + int(sub)
}

// histValue is the lower bound of bucket i.
func histValue(i int) uint64 {
	if i < histSub {
		return uint64(i)
	}
	e := i/histSub + histSubBits
	sub := uint64(i % histSub)
	return (1 << (e - 1)) | sub<<(e-1-histSubBits)
}

func (h *hist) merge(o *hist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
}

// quantile returns the q-quantile (0 < q <= 1), as the midpoint of its bucket.
func (h *hist) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(h.n)))
	var seen int64
	for i, c := range h.counts {
		seen += int64(c)
		if seen >= rank {
			lo, hi := histValue(i), histValue(i+1)
			return time.Duration((lo + hi) / 2)
		}
	}
	return time.Duration(histValue(len(h.counts) - 1))
}

func fmtDur(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < time.Millisecond:
		return fmt.Sprintf("%.0fµs", float64(d)/1e3)
	case d < time.Second:
		return fmt.Sprintf("%.2fms", float64(d)/1e6)
	}
	return d.Round(time.Millisecond).String()
}
