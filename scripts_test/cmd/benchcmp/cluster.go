package main

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"slices"
	"strconv"
	"sync/atomic"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/internal/redisproc"
	"github.com/redisonce/redisonce/store"
)

// clusterResult is the ClaimMany comparison on a 3-master cluster.
type clusterResult struct {
	pinned         string
	store, prev    []float64 // ids/s per round
	ratios         []float64
	allocs, pAlloc float64
}

// measureClusterClaimMany compares, on a 3-master cluster started for it,
// ClaimMany(100) of ids that share a hash tag per batch (so claim_many.lua
// serves a batch in one call) with ClaimMany as it was before (one claim.lua
// EVALSHA per id, pipelined), at 64 goroutines, alternating in rounds.
func measureClusterClaimMany(ctx context.Context, cfg config, ids []string, progress io.Writer) (*clusterResult, error) {
	cl, err := redisproc.StartCluster(3, redisproc.Options{})
	if err != nil {
		return nil, err
	}
	defer cl.Stop()
	res := &clusterResult{pinned: "not pinned"}
	if cfg.serverCPU >= 0 {
		for _, n := range cl.Nodes {
			if out, err := exec.Command("taskset", "-a", "-p", "-c", strconv.Itoa(cfg.serverCPU), strconv.Itoa(n.Pid())).CombinedOutput(); err != nil {
				return nil, fmt.Errorf("taskset redis-server: %v: %s", err, out)
			}
		}
		res.pinned = "all three on CPU " + strconv.Itoa(cfg.serverCPU)
	}
	opt, err := store.ClientOptions(cl.URL())
	if err != nil {
		return nil, err
	}
	rc, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	if err := loadScripts(ctx, rc); err != nil {
		return nil, err
	}
	// Batch k's ids share the tag {b<k>}: "{b7}<id>".
	tagged := make([]string, len(ids))
	for i, id := range ids {
		tagged[i] = "{b" + strconv.Itoa(i/batchSize) + "}" + id
	}
	s := must.Store(store.NewClaims(rc, store.WithTTL(claimTTL)))
	variants := []struct {
		name string
		call callFunc
	}{
		{"redisonce Claims.ClaimMany", func(ctx context.Context, first int) error {
			got, err := s.ClaimMany(ctx, tagged[first:first+batchSize])
			if err != nil {
				return err
			}
			for _, ok := range got {
				if !ok {
					return errNotCreated
				}
			}
			return nil
		}},
		{"ClaimMany before claim_many (DoMulti of claim.lua per id)", previousClaimMany(tagged, rc)},
	}
	flush := func() error {
		for _, n := range rc.Nodes() {
			if err := n.Do(ctx, n.B().Flushall().Sync().Build()).Error(); err != nil {
				return err
			}
		}
		return nil
	}
	reps := max(cfg.reps, 3)
	var pair [2]float64
	for rep := 0; rep < reps; rep++ {
		for k := range variants {
			v := variants[(k+rep)%2]
			if err := flush(); err != nil {
				return nil, err
			}
			var next atomic.Int64
			var warm, r cellResult
			limit := int64(len(ids))
			drive(ctx, 64, batchSize, &next, limit/10, cfg.warmup, v.call, &warm)
			drive(ctx, 64, batchSize, &next, limit, cfg.duration, v.call, &r)
			if r.Errors > 0 || warm.Errors > 0 {
				return nil, fmt.Errorf("cluster %s: %d errors, first: %v %v", v.name, r.Errors+warm.Errors, r.FirstErr, warm.FirstErr)
			}
			rate := float64(r.Items) / r.Elapsed.Seconds()
			idx := (k + rep) % 2
			pair[idx] = rate
			if idx == 0 {
				res.store = append(res.store, rate)
				res.allocs = r.AllocsPerOp()
			} else {
				res.prev = append(res.prev, rate)
				res.pAlloc = r.AllocsPerOp()
			}
			fmt.Fprintf(progress, "[cluster] ClaimMany g=64 %-58s %9.0f ids/s  load %s\n", v.name, rate, loadavg1())
		}
		res.ratios = append(res.ratios, pair[0]/pair[1])
	}
	return res, nil
}

func writeCluster(w io.Writer, r *clusterResult) {
	fmt.Fprintf(w, "### ClaimMany(100) on a 3-master cluster, ids hash-tagged per batch (servers pinned: %s), 64 goroutines\n\n", r.pinned)
	fmt.Fprintf(w, "| variant | ids/s (median of rounds) | rounds | allocs/id |\n|---|---:|---|---:|\n")
	fmt.Fprintf(w, "| redisonce Claims.ClaimMany (one claim_many.lua call per batch) | %s | %s–%s | %.2f |\n", fmtRate(median(r.store)), fmtRate(slices.Min(r.store)), fmtRate(slices.Max(r.store)), r.allocs)
	fmt.Fprintf(w, "| ClaimMany before claim_many (one claim.lua EVALSHA per id, DoMulti) | %s | %s–%s | %.2f |\n\n", fmtRate(median(r.prev)), fmtRate(slices.Min(r.prev)), fmtRate(slices.Max(r.prev)), r.pAlloc)
}
