package main

import (
	"context"
	"fmt"
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
