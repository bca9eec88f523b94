package main

import (
	"context"

	"github.com/redis/rueidis"
)

// operation is one store operation and the ways of doing it that are compared.
type operation struct {
	name  string
	batch int    // ids per call: 1, or 100 for the *Many operations
	about string // the workload, one line for the report
	// seed prepares the state the calls need (after FLUSHALL), for every id
	// of the pool; nil when the operation needs none.
	seed func(ctx context.Context, e *env) error
	// reuse: calls do not consume their ids (reads, updates), so the pool is
	// cycled through (call functions take the index modulo their key count).
	reuse bool
	// pool is how many ids of the pool the calls may use (the seeded ones);
	// 0: all of them.
	pool     int
	variants []variant
}

// variant roles, used by the goal checks.
const (
	roleStore   = "redisonce"
	roleMinimal = "minimal"  // the minimal script doing the same Redis commands
	roleRaw     = "raw"      // plain rueidis commands
	roleSetNX   = "setnx"    // go-redis SetNX, the seed claim store's approach
	roleOther   = "baseline" // any other baseline
	// rolePrevious is what the store did before a batch script served the
	// operation (one EVALSHA of the single-item script per item, pipelined).
	rolePrevious = "previous"
)

// variant is one way of doing an operation.
type variant struct {
	name string
	role string
	// setup runs after the seed and returns the call. rc is the rueidis client
	// to use (the store-tuned one, or a differently configured one in the
	// client options experiment).
	setup func(ctx context.Context, e *env, rc rueidis.Client) (callFunc, error)
}

// operations lists every operation measured, in report order.
func operations() []*operation {
	return []*operation{
		opClaim(), opClaimMany(),
		opAppend(), opAppendMany(), opAck(), opAckMany(), opUnacked(),
		opAcquire(), opUpdate(), opRecordsDo(), opReplay(), opLifecycle(),
	}
}
