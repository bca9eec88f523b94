// Command inboxbench compares the Postgres inbox (Redis claim + inbox row in
// the effect's transaction) with a plain SQL-only inbox (the message id
// INSERTed with ON CONFLICT DO NOTHING in the effect's transaction, no Redis)
// on the same PostgreSQL server, both started here (internal/pgproc,
// internal/redisproc). `make bench` runs it.
//
// Per concurrency level (-c, a list) and round, for each inbox, in
// alternating order: first deliveries (n new ids, each with one ledger INSERT
// as its effect) then duplicates (the same n ids again), with that many
// goroutines. It reports throughput, the SQL statements
// per message the client sent (a pgx tracer counts every statement, BEGIN
// and COMMIT included), and the CPU time per message of the Redis server, of
// every PostgreSQL process (utime+stime from /proc/<pid>/stat: the
// postmaster, its live backends, and its reaped children) and of this
// process (the client: pgx, rueidis, the inbox). The medians of the rounds
// are printed as a Markdown table per level, then each inbox's best level's
// throughput compared.
//
// Three more rows take the redisonce inbox apart: "SQL-only, the inbox's
// row" is the SQL-only inbox writing the redisonce inbox's row with its
// first statement (fence, owner, processed_at and its index, the advisory
// lock); "redisonce inbox, memory claims" is Inbox.Do on
// store.NewMemoryClaims (the lease engine without Redis); and "floor" is one
// Claims.Claim (a single script call) before the first of them, which is not
// an inbox (a crash after the call loses the message) but the least any
// inbox that asks Redis before the transaction can cost. What separates the
// rows from their neighbours is what the row, the lease engine and a round
// trip to Redis each cost.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/redisonce/redisonce/integrations/postgres"
	"github.com/redisonce/redisonce/internal/pgproc"
	"github.com/redisonce/redisonce/internal/redisproc"
	"github.com/redisonce/redisonce/store"
)

func main() {
	n := flag.Int("n", 2000, "messages per phase")
	c := flag.String("c", "8,16,32", "concurrent deliveries: each level is measured, and each inbox's best level compared")
	rounds := flag.Int("rounds", 7, "rounds (the medians are reported)")
	fsync := flag.Bool("fsync", false, "PostgreSQL with fsync and synchronous_commit on (default: off, as the tests run it)")
	out := flag.String("out", "", "also write the report to this file")
	flag.Parse()
	var levels []int
	for f := range strings.SplitSeq(*c, ",") {
		l, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || l < 1 {
			fmt.Fprintf(os.Stderr, "inboxbench: -c %q: want a comma-separated list of levels >= 1\n", *c)
			os.Exit(2)
		}
		levels = append(levels, l)
	}
	if err := run(*n, levels, *rounds, *fsync, *out); err != nil {
		fmt.Fprintln(os.Stderr, "inboxbench:", err)
		os.Exit(1)
	}
}

// counter counts the statements a pool sends.
type counter struct{ n atomic.Int64 }

func (k *counter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	k.n.Add(1)
	return ctx
}
func (k *counter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

type phase struct {
	perSec       float64
	stmtsPerMsg  float64
	pgCPUus      float64 // Postgres CPU per message, µs
	redisCPUus   float64
	clientCPUus  float64 // this process's
	nonCommitted int
}

func run(n int, levels []int, rounds int, fsync bool, out string) error {
	ctx := context.Background()
	pg, err := pgproc.Start(pgproc.Options{Fsync: fsync})
	if err != nil {
		return err
	}
	defer pg.Stop()
	rs, err := redisproc.Start(redisproc.Options{})
	if err != nil {
		return err
	}
	defer rs.Stop()
	if err := pg.CreateDatabase("bench"); err != nil {
		return err
	}
	cfg, err := pgxpool.ParseConfig(pg.URL("bench"))
	if err != nil {
		return err
	}
	cfg.MaxConns = int32(slices.Max(levels) + 4)
	tr := &counter{}
	cfg.ConnConfig.Tracer = tr
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	claims, err := store.OpenClaims(rs.URL())
	if err != nil {
		return err
	}
	defer claims.Close()
	for _, q := range []string{
		`CREATE TABLE ledger (seq bigserial PRIMARY KEY, msg_id text NOT NULL, amount bigint NOT NULL)`,
		`CREATE TABLE sql_inbox (id text PRIMARY KEY, processed_at timestamptz NOT NULL DEFAULT now())`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			return err
		}
	}
	inbox, err := postgres.NewInbox(claims, pool)
	if err != nil {
		return err
	}
	if err := inbox.CreateTable(ctx); err != nil {
		return err
	}
	memClaims, err := store.NewMemoryClaims()
	if err != nil {
		return err
	}
	memInbox, err := postgres.NewInbox(memClaims, pool, postgres.WithInboxTable("mem_inbox"))
	if err != nil {
		return err
	}
	if err := memInbox.CreateTable(ctx); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE row_inbox (LIKE redisonce_inbox INCLUDING ALL)`); err != nil {
		return err
	}
	// Warm the pool's connections and statement caches.
	for i := range 200 {
		id := fmt.Sprintf("warm-%d", i)
		if _, err := inbox.Do(ctx, id, 10*time.Second, effect(id)); err != nil {
			return err
		}
		if _, err := sqlOnly(ctx, pool, "sql-"+id); err != nil {
			return err
		}
		if _, err := sqlInboxRow(ctx, pool, "row-"+id); err != nil {
			return err
		}
		if _, err := memInbox.Do(ctx, "mem-"+id, 10*time.Second, effect("mem-"+id)); err != nil {
			return err
		}
	}

	type kind struct {
		name string
		do   func(id string) (bool, error)
	}
	// The kinds in table order; the first is the baseline, the last the
	// redisonce inbox the goal is about.
	kinds := []kind{
		{"SQL-only inbox", func(id string) (bool, error) { return sqlOnly(ctx, pool, id) }},
		{"SQL-only, the inbox's row", func(id string) (bool, error) { return sqlInboxRow(ctx, pool, id) }},
		{"redisonce inbox, memory claims", func(id string) (bool, error) { return memInbox.Do(ctx, id, 10*time.Second, effect(id)) }},
		{"floor: one Redis call, then the inbox's row", func(id string) (bool, error) {
			// Not an inbox (a crash after Claim loses the message): what one
			// script call before the transaction costs, the least any inbox
			// that asks Redis first can cost.
			ok, err := claims.Claim(ctx, "floor:"+id)
			if err != nil || !ok {
				return false, err
			}
			return sqlInboxRow(ctx, pool, "floor:"+id)
		}},
		{"redisonce inbox", func(id string) (bool, error) { return inbox.Do(ctx, id, 10*time.Second, effect(id)) }},
	}
	base, goal := kinds[0].name, kinds[len(kinds)-1].name
	var b strings.Builder
	fmt.Fprintf(&b, "inbox benchmark: %d messages per phase, median of %d rounds per concurrency level; PostgreSQL fsync %v\n",
		n, rounds, fsync)
	best := map[string]float64{}
	for _, c := range levels {
		results := map[string]map[string][]phase{} // kind -> "first"/"dup" -> rounds
		for _, k := range kinds {
			results[k.name] = map[string][]phase{}
		}
		for r := range rounds {
			order := slices.Clone(kinds)
			if r%2 == 1 {
				slices.Reverse(order)
			}
			for _, k := range order {
				ids := make([]string, n)
				for i := range ids {
					ids[i] = fmt.Sprintf("c%d-r%d-%d-%d", c, r, slices.IndexFunc(kinds, func(x kind) bool { return x.name == k.name }), i)
				}
				for _, ph := range []string{"first", "dup"} {
					p, err := measure(pg, rs, tr, ids, c, k.do)
					if err != nil {
						return fmt.Errorf("%s %s: %w", k.name, ph, err)
					}
					if ph == "first" && p.nonCommitted != 0 {
						return fmt.Errorf("%s: %d first deliveries did not run", k.name, p.nonCommitted)
					}
					if ph == "dup" && p.nonCommitted != n {
						return fmt.Errorf("%s: %d of %d duplicates ran", k.name, n-p.nonCommitted, n)
					}
					results[k.name][ph] = append(results[k.name][ph], p)
				}
			}
		}
		load, _ := os.ReadFile("/proc/loadavg")
		fmt.Fprintf(&b, "\n%d concurrent deliveries (load average at the end: %s):\n\n", c,
			strings.Join(strings.Fields(string(load))[:min(3, len(strings.Fields(string(load))))], " "))
		fmt.Fprintf(&b, "| inbox | phase | msg/s | SQL statements/msg | Postgres CPU µs/msg | Redis CPU µs/msg | client CPU µs/msg |\n|---|---|---:|---:|---:|---:|---:|\n")
		for _, k := range kinds {
			for _, ph := range []string{"first", "dup"} {
				ps := results[k.name][ph]
				label := map[string]string{"first": "first deliveries", "dup": "duplicates"}[ph]
				perSec := median(ps, func(p phase) float64 { return p.perSec })
				if ph == "first" {
					best[k.name] = max(best[k.name], perSec)
				}
				fmt.Fprintf(&b, "| %s | %s | %.0f | %.2f | %.0f | %.0f | %.0f |\n", k.name, label,
					perSec, median(ps, func(p phase) float64 { return p.stmtsPerMsg }),
					median(ps, func(p phase) float64 { return p.pgCPUus }), median(ps, func(p phase) float64 { return p.redisCPUus }),
					median(ps, func(p phase) float64 { return p.clientCPUus }))
			}
		}
		// The ratios within each round (the machine's speed drifts between
		// rounds), then their median.
		fmt.Fprintf(&b, "\nfirst deliveries, medians of the per-round ratios to the SQL-only inbox:\n\n"+
			"| inbox | SQL-only / it, throughput (rounds) | its server CPU (Postgres + Redis) / SQL-only's | its CPU, servers and client / SQL-only's |\n|---|---|---:|---:|\n")
		for _, k := range kinds[1:] {
			var thr, cpu, all []float64
			for r := range rounds {
				sq, ib := results[base]["first"][r], results[k.name]["first"][r]
				thr = append(thr, sq.perSec/ib.perSec)
				cpu = append(cpu, (ib.pgCPUus+ib.redisCPUus)/(sq.pgCPUus+sq.redisCPUus))
				all = append(all, (ib.pgCPUus+ib.redisCPUus+ib.clientCPUus)/(sq.pgCPUus+sq.redisCPUus+sq.clientCPUus))
			}
			slices.Sort(thr)
			slices.Sort(cpu)
			slices.Sort(all)
			fmt.Fprintf(&b, "| %s | %.2fx (%s) | %.2fx | %.2fx |\n", k.name, thr[len(thr)/2], fmtRatios(thr), cpu[len(cpu)/2], all[len(all)/2])
		}
	}
	// Each inbox at its best level: a consumer sets its concurrency to what
	// its store needs (the redisonce inbox waits on two more round trips per
	// message, to Redis, so it needs more deliveries in flight to fill the
	// same machine).
	fmt.Fprintf(&b, "\nfirst deliveries, each inbox at its best level of %v: SQL-only %.0f msg/s, redisonce %.0f msg/s: %.2fx (goal: <= 1.20x)\n",
		levels, best[base], best[goal], best[base]/best[goal])
	// The ledger: one row per id, every round.
	var rows, distinct int
	if err := pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT msg_id) FROM ledger`).Scan(&rows, &distinct); err != nil {
		return err
	}
	if rows != distinct {
		return fmt.Errorf("ledger: %d rows for %d ids", rows, distinct)
	}
	st := inbox.Stats()
	fmt.Fprintf(&b, "inbox stats: %d committed, %d duplicates answered by Redis, %d found processed in Postgres, %d stale, %d failed\n",
		st.Committed, st.Duplicates, st.AlreadyProcessed, st.Stale, st.Failed)
	fmt.Print(b.String())
	if out != "" {
		if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
			return err
		}
		return os.WriteFile(out, []byte(b.String()), 0o644)
	}
	return nil
}

// median is the median of f over ps.
func median(ps []phase, f func(phase) float64) float64 {
	v := make([]float64, len(ps))
	for i, p := range ps {
		v[i] = f(p)
	}
	slices.Sort(v)
	return v[len(v)/2]
}

func fmtRatios(v []float64) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = strconv.FormatFloat(x, 'f', 2, 64)
	}
	return strings.Join(parts, " ")
}

func effect(id string) func(context.Context, pgx.Tx) error {
	return func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO ledger (msg_id, amount) VALUES ($1, 1)`, id)
		return err
	}
}

// sqlInboxRow is sqlOnly writing the redisonce inbox's row with the
// statement Inbox.Do begins with (inbox.go, sqlTake): a fence and an owner
// token of the lengths a lease's have, the id's advisory lock (its keys
// from a 64-bit FNV-1a of the id), into a table made LIKE the inbox's
// (processed_at and its index). Keep the two statements alike.
func sqlInboxRow(ctx context.Context, pool *pgxpool.Pool, id string) (ran bool, err error) {
	h := fnv.New64a()
	h.Write([]byte(id))
	k := h.Sum64()
	n := rowSeq.Add(1)
	fence, owner := uint64(time.Now().UnixNano())/1000*1000, fmt.Sprintf("%032x", n)
	err = pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		var took bool
		err := tx.QueryRow(ctx, `INSERT INTO row_inbox (id, fence, owner) SELECT $1, $2, $3
WHERE pg_try_advisory_xact_lock($4, $5)
ON CONFLICT (id) DO NOTHING RETURNING true`, id, fence, owner, int32(k>>32), int32(k)).Scan(&took)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		ran = true
		return effect(id)(ctx, tx)
	})
	return ran, err
}

var rowSeq atomic.Uint64

// sqlOnly is the plain SQL inbox: the id and the effect in one transaction.
func sqlOnly(ctx context.Context, pool *pgxpool.Pool, id string) (ran bool, err error) {
	err = pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO sql_inbox (id) VALUES ($1) ON CONFLICT DO NOTHING`, id)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		ran = true
		return effect(id)(ctx, tx)
	})
	return ran, err
}

func measure(pg *pgproc.Server, rs *redisproc.Server, tr *counter, ids []string, c int, do func(string) (bool, error)) (phase, error) {
	pg0, r0, c0 := pgCPU(pg.Pid()), procCPU(rs.Pid()), procCPU(os.Getpid())
	s0 := tr.n.Load()
	start := time.Now()
	var next atomic.Int64
	var notRun atomic.Int64
	var firstErr error
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range c {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(ids) {
					return
				}
				ran, err := do(ids[i])
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					return
				}
				if !ran {
					notRun.Add(1)
				}
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	if firstErr != nil {
		return phase{}, firstErr
	}
	m := float64(len(ids))
	return phase{
		perSec:       m / el.Seconds(),
		stmtsPerMsg:  float64(tr.n.Load()-s0) / m,
		pgCPUus:      float64(pgCPU(pg.Pid())-pg0) / m / 1e3,
		redisCPUus:   float64(procCPU(rs.Pid())-r0) / m / 1e3,
		clientCPUus:  float64(procCPU(os.Getpid())-c0) / m / 1e3,
		nonCommitted: int(notRun.Load()),
	}, nil
}

// clockTick is USER_HZ, the unit of /proc/<pid>/stat times (100 on Linux).
const clockTick = 100

// statTimes returns utime, stime, cutime, cstime (ns) and the parent of pid,
// from /proc/<pid>/stat.
func statTimes(pid int) (t [4]int64, ppid int, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return t, 0, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return t, 0, false
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3 (state)
	if len(f) < 15 {
		return t, 0, false
	}
	ppid, _ = strconv.Atoi(f[1])
	for j := range 4 {
		v, _ := strconv.ParseInt(f[11+j], 10, 64) // fields 14-17
		t[j] = v * int64(time.Second) / clockTick
	}
	return t, ppid, true
}

// procCPU is one process's utime+stime, ns.
func procCPU(pid int) int64 {
	t, _, _ := statTimes(pid)
	return t[0] + t[1]
}

// pgCPU is the CPU time of the whole PostgreSQL server, ns: the
// postmaster's own and its reaped children's, plus every live child's (the
// backends and auxiliary processes; each runs in a session of its own, so
// they are found by their parent, not their process group).
func pgCPU(postmaster int) int64 {
	t, _, ok := statTimes(postmaster)
	if !ok {
		return 0
	}
	total := t[0] + t[1] + t[2] + t[3]
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == postmaster {
			continue
		}
		if ct, ppid, ok := statTimes(pid); ok && ppid == postmaster {
			total += ct[0] + ct[1]
		}
	}
	return total
}
