package store

import (
	"context"
	"fmt"
	"sync"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce"
)

// script is one embedded operation bound to its EVALSHA form. Read-only scripts
// use EVALSHA_RO / EVAL_RO so they may be served by replicas.
type script struct {
	name string
	src  string
	sha  string
	ro   bool
	// noWait: a write that never waits for replicas (WithWaitReplicas). Only
	// the Do flows' lease heartbeats, extend.lua and renew.lua: their replies
	// are not results a caller acts on, an extension lost in a failover only
	// shortens a lease (as if it ran out: the final write is fenced, and it
	// waits), and a heartbeat held up by WAIT would cancel fn when replicas
	// are slow even though the lease is held.
	noWait bool
}

var scriptsByName = sync.OnceValue(func() map[string]*script {
	m := make(map[string]*script)
	for _, s := range redisonce.All() {
		m[s.Name] = &script{name: s.Name, src: s.Source, sha: s.SHA1, ro: s.ReadOnly,
			noWait: s.Name == "extend" || s.Name == "renew"}
	}
	return m
})

// mustScript returns the named embedded script. The bundle is compiled in, so a
// missing name is a programming error caught by every test.
func mustScript(name string) *script {
	s, ok := scriptsByName()[name]
	if !ok {
		panic("redisonce: no embedded script " + name)
	}
	return s
}

// evalsha builds EVALSHA(_RO) sha 1 key args...
//
// Read-only commands are pinned (never recycled into rueidis's command pool):
// rueidis retries a read-only command on a new connection when its connection
// dies, and recycles it once the retry succeeds, while the dead connection's
// writer goroutine may still be reading it — a data race (rueidis v1.0.79,
// client.go Do; seen by TestFaultClientKill under -race). Writes are never
// retried after a connection error, so they keep the pool.
func (s *script) evalsha(c rueidis.Client, key string, args []string) rueidis.Completed {
	if s.ro {
		return c.B().EvalshaRo().Sha1(s.sha).Numkeys(1).Key(key).Arg(args...).Build().Pin()
	}
	return c.B().Evalsha().Sha1(s.sha).Numkeys(1).Key(key).Arg(args...).Build()
}

// eval builds EVAL(_RO) source 1 key args..., which also caches the script on the
// node that runs it.
func (s *script) eval(c rueidis.Client, key string, args []string) rueidis.Completed {
	if s.ro {
		return c.B().EvalRo().Script(s.src).Numkeys(1).Key(key).Arg(args...).Build().Pin() // see evalsha
	}
	return c.B().Eval().Script(s.src).Numkeys(1).Key(key).Arg(args...).Build()
}

// redisClient is the client a Redis store runs its scripts on, with the
// store's replica acknowledgement (WithWaitReplicas). Where a rueidis.Client
// is wanted, pass c.Client: boxing the struct itself allocates on every call.
type redisClient struct {
	rueidis.Client
	waitN  int64 // replicas each write waits for; 0 = no WAIT
	waitMS int64 // WAIT's timeout in ms (> 0 when waitN > 0)
}

func newRedisClient(c rueidis.Client, cfg config) redisClient {
	return redisClient{Client: c, waitN: int64(cfg.waitReplicas), waitMS: durMS(cfg.waitTimeout)}
}

// reply is a script's result and, for a write with replica acknowledgement,
// what WAIT said about it.
type reply struct {
	rueidis.RedisResult
	// unreplicated is nil, or ErrNotReplicated with WAIT's count or failure:
	// the script ran on the primary but fewer than n replicas confirmed it.
	unreplicated error
}

// exec runs the script on key: EVALSHA, and EVAL when the node answers NOSCRIPT
// (after a restart, failover or SCRIPT FLUSH). A NOSCRIPT reply means the script
// did not run, so the retry cannot apply it twice. With replica
// acknowledgement a write script is sent as one DoMulti of [EVALSHA, WAIT n
// timeout] (see doMulti).
func (s *script) exec(ctx context.Context, c redisClient, key string, args ...string) reply {
	if s.ro || s.noWait || c.waitN == 0 {
		r := c.Do(ctx, s.evalsha(c.Client, key, args))
		if isNoScript(r.Error()) {
			r = c.Do(ctx, s.eval(c.Client, key, args))
		}
		return reply{RedisResult: r}
	}
	r := c.doMulti(ctx, []rueidis.Completed{s.evalsha(c.Client, key, args)}, true)
	if isNoScript(r[0].Error()) {
		r = c.doMulti(ctx, []rueidis.Completed{s.eval(c.Client, key, args)}, true)
	}
	return r[0]
}

// doMulti sends cmds in one round trip (a DoMulti). With replica
// acknowledgement and write true, every group of cmds that share a hash slot
// (on a standalone or Sentinel client: all of them) is followed by WAIT n
// timeout in the same DoMulti: rueidis sends a DoMulti that holds a blocking
// command (WAIT is one) whole on one connection taken from its pool of
// dedicated connections, and a cluster client sends a keyless command with
// the slot of the keyed ones, so WAIT runs on the very connection, and node,
// that ran the scripts, and counts the replicas that have their writes.
// Groups on a cluster go out concurrently. A group whose WAIT counts fewer
// than n replicas, or fails, marks each of its results unreplicated, except
// results that are errors themselves (an error reply wrote nothing; a lost
// connection is reported as such). A nil reply is a result (update.lua's
// "expired at once").
func (c redisClient) doMulti(ctx context.Context, cmds []rueidis.Completed, write bool) []reply {
	out := make([]reply, len(cmds))
	if !write || c.waitN == 0 {
		for i, r := range c.DoMulti(ctx, cmds...) {
			out[i].RedisResult = r
		}
		return out
	}
	groups := map[uint16][]int{}
	for i, cmd := range cmds {
		groups[cmd.Slot()] = append(groups[cmd.Slot()], i)
	}
	run := func(idx []int) {
		multi := make([]rueidis.Completed, 0, len(idx)+1)
		for _, i := range idx {
			multi = append(multi, cmds[i])
		}
		multi = append(multi, c.B().Wait().Numreplicas(c.waitN).Timeout(c.waitMS).Build())
		res := c.DoMulti(ctx, multi...)
		unrepl := c.acknowledged(res[len(res)-1])
		for j, i := range idx {
			out[i].RedisResult = res[j]
			if err := res[j].Error(); err == nil || rueidis.IsRedisNil(err) {
				out[i].unreplicated = unrepl
			}
		}
	}
	if len(groups) == 1 {
		for _, idx := range groups {
			run(idx)
		}
		return out
	}
	var wg sync.WaitGroup
	for _, idx := range groups {
		wg.Go(func() { run(idx) })
	}
	wg.Wait()
	return out
}

// acknowledged reads WAIT's reply: nil when at least n replicas confirmed,
// otherwise ErrNotReplicated saying how many did, or why WAIT failed.
func (c redisClient) acknowledged(r rueidis.RedisResult) error {
	n, err := r.AsInt64()
	switch {
	case err != nil:
		return fmt.Errorf("%w: WAIT %d %d failed: %v", ErrNotReplicated, c.waitN, c.waitMS, err)
	case n < c.waitN:
		return fmt.Errorf("%w: %d of %d replicas confirmed it within %d ms", ErrNotReplicated, n, c.waitN, c.waitMS)
	}
	return nil
}

// call is one entry of a batch.
type call struct {
	s    *script
	key  string
	args []string
}

// execMulti runs a batch in one round trip: a DoMulti of EVALSHA (auto-pipelined,
// split per node on a cluster; with replica acknowledgement followed by WAIT,
// see doMulti). Entries answered NOSCRIPT did not run; for those
// only, the scripts are SCRIPT LOADed on every node and the entries retried with
// EVALSHA, and anything still NOSCRIPT (a flush in between) with EVAL. This never
// re-sends SCRIPT LOAD on the happy path, unlike rueidis Lua.ExecMulti.
func execMulti(ctx context.Context, c redisClient, calls []call) []reply {
	write := false
	cmds := make([]rueidis.Completed, len(calls))
	for i, k := range calls {
		cmds[i] = k.s.evalsha(c.Client, k.key, k.args)
		write = write || (!k.s.ro && !k.s.noWait)
	}
	res := c.doMulti(ctx, cmds, write)
	var retry []int
	for i := range res {
		if isNoScript(res[i].Error()) {
			retry = append(retry, i)
		}
	}
	if len(retry) == 0 {
		return res
	}
	loaded := map[*script]bool{}
	for _, i := range retry {
		s := calls[i].s
		if loaded[s] {
			continue
		}
		loaded[s] = true
		for _, n := range c.Nodes() {
			// Best effort: a node that fails to load is covered by the EVAL fallback.
			_ = n.Do(ctx, n.B().ScriptLoad().Script(s.src).Build()).Error()
		}
	}
	for _, useEval := range []bool{false, true} {
		cmds = cmds[:0]
		for _, i := range retry {
			k := calls[i]
			if useEval {
				cmds = append(cmds, k.s.eval(c.Client, k.key, k.args))
			} else {
				cmds = append(cmds, k.s.evalsha(c.Client, k.key, k.args))
			}
		}
		again := c.doMulti(ctx, cmds, write)
		next := retry[:0]
		for j, i := range retry {
			res[i] = again[j]
			if isNoScript(again[j].Error()) {
				next = append(next, i)
			}
		}
		retry = next
		if len(retry) == 0 {
			break
		}
	}
	return res
}

func isNoScript(err error) bool {
	re, ok := rueidis.IsRedisErr(err)
	return ok && re.IsNoScript()
}

// replicated is nil, or the unreplicated error wrapped with the operation and
// id: `redisonce: claim "m1": not replicated: 0 of 1 replicas ...`.
func (r reply) replicated(op, id string) error {
	if r.unreplicated == nil {
		return nil
	}
	return fmt.Errorf("redisonce: %s %q: %w", op, id, r.unreplicated)
}
