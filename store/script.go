package store

import (
	"context"
	"fmt"
	"sync"
	"time"

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
	// noWait: a write that never waits for replicas (WithWaitReplicas): the
	// script header's Caller flags=no-wait. The Do flows' lease heartbeats,
	// extend.lua and renew.lua: their replies
	// are not results a caller acts on, an extension lost in a failover only
	// shortens a lease (as if it ran out: the final write is fenced, and it
	// waits), and a heartbeat held up by WAIT would cancel fn when replicas
	// are slow even though the lease is held. And watch.lua: a waiter's
	// flag, useless on a replica.
	noWait bool
	// alwaysEval: sent as EVAL with its source, never EVALSHA: the script
	// header's Caller flags=eval. The heartbeats again: an EVALSHA that meets NOSCRIPT (a new server, a
	// restart, a failover) costs a second round trip, and on a slow link
	// an extension that takes two round trips can miss the lease it
	// extends. A beat goes out every lease/4, so the extra bytes (the
	// script's source) cost nothing that shows.
	alwaysEval bool
}

var scriptsByName = sync.OnceValue(func() map[string]*script {
	m := make(map[string]*script)
	for _, s := range redisonce.All() {
		m[s.Name] = &script{name: s.Name, src: s.Source, sha: s.SHA1, ro: s.ReadOnly,
			noWait: s.NoWait, alwaysEval: s.Eval}
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

// evalsha builds EVALSHA(_RO) sha len(keys) keys... args...; a batch script's
// keys are all in one hash slot.
//
// Read-only commands are pinned (never recycled into rueidis's command pool):
// rueidis retries a read-only command on a new connection when its connection
// dies, and recycles it once the retry succeeds, while the dead connection's
// writer goroutine may still be reading it — a data race (rueidis v1.0.79,
// client.go Do; seen by TestFaultClientKill under -race). Writes are never
// retried after a connection error, so they keep the pool.
func (s *script) evalsha(c rueidis.Client, keys, args []string) rueidis.Completed {
	if s.ro {
		return c.B().EvalshaRo().Sha1(s.sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build().Pin()
	}
	return c.B().Evalsha().Sha1(s.sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
}

// eval builds EVAL(_RO) source len(keys) keys... args..., which also caches the
// script on the node that runs it.
func (s *script) eval(c rueidis.Client, keys, args []string) rueidis.Completed {
	if s.ro {
		return c.B().EvalRo().Script(s.src).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build().Pin() // see evalsha
	}
	return c.B().Eval().Script(s.src).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build()
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
	return s.execSent(ctx, c, key, nil, args...)
}

// execSent is exec that also writes, when sent is not nil, the time the
// command that ran was sent: the EVAL's when EVALSHA met NOSCRIPT (which ran
// nothing). A lease counts from there.
func (s *script) execSent(ctx context.Context, c redisClient, key string, sent *time.Time, args ...string) reply {
	keys := []string{key}
	if s.alwaysEval {
		stamp(sent)
		return reply{RedisResult: c.Do(ctx, s.eval(c.Client, keys, args))}
	}
	if s.ro || s.noWait || c.waitN == 0 {
		stamp(sent)
		r := c.Do(ctx, s.evalsha(c.Client, keys, args))
		if isNoScript(r.Error()) {
			stamp(sent)
			r = c.Do(ctx, s.eval(c.Client, keys, args))
		}
		return reply{RedisResult: r}
	}
	stamp(sent)
	r := c.doMulti(ctx, []rueidis.Completed{s.evalsha(c.Client, keys, args)}, true)
	if isNoScript(r[0].Error()) {
		stamp(sent)
		r = c.doMulti(ctx, []rueidis.Completed{s.eval(c.Client, keys, args)}, true)
	}
	return r[0]
}

// stamp sets *t to now, if t is not nil.
func stamp(t *time.Time) {
	if t != nil {
		*t = time.Now()
	}
}

// doMulti sends cmds in one round trip (a DoMulti). With replica
// acknowledgement and write true, WAIT n timeout follows the cmds in the same
// DoMulti: rueidis sends a DoMulti that holds a blocking command (WAIT is
// one) whole, in order, on one connection taken from its pool of dedicated
// connections, so WAIT runs on the very connection, and node, that ran the
// scripts, and counts the replicas that have their writes. On a standalone
// or Sentinel client every cmd is in one such DoMulti with one WAIT (a
// batch of many 500-key calls too: one connection, not one per call). On a
// cluster the cmds are grouped by hash slot, each group followed by its own
// WAIT (a cluster client sends a keyless command with the slot of the keyed
// ones), and the groups go out concurrently. A group whose WAIT counts fewer
// than n replicas, or fails, marks each of its results unreplicated, except
// results that are errors themselves (an error reply wrote nothing; a lost
// connection is reported as such). A nil reply is a result: the script ran.
func (c redisClient) doMulti(ctx context.Context, cmds []rueidis.Completed, write bool) []reply {
	out := make([]reply, len(cmds))
	if !write || c.waitN == 0 {
		for i, r := range c.DoMulti(ctx, cmds...) {
			out[i].RedisResult = r
		}
		return out
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
	if c.Mode() != rueidis.ClientModeCluster {
		// One server: a command's Slot() is still its first key's slot, so
		// grouping by it would split one batch into concurrent DoMultis,
		// each on a dedicated connection of its own.
		all := make([]int, len(cmds))
		for i := range all {
			all[i] = i
		}
		run(all)
		return out
	}
	groups := map[uint16][]int{}
	for i, cmd := range cmds {
		groups[cmd.Slot()] = append(groups[cmd.Slot()], i)
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

// call is one entry of a batch: the script on keys (one key, or for a batch
// script, claim_many.lua..., several of one hash slot).
type call struct {
	s    *script
	keys []string
	args []string
}

// execMulti is execMultiOnce, retried for the entries a cluster answers
// TRYAGAIN: a script on several keys of a slot being migrated, when some of
// its keys have moved and others not yet. Redis refuses such a call before
// running it, so a retry cannot apply it twice; it is retried after 5, 10,
// 20... ms (at most 100 ms apart) until ctx's deadline, or for tryAgainFor
// when ctx has none, by which time the migration of those keys has usually
// ended; then the TRYAGAIN error is returned. The caller's deadline is the
// bound because a migration's pace is the cluster's, not the caller's: on a
// busy server moving a slot can take seconds, and a caller that gave an
// operation 10 s should not get a TRYAGAIN after 3 of them. Single-key
// scripts never get TRYAGAIN.
func execMulti(ctx context.Context, c redisClient, calls []call) []reply {
	res := execMultiOnce(ctx, c, calls)
	delay := 5 * time.Millisecond
	var deadline time.Time // from the first TRYAGAIN: no clock read without one
	for {
		var again []int
		for i := range res {
			if isTryAgain(res[i].Error()) {
				again = append(again, i)
			}
		}
		if len(again) == 0 {
			return res
		}
		if deadline.IsZero() {
			var ok bool
			if deadline, ok = ctx.Deadline(); !ok {
				deadline = time.Now().Add(tryAgainFor)
			}
		} else if !time.Now().Before(deadline) {
			return res
		}
		select {
		case <-ctx.Done():
			return res
		case <-time.After(delay):
		}
		delay = min(2*delay, 100*time.Millisecond)
		sub := make([]call, len(again))
		for j, i := range again {
			sub[j] = calls[i]
		}
		for j, r := range execMultiOnce(ctx, c, sub) {
			res[again[j]] = r
		}
	}
}

// tryAgainFor bounds the TRYAGAIN retries of one batch whose ctx has no
// deadline: a slot migration moves a slot's keys in a few round trips
// (redis-cli --cluster reshard), but one stuck half-way (an operator's manual
// MIGRATING) must not hang a caller without a deadline.
const tryAgainFor = 3 * time.Second

func isTryAgain(err error) bool {
	re, ok := rueidis.IsRedisErr(err)
	return ok && re.IsTryAgain()
}

// execMultiOnce runs a batch in one round trip: a DoMulti of EVALSHA (auto-pipelined,
// split per node on a cluster; with replica acknowledgement each hash slot's
// scripts followed by WAIT, see doMulti). Entries answered NOSCRIPT did not run; for those
// only, the scripts are SCRIPT LOADed on every node and the entries retried with
// EVALSHA, and anything still NOSCRIPT (a flush in between) with EVAL. This never
// re-sends SCRIPT LOAD on the happy path, unlike rueidis Lua.ExecMulti.
func execMultiOnce(ctx context.Context, c redisClient, calls []call) []reply {
	write := false
	cmds := make([]rueidis.Completed, len(calls))
	for i, k := range calls {
		if k.s.alwaysEval {
			// A heartbeat (extend_many.lua): its source every time, so a
			// NOSCRIPT never costs it a second round trip.
			cmds[i] = k.s.eval(c.Client, k.keys, k.args)
		} else {
			cmds[i] = k.s.evalsha(c.Client, k.keys, k.args)
		}
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
				cmds = append(cmds, k.s.eval(c.Client, k.keys, k.args))
			} else {
				cmds = append(cmds, k.s.evalsha(c.Client, k.keys, k.args))
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
