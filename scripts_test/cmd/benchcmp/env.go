package main

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/internal/redisproc"
	"github.com/redisonce/redisonce/store"
)

// env is what every cell shares: the server, the clients and the id pool.
type env struct {
	srv   *redisproc.Server
	cfg   config
	admin rueidis.Client
	// rc is a rueidis client with the options the stores open their own
	// clients with (store.ClientOptions); the redisonce variants and the raw
	// rueidis baselines share it, so they differ only in what they send.
	rc rueidis.Client
	// gr is a go-redis client with its defaults, as a user would open it.
	gr *redis.Client
	// ids are the message ids, connection-message ids or record keys of a
	// cell: 32 hex characters, like the ids the outbox mints.
	ids []string
}

func newEnv(ctx context.Context, srv *redisproc.Server, cfg config) (*env, error) {
	e := &env{srv: srv, cfg: cfg}
	var err error
	if e.admin, err = newAdmin(srv.URL()); err != nil {
		return nil, err
	}
	opt, err := store.ClientOptions(srv.URL())
	if err != nil {
		return nil, err
	}
	if e.rc, err = rueidis.NewClient(opt); err != nil {
		return nil, err
	}
	gopt, err := redis.ParseURL(srv.URL())
	if err != nil {
		return nil, err
	}
	e.gr = redis.NewClient(gopt)
	e.ids = make([]string, cfg.pool)
	for i := range e.ids {
		e.ids[i] = fmt.Sprintf("%016x%016x", uint64(i)*0x9E3779B97F4A7C15, uint64(i))
	}
	return e, nil
}

func (e *env) close() {
	e.gr.Close()
	e.rc.Close()
	e.admin.Close()
}

// adminDo runs one admin command and returns its error.
func (e *env) adminDo(ctx context.Context, cmd rueidis.Completed) error {
	return e.admin.Do(ctx, cmd).Error()
}

// measure runs one cell: variant v of op at g goroutines.
func (e *env) measure(ctx context.Context, op *operation, v variant, g int, rc rueidis.Client) (*cellResult, error) {
	res := &cellResult{Op: op.name, Variant: v.name, Goroutines: g, Batch: op.batch}
	if err := e.adminDo(ctx, e.admin.B().Flushall().Sync().Build()); err != nil {
		return nil, err
	}
	limit := int64(len(e.ids))
	if op.pool > 0 {
		limit = min(limit, int64(op.pool))
	}
	if op.seed != nil {
		if err := op.seed(ctx, e); err != nil {
			return nil, fmt.Errorf("seed: %w", err)
		}
	}
	if op.reuse {
		limit = math.MaxInt64 / 2
	}
	call, err := v.setup(ctx, e, rc)
	if err != nil {
		return nil, err
	}
	var next atomic.Int64
	var warm cellResult
	// The warm-up may use at most a tenth of the pool.
	drive(ctx, g, op.batch, &next, limit/10, e.cfg.warmup, call, &warm)
	if warm.Errors > 0 {
		return nil, fmt.Errorf("warm-up: %d errors, first: %w", warm.Errors, warm.FirstErr)
	}
	if err := e.adminDo(ctx, e.admin.B().ConfigResetstat().Build()); err != nil {
		return nil, err
	}
	cpu0, err := e.serverCPU(ctx)
	if err != nil {
		return nil, err
	}
	drive(ctx, g, op.batch, &next, limit, e.cfg.duration, call, res)
	cpu1, err := e.serverCPU(ctx)
	if err != nil {
		return nil, err
	}
	res.SrvCPU = (cpu1 - cpu0) * 1e6
	stats, err := e.commandStats(ctx)
	if err != nil {
		return nil, err
	}
	res.SrvUsec, res.SrvCalls, res.SrvCommands = topLevel(stats)
	if res.Items > 0 {
		res.SrvRounds = []float64{res.SrvUsec / float64(res.Items)}
	}
	return res, nil
}

// serverCPU is the server's used_cpu_sys + used_cpu_user in seconds.
func (e *env) serverCPU(ctx context.Context) (float64, error) {
	s, err := e.admin.Do(ctx, e.admin.B().Info().Section("cpu").Build()).ToString()
	if err != nil {
		return 0, err
	}
	kv := parseInfo(s)
	sys, err1 := strconv.ParseFloat(kv["used_cpu_sys"], 64)
	usr, err2 := strconv.ParseFloat(kv["used_cpu_user"], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("INFO cpu: %q", s)
	}
	return sys + usr, nil
}

type cmdStat struct {
	calls int64
	usec  float64
}

// commandStats parses INFO commandstats: command name -> calls, usec.
func (e *env) commandStats(ctx context.Context) (map[string]cmdStat, error) {
	s, err := e.admin.Do(ctx, e.admin.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		return nil, err
	}
	out := map[string]cmdStat{}
	for k, v := range parseInfo(s) {
		name, ok := strings.CutPrefix(k, "cmdstat_")
		if !ok {
			continue
		}
		var st cmdStat
		for _, f := range strings.Split(v, ",") {
			fk, fv, _ := strings.Cut(f, "=")
			switch fk {
			case "calls":
				st.calls, _ = strconv.ParseInt(fv, 10, 64)
			case "usec":
				st.usec, _ = strconv.ParseFloat(fv, 64)
			}
		}
		out[name] = st
	}
	return out, nil
}

var scriptCommands = map[string]bool{"eval": true, "evalsha": true, "eval_ro": true, "evalsha_ro": true, "fcall": true, "fcall_ro": true}

// adminCommands are sent between windows (or by clients connecting) and are
// never part of an operation.
var adminCommands = map[string]bool{"config|resetstat": true, "info": true, "flushall": true, "hello": true, "ping": true,
	"script|load": true, "client|setinfo": true, "client|setname": true, "client|tracking": true, "command|docs": true,
	"cluster|slots": true, "cluster|shards": true, "select": true}

// topLevel sums the commands a client sent: the script commands when there are
// any (the commands a script runs are counted in commandstats too, and their
// time is already inside the script's), else every non-admin command.
func topLevel(stats map[string]cmdStat) (usec float64, calls int64, names string) {
	var scripted, plain []string
	for name := range stats {
		switch {
		case scriptCommands[name]:
			scripted = append(scripted, name)
		case !adminCommands[name]:
			plain = append(plain, name)
		}
	}
	use := plain
	if len(scripted) > 0 {
		use = scripted
	}
	sort.Strings(use)
	for _, n := range use {
		usec += stats[n].usec
		calls += stats[n].calls
	}
	return usec, calls, strings.Join(use, "+")
}

func parseInfo(s string) map[string]string {
	kv := map[string]string{}
	for _, l := range strings.Split(s, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || l[0] == '#' {
			continue
		}
		if k, v, ok := strings.Cut(l, ":"); ok {
			kv[k] = v
		}
	}
	return kv
}
