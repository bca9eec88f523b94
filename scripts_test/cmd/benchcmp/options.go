package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/store"
)

// optionPlan is one cell of the client options experiment: the redisonce
// variant of op on a client built from store.ClientOptions and then changed
// by set.
type optionPlan struct {
	op   *operation
	name string
	set  func(*rueidis.ClientOption)
	g    int
}

// optionSets are the client settings compared; each starts from
// store.ClientOptions (what OpenClaims uses) and changes one thing.
func optionSets() []struct {
	name string
	set  func(*rueidis.ClientOption)
} {
	return []struct {
		name string
		set  func(*rueidis.ClientOption)
	}{
		{"store.ClientOptions", func(*rueidis.ClientOption) {}},
		{"DisableCache false", func(o *rueidis.ClientOption) { o.DisableCache = false }},
		{"MaxFlushDelay 0", func(o *rueidis.ClientOption) { o.MaxFlushDelay = 0 }},
		{"MaxFlushDelay 20µs", func(o *rueidis.ClientOption) { o.MaxFlushDelay = 20 * time.Microsecond }},
		{"MaxFlushDelay 100µs", func(o *rueidis.ClientOption) { o.MaxFlushDelay = 100 * time.Microsecond }},
		{"PipelineMultiplex -1 (1 conn)", func(o *rueidis.ClientOption) { o.PipelineMultiplex = -1 }},
		{"PipelineMultiplex 1 (2 conns)", func(o *rueidis.ClientOption) { o.PipelineMultiplex = 1 }},
		{"PipelineMultiplex 2 (4 conns)", func(o *rueidis.ClientOption) { o.PipelineMultiplex = 2 }},
	}
}

// optionOps are the operations the options are measured on.
var optionOps = map[string]bool{"Claim": true, "Append": true}

func optionPlans(cfg config) []optionPlan {
	var out []optionPlan
	for _, op := range operations() {
		if !optionOps[op.name] || (cfg.ops != nil && !cfg.ops[op.name]) {
			continue
		}
		for _, g := range []int{1, 64} {
			for _, s := range optionSets() {
				out = append(out, optionPlan{op: op, name: s.name, set: s.set, g: g})
			}
		}
	}
	return out
}

// measureOption runs one option cell on a client of its own.
func (e *env) measureOption(ctx context.Context, p optionPlan) (*cellResult, error) {
	opt, err := store.ClientOptions(e.srv.URL())
	if err != nil {
		return nil, err
	}
	p.set(&opt)
	c, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var v *variant
	for i := range p.op.variants {
		if p.op.variants[i].role == roleStore {
			v = &p.op.variants[i]
		}
	}
	if v == nil {
		return nil, fmt.Errorf("%s has no redisonce variant", p.op.name)
	}
	r, err := e.measure(ctx, p.op, *v, p.g, c)
	if err != nil {
		return nil, err
	}
	r.Variant = p.name
	return r, nil
}

// connectCost is what opening a client costs, with and without the
// client-side cache: time to connect and serve a first command on every
// pipelined connection, the client heap it keeps, and the server's
// tracking_clients (connections with CLIENT TRACKING on).
type connectCost struct {
	name      string
	connect   time.Duration // median of the tries
	heapBytes float64       // median HeapAlloc growth while the client is open
	tracking  string        // INFO clients tracking_clients with the client open
}

func (e *env) measureConnect(ctx context.Context, tries int) ([]connectCost, error) {
	var out []connectCost
	for _, c := range []struct {
		name  string
		cache bool
	}{{"DisableCache true (store.ClientOptions)", false}, {"DisableCache false", true}} {
		var times, heaps []float64
		var tracking string
		for range tries {
			opt, err := store.ClientOptions(e.srv.URL())
			if err != nil {
				return nil, err
			}
			opt.DisableCache = !c.cache
			opt.PipelineMultiplex = 2 // 4 connections, as on a machine with 4+ CPUs
			var m0, m1 runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&m0)
			t0 := time.Now()
			cl, err := rueidis.NewClient(opt)
			if err != nil {
				return nil, err
			}
			// Keys of different slots reach every pipelined connection.
			for i := range 16 {
				if err := cl.Do(ctx, cl.B().Get().Key("connect:"+strconv.Itoa(i)).Build()).Error(); err != nil && !rueidis.IsRedisNil(err) {
					cl.Close()
					return nil, err
				}
			}
			times = append(times, float64(time.Since(t0)))
			runtime.GC()
			runtime.ReadMemStats(&m1)
			heaps = append(heaps, float64(m1.HeapAlloc)-float64(m0.HeapAlloc))
			if info, err := e.admin.Do(ctx, e.admin.B().Info().Section("clients").Build()).ToString(); err == nil {
				tracking = parseInfo(info)["tracking_clients"]
			}
			cl.Close()
		}
		out = append(out, connectCost{name: c.name, connect: time.Duration(median(times)), heapBytes: median(heaps), tracking: tracking})
	}
	return out, nil
}

func writeConnect(w io.Writer, costs []connectCost) {
	fmt.Fprintf(w, "### Opening a client (4 pipelined connections)\n\n")
	fmt.Fprintf(w, "| option | connect + first command on each connection | client heap kept | server tracking_clients |\n|---|---:|---:|---:|\n")
	for _, c := range costs {
		fmt.Fprintf(w, "| %s | %s | %.0f KiB | %s |\n", c.name, fmtDur(c.connect), c.heapBytes/1024, c.tracking)
	}
	fmt.Fprintln(w)
}
