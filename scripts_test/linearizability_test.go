package scripts_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// Linearizability: several clients (each its own connection pool) run random
// atomic operations on a few ids at once, recording when each call started
// and returned. porcupine then looks for an order of the operations that
// respects real time and in which the in-memory store, replaying them one by
// one, returns exactly what Redis returned. The check must pass for the real
// model and fail for a deliberately broken one.

// linClients and linOps bound a history: linClients clients of linOps
// operations each, over the three ids of linIDs.
const (
	linClients = 4
	linOps     = 60
)

func TestLinearizability(t *testing.T) {
	t.Parallel()
	for _, m := range opModels {
		t.Run(m.name, func(t *testing.T) {
			for _, topo := range []struct {
				name string
				url  func(*testing.T) string
			}{{"standalone", standaloneURL}, {"cluster3", cluster3URL}} {
				t.Run(topo.name, func(t *testing.T) {
					seed := uint64(time.Now().UnixNano())
					hist := recordHistory(t, m, topo.url(t), seed)
					res, info := porcupine.CheckOperationsVerbose(replayModel(m, ""), hist, time.Minute)
					if res != porcupine.Ok {
						path := filepath.Join(t.TempDir(), "history.html")
						_ = porcupine.VisualizePath(replayModel(m, ""), info, path)
						t.Fatalf("seed %d: the history of %d operations is %s against the memory store (visualization: %s)",
							seed, len(hist), res, path)
					}
					// The checker checks: a model that drops the effect of one
					// operation must not explain what Redis did.
					if res := porcupine.CheckOperationsTimeout(replayModel(m, m.broken), hist, time.Minute); res != porcupine.Illegal {
						t.Errorf("seed %d: a model that ignores %s explains the history (%s); the check proves nothing",
							seed, m.broken, res)
					}
					t.Logf("seed %d: %d operations, linearizable", seed, len(hist))
				})
			}
		})
	}
}

// TestLinearizabilityCatchesBadHistory: the real model rejects a history no
// correct store could produce, one per store.
func TestLinearizabilityCatchesBadHistory(t *testing.T) {
	for _, m := range opModels {
		t.Run(m.name, func(t *testing.T) {
			hist := m.impossible()
			if res := porcupine.CheckOperationsTimeout(replayModel(m, ""), hist, time.Minute); res != porcupine.Illegal {
				t.Errorf("an impossible history was judged %s", res)
			}
		})
	}
}

// linInput is an operation in a history: the op and, for the replay, the
// index it has in the history.
type linInput struct{ op op }

// recordHistory runs linClients clients of linOps random operations each
// against the Redis store at url and returns the history.
func recordHistory(t *testing.T, m opModel, url string, seed uint64) []porcupine.Operation {
	t.Helper()
	prefix := uniquePrefix(t)
	var mu sync.Mutex
	var hist []porcupine.Operation
	start := time.Now()
	var wg sync.WaitGroup
	for cl := range linClients {
		c := newClient(t, url)
		s := m.newRedis(c, prefix)
		rng := rand.New(rand.NewPCG(seed, uint64(cl)))
		buf := make([]byte, 8*linOps)
		for i := range buf {
			buf[i] = byte(rng.Uint32())
		}
		ops := decodeOps(m, &opReader{b: buf}, true, 10*linOps)
		var atomicOps []op
		for _, o := range ops {
			if m.atomic(o) && len(atomicOps) < linOps {
				atomicOps = append(atomicOps, o)
			}
		}
		wg.Go(func() {
			env := newApplyEnv()
			for i, o := range atomicOps {
				o.Seq = cl*10*linOps + i
				o.Ref = resolveRef(o.Ref, env)
				call := time.Since(start).Nanoseconds()
				res := m.apply(context.Background(), s, o, env)
				ret := time.Since(start).Nanoseconds()
				parts := []opResult{{o, res}}
				if m.split != nil {
					if p := m.split(o, res); p != nil {
						parts = p
					}
				}
				mu.Lock()
				for _, p := range parts {
					hist = append(hist, porcupine.Operation{ClientId: cl, Input: linInput{p.op}, Call: call, Output: p.res, Return: ret})
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, h := range hist {
		if r := h.Output.(result); r.Err != "" && r.Err != "ErrStaleOwner" && r.Err != "ErrNotFound" &&
			r.Err != "ErrOutboxFull" && r.Err != "ErrFingerprintMismatch" {
			t.Fatalf("%v failed: %s", h.Input.(linInput).op, r.Err)
		}
	}
	return hist
}

// resolveRef turns a Ref of refLatest ("the token I got last") into the Seq
// of the operation that got it, or refBogus when there is none.
func resolveRef(ref int, env *applyEnv) int {
	if ref != refLatest {
		return ref
	}
	best := refBogus
	for seq := range env.tokens {
		best = max(best, seq)
	}
	return best
}

// replayState is a model state: the operations linearized so far, newest
// first, and snap, what the in-memory store holds for the partition's id
// after them (opModel.snapshot). Two states are equal when their snapshots
// are: the snapshot determines every later reply, so porcupine may prune a
// state it has already explored under another order of the same operations.
type replayState struct {
	prev *replayState
	in   op
	snap string
}

// replayModel is the porcupine model of m: a step replays the operations
// linearized so far on a fresh in-memory store, applies the next, and compares
// its reply with what Redis returned. When broken names an operation, the
// model drops that operation's effect (a wrong model).
func replayModel(m opModel, broken string) porcupine.Model {
	ctx := context.Background()
	initSnap := m.snapshot(ctx, m.newMemory(), "x", newApplyEnv())
	snapOf := func(state any) string {
		if st := state.(*replayState); st != nil {
			return st.snap
		}
		return initSnap
	}
	return porcupine.Model{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			byID := map[string][]porcupine.Operation{}
			var order []string
			for _, o := range h {
				id := o.Input.(linInput).op.ID
				if _, ok := byID[id]; !ok {
					order = append(order, id)
				}
				byID[id] = append(byID[id], o)
			}
			var out [][]porcupine.Operation
			for _, id := range order {
				out = append(out, byID[id])
			}
			return out
		},
		Init: func() any { return (*replayState)(nil) },
		Step: func(state, input, output any) (bool, any) {
			st := state.(*replayState)
			in := input.(linInput).op
			var ops []op
			for s := st; s != nil; s = s.prev {
				ops = append(ops, s.in)
			}
			s := m.newMemory()
			env := newApplyEnv()
			for i := len(ops) - 1; i >= 0; i-- {
				if ops[i].Name != broken {
					m.apply(ctx, s, ops[i], env)
				}
			}
			if in.Name != broken && m.apply(ctx, s, in, env) != output.(result) {
				return false, nil
			}
			return true, &replayState{prev: st, in: in, snap: m.snapshot(ctx, s, in.ID, env)}
		},
		Equal: func(a, b any) bool { return snapOf(a) == snapOf(b) },
		Hash: func(state any) uint64 {
			h := fnv.New64a()
			h.Write([]byte(snapOf(state)))
			return h.Sum64()
		},
		DescribeOperation: func(input, output any) string {
			r := output.(result)
			return fmt.Sprintf("%v -> %s %s", input.(linInput).op, r.Val, r.Err)
		},
		DescribeState: func(state any) string { return snapOf(state) },
	}
}
