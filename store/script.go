package store

import (
	"context"
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
}

var scriptsByName = sync.OnceValue(func() map[string]*script {
	m := make(map[string]*script)
	for _, s := range redisonce.All() {
		m[s.Name] = &script{name: s.Name, src: s.Source, sha: s.SHA1, ro: s.ReadOnly}
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

// exec runs the script on key: EVALSHA, and EVAL when the node answers NOSCRIPT
// (after a restart, failover or SCRIPT FLUSH). A NOSCRIPT reply means the script
// did not run, so the retry cannot apply it twice.
func (s *script) exec(ctx context.Context, c rueidis.Client, key string, args ...string) rueidis.RedisResult {
	r := c.Do(ctx, s.evalsha(c, key, args))
	if isNoScript(r.Error()) {
		r = c.Do(ctx, s.eval(c, key, args))
	}
	return r
}

// call is one entry of a batch.
type call struct {
	s    *script
	key  string
	args []string
}

// execMulti runs a batch in one round trip: a DoMulti of EVALSHA (auto-pipelined,
// split per node on a cluster). Entries answered NOSCRIPT did not run; for those
// only, the scripts are SCRIPT LOADed on every node and the entries retried with
// EVALSHA, and anything still NOSCRIPT (a flush in between) with EVAL. This never
// re-sends SCRIPT LOAD on the happy path, unlike rueidis Lua.ExecMulti.
func execMulti(ctx context.Context, c rueidis.Client, calls []call) []rueidis.RedisResult {
	cmds := make(rueidis.Commands, len(calls))
	for i, k := range calls {
		cmds[i] = k.s.evalsha(c, k.key, k.args)
	}
	res := c.DoMulti(ctx, cmds...)
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
				cmds = append(cmds, k.s.eval(c, k.key, k.args))
			} else {
				cmds = append(cmds, k.s.evalsha(c, k.key, k.args))
			}
		}
		again := c.DoMulti(ctx, cmds...)
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
