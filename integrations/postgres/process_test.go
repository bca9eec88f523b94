//go:build linux

package postgres_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/redisonce/redisonce/integrations/postgres"
	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/internal/redisproc"
	"github.com/redisonce/redisonce/store"
)

// The process tests' worker: the test binary re-executed with workerEnv set.
// It reads commands on stdin and writes events on stdout, one per line:
//
//	do <id> <amount> <hook>   run Inbox.Do for id; fn inserts one ledger row
//	go <id>                   let a held message go on
//	fn <id>                   (out) fn started
//	infn <id>                 (out) hook infn: fn wrote its row, waits for go
//	aftersql <id>             (out) hook aftersql: the SQL committed, the claim's
//	                          commit in Redis waits for go
//	res <id> <kind> [error]   (out) Do returned: committed, skipped (ran false,
//	                          nil error), inflight, stale, failed
//
// With WORKER_BLIND=1 the lease's loss is hidden from fn and the inbox's
// statements (blindClaims), as for a process paused right after its last look
// at the lease: only the database can refuse it.
const workerEnv = "REDISONCE_PGINBOX_WORKER"

// procLease: seconds, so that a live holder's heartbeat keeps its lease on a
// loaded machine.
const procLease = 1500 * time.Millisecond

// hookClaims runs the aftersql hook between fn's SQL commit and the claim's
// commit in Redis.
type hookClaims struct {
	postgres.Claimer
	hook func(id string)
}

func (h hookClaims) Do(ctx context.Context, id string, lease time.Duration, fn func(context.Context) error) (bool, error) {
	return h.Claimer.Do(ctx, id, lease, func(ctx context.Context) error {
		err := fn(ctx)
		if err == nil {
			h.hook(id)
		}
		return err
	})
}

func runWorker() error {
	name := os.Getenv(workerEnv)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("WORKER_PG"))
	if err != nil {
		return err
	}
	defer pool.Close()
	var outMu sync.Mutex
	say := func(format string, args ...any) {
		outMu.Lock()
		fmt.Fprintf(os.Stdout, format+"\n", args...)
		outMu.Unlock()
	}
	var gatesMu sync.Mutex
	gates := map[string]chan struct{}{}
	gate := func(id string) chan struct{} {
		gatesMu.Lock()
		defer gatesMu.Unlock()
		if gates[id] == nil {
			gates[id] = make(chan struct{})
		}
		return gates[id]
	}
	hooks := sync.Map{} // id -> hook
	c, err := store.OpenClaims(os.Getenv("WORKER_REDIS"), store.WithPrefix(os.Getenv("WORKER_PREFIX")))
	if err != nil {
		return err
	}
	defer c.Close()
	var claims postgres.Claimer = c
	if os.Getenv("WORKER_BLIND") == "1" {
		claims = blindClaims{claims}
	}
	claims = hookClaims{claims, func(id string) {
		if h, _ := hooks.Load(id); h == "aftersql" {
			say("aftersql %s", id)
			<-gate(id)
		}
	}}
	ib, err := postgres.NewInboxWithClaimer(claims, pool)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		f := strings.Fields(in.Text())
		switch {
		case len(f) == 2 && f[0] == "go":
			close(gate(f[1]))
		case len(f) == 4 && f[0] == "do":
			id, hook := f[1], f[3]
			amount, _ := strconv.Atoi(f[2])
			hooks.Store(id, hook)
			wg.Go(func() {
				ran, err := ib.Do(ctx, id, procLease, func(ctx context.Context, tx pgx.Tx) error {
					l, _ := store.LeaseFromContext(ctx)
					say("fn %s %d", id, l.Fence)
					if _, err := tx.Exec(ctx, `INSERT INTO ledger (msg_id, amount, fence, worker) VALUES ($1, $2, $3::text::numeric, $4)`,
						id, amount, strconv.FormatUint(l.Fence, 10), name); err != nil {
						return err
					}
					if hook == "infn" {
						say("infn %s", id)
						<-gate(id)
					}
					return nil
				})
				kind := "failed"
				switch {
				case ran && err == nil:
					kind = "committed"
				case err == nil:
					kind = "skipped"
				case errors.Is(err, store.ErrInFlight):
					kind = "inflight"
				case errors.Is(err, store.ErrStaleOwner):
					kind = "stale"
				}
				msg := ""
				if err != nil {
					msg = strings.ReplaceAll(err.Error(), "\n", " ")
				}
				say("res %s %s %s", id, kind, msg)
			})
		}
	}
	wg.Wait()
	return in.Err()
}

// procEnv is a process test's database (ledger + inbox tables) and Redis.
type procEnv struct {
	t      *testing.T
	pool   *pgxpool.Pool
	pgURL  string
	redis  *redisproc.Server
	prefix string
	ctx    context.Context
}

func newProcEnv(t *testing.T) *procEnv {
	t.Helper()
	pool, url, _ := newDB(t)
	e := &procEnv{t: t, pool: pool, pgURL: url + "&pool_max_conns=12", redis: startRedis(t), prefix: "pin:", ctx: context.Background()}
	ib, err := postgres.NewInbox(must.Store(store.NewMemoryClaims()), pool)
	if err != nil {
		t.Fatal(err)
	}
	if err := ib.CreateTable(e.ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(e.ctx, ledgerDDL); err != nil {
		t.Fatal(err)
	}
	return e
}

// worker is one worker process.
type worker struct {
	t     *testing.T
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string // closed when its stdout closes
	back  []string    // lines read by await that did not match
	fns   map[string]int
	fence map[string]uint64 // the fence of fn's last start, per id
	mu    sync.Mutex
}

func (e *procEnv) startWorker(name string, env ...string) *worker {
	t := e.t
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), workerEnv+"="+name, "WORKER_PG="+e.pgURL, "WORKER_REDIS="+e.redis.URL(),
		"WORKER_PREFIX="+e.prefix)
	cmd.Env = append(cmd.Env, env...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &worker{t: t, name: name, cmd: cmd, stdin: stdin, lines: make(chan string, 4096), fns: map[string]int{},
		fence: map[string]uint64{}}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			if f := strings.Fields(line); len(f) == 3 && f[0] == "fn" {
				fence, _ := strconv.ParseUint(f[2], 10, 64)
				w.mu.Lock()
				w.fns[f[1]]++
				w.fence[f[1]] = fence
				w.mu.Unlock()
			}
			w.lines <- line
		}
		close(w.lines)
	}()
	t.Cleanup(w.kill)
	return w
}

func (w *worker) send(format string, args ...any) {
	w.t.Helper()
	if _, err := fmt.Fprintf(w.stdin, format+"\n", args...); err != nil {
		w.t.Fatalf("worker %s: %v", w.name, err)
	}
}

// await returns the first line starting with prefix, within timeout.
func (w *worker) await(prefix string, timeout time.Duration) string {
	w.t.Helper()
	for i, l := range w.back {
		if strings.HasPrefix(l, prefix) {
			w.back = append(w.back[:i], w.back[i+1:]...)
			return l
		}
	}
	deadline := time.After(timeout)
	for {
		select {
		case l, ok := <-w.lines:
			if !ok {
				w.t.Fatalf("worker %s exited while the test waited for %q", w.name, prefix)
			}
			if strings.HasPrefix(l, prefix) {
				return l
			}
			w.back = append(w.back, l)
		case <-deadline:
			w.t.Fatalf("worker %s: no %q after %v (lines: %q)", w.name, prefix, timeout, w.back)
		}
	}
}

// do delivers id once and returns the result's kind and error text.
func (w *worker) do(id string, amount int, hook string) (kind, msg string) {
	w.t.Helper()
	w.send("do %s %d %s", id, amount, hook)
	return w.result(id)
}

func (w *worker) result(id string) (kind, msg string) {
	w.t.Helper()
	l := w.await("res "+id+" ", 60*time.Second)
	f := strings.SplitN(l, " ", 4)
	if len(f) == 4 {
		msg = f[3]
	}
	return f[2], msg
}

// deliver delivers id until a delivery is acknowledged (committed or
// skipped), as a broker would, for at most 30 s; it returns that delivery's
// kind.
func (w *worker) deliver(id string, amount int) string {
	w.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		kind, msg := w.do(id, amount, "none")
		if kind == "committed" || kind == "skipped" {
			return kind
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("worker %s: %s not acknowledged after 30 s: last %s %s", w.name, id, kind, msg)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (w *worker) fnStarts(id string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.fns[id]
}

func (w *worker) signal(sig syscall.Signal) {
	w.t.Helper()
	if err := syscall.Kill(w.cmd.Process.Pid, sig); err != nil {
		w.t.Fatalf("worker %s: %v: %v", w.name, sig, err)
	}
}

// kill SIGKILLs the worker (by its pid) and waits for it.
func (w *worker) kill() {
	if w.cmd.ProcessState != nil {
		return
	}
	_ = syscall.Kill(w.cmd.Process.Pid, syscall.SIGCONT)
	_ = w.cmd.Process.Kill()
	_ = w.cmd.Wait()
}

// ledger returns each message's ledger rows and amounts.
func (e *procEnv) ledger() (rows map[string]int, sum int) {
	e.t.Helper()
	r, err := e.pool.Query(e.ctx, `SELECT msg_id, count(*), sum(amount) FROM ledger GROUP BY msg_id`)
	if err != nil {
		e.t.Fatal(err)
	}
	rows = map[string]int{}
	for r.Next() {
		var id string
		var n, s int
		if err := r.Scan(&id, &n, &s); err != nil {
			e.t.Fatal(err)
		}
		rows[id], sum = n, sum+s
	}
	if err := r.Err(); err != nil {
		e.t.Fatal(err)
	}
	return rows, sum
}

func (e *procEnv) rowState(id string) (fence, owner string, processed bool) {
	e.t.Helper()
	err := e.pool.QueryRow(e.ctx, `SELECT fence::text, owner, processed_at IS NOT NULL FROM redisonce_inbox WHERE id = $1`, id).
		Scan(&fence, &owner, &processed)
	if err != nil {
		e.t.Fatalf("inbox row %s: %v", id, err)
	}
	return fence, owner, processed
}

func (e *procEnv) flushRedis() {
	e.t.Helper()
	if _, err := e.redis.Do("FLUSHALL"); err != nil {
		e.t.Fatal(err)
	}
}

func (e *procEnv) redisValue(id string) string {
	e.t.Helper()
	v, err := e.redis.Do("GET", e.prefix+id)
	if err != nil {
		e.t.Fatal(err)
	}
	return v
}

// TestProcessKilledBeforeSQLCommit: a worker SIGKILLed inside fn, its ledger
// row written but not committed. The transaction dies with its connection;
// the redelivery, once the dead lease has run out, applies the effect once.
func TestProcessKilledBeforeSQLCommit(t *testing.T) {
	e := newProcEnv(t)
	w1, w2 := e.startWorker("w1"), e.startWorker("w2")
	w1.send("do m1 10 infn")
	w1.await("infn m1", 30*time.Second)
	w1.kill()
	if kind := w2.deliver("m1", 10); kind != "committed" {
		t.Fatalf("redelivery: %s, want committed", kind)
	}
	rows, sum := e.ledger()
	if rows["m1"] != 1 || sum != 10 {
		t.Fatalf("ledger %v sum %d, want m1 once, 10", rows, sum)
	}
	if _, _, processed := e.rowState("m1"); !processed {
		t.Fatal("inbox row not processed")
	}
}

// TestProcessKilledBetweenSQLAndRedisCommit: the SQL committed, the claim's
// commit in Redis never went out. The redelivery finds the row and skips fn.
func TestProcessKilledBetweenSQLAndRedisCommit(t *testing.T) {
	e := newProcEnv(t)
	w1, w2 := e.startWorker("w1"), e.startWorker("w2")
	w1.send("do m1 10 aftersql")
	w1.await("aftersql m1", 30*time.Second)
	if rows, _ := e.ledger(); rows["m1"] != 1 {
		t.Fatalf("the SQL has not committed at the hook: ledger %v", rows)
	}
	if v := e.redisValue("m1"); !strings.HasPrefix(v, "~") {
		t.Fatalf("Redis holds %q at the hook, want the in-flight lease", v)
	}
	w1.kill()
	if kind := w2.deliver("m1", 10); kind != "skipped" {
		t.Fatalf("redelivery: %s, want skipped", kind)
	}
	if n := w2.fnStarts("m1"); n != 0 {
		t.Fatalf("the redelivery ran fn %d times, want 0", n)
	}
	if rows, sum := e.ledger(); rows["m1"] != 1 || sum != 10 {
		t.Fatalf("ledger %v sum %d", rows, sum)
	}
	// The skip committed the claim: Redis answers the next duplicate.
	if v := e.redisValue("m1"); v != "1" {
		t.Fatalf("Redis holds %q after the skip, want the processed mark", v)
	}
}

// TestProcessKilledDuringRedisCommit: the claim's commit is sent to a Redis
// that is paused (SIGSTOP), and the worker is SIGKILLed with the command in
// flight, before or after Redis resumes (so the commit lands or not). Either
// way the effect is once and the redelivery does not run fn.
func TestProcessKilledDuringRedisCommit(t *testing.T) {
	e := newProcEnv(t)
	w2 := e.startWorker("w2")
	const trials = 6
	for trial := range trials {
		id := fmt.Sprintf("m%d", trial)
		w1 := e.startWorker(fmt.Sprintf("w1-%d", trial))
		w1.send("do %s 10 aftersql", id)
		w1.await("aftersql "+id, 30*time.Second)
		if err := e.redis.Pause(); err != nil {
			t.Fatal(err)
		}
		w1.send("go %s", id)
		time.Sleep(time.Duration(20*(trial/2)) * time.Millisecond) // the commit goes out, or not yet
		if trial%2 == 1 {
			// Redis reads the commit before the worker dies (when it was sent).
			if err := e.redis.Resume(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Duration(trial) * time.Millisecond)
		}
		w1.kill()
		if err := e.redis.Resume(); err != nil {
			t.Fatal(err)
		}
		before := e.redisValue(id)
		kind := w2.deliver(id, 10)
		t.Logf("trial %d: Redis held %q at the redelivery, which was %s", trial, before, kind)
		if n := w2.fnStarts(id); n != 0 {
			t.Fatalf("trial %d: the redelivery ran fn %d times, want 0", trial, n)
		}
	}
	rows, sum := e.ledger()
	if len(rows) != trials || sum != 10*trials {
		t.Fatalf("ledger %v sum %d, want each message once", rows, sum)
	}
	for id, n := range rows {
		if n != 1 {
			t.Fatalf("%s in the ledger %d times", id, n)
		}
	}
}

// TestProcessRedisFlushed: FLUSHALL between deliveries, and while a message
// is in fn. The rows keep every effect once.
func TestProcessRedisFlushed(t *testing.T) {
	e := newProcEnv(t)
	w1, w2 := e.startWorker("w1"), e.startWorker("w2")
	const n = 20
	for i := range n {
		if kind := w1.deliver(fmt.Sprintf("m%d", i), 1); kind != "committed" {
			t.Fatalf("m%d: %s", i, kind)
		}
	}
	e.flushRedis()
	for i := range n {
		if kind := w2.deliver(fmt.Sprintf("m%d", i), 1); kind != "skipped" {
			t.Fatalf("m%d after FLUSHALL: %s, want skipped", i, kind)
		}
		if s := w2.fnStarts(fmt.Sprintf("m%d", i)); s != 0 {
			t.Fatalf("m%d after FLUSHALL: fn ran %d times", i, s)
		}
	}
	// In flight: w1 is inside fn when Redis forgets its lease; w2 claims and
	// commits; w1 is then let go.
	w1.send("do x 5 infn")
	w1.await("infn x", 30*time.Second)
	e.flushRedis()
	if kind := w2.deliver("x", 5); kind != "committed" {
		t.Fatalf("x on w2: %s, want committed", kind)
	}
	w1.send("go x")
	kind, msg := w1.result("x")
	if kind == "committed" {
		t.Fatalf("x on w1 after its lease was flushed and w2 committed: %s %s", kind, msg)
	}
	t.Logf("the flushed owner's Do: %s %s", kind, msg)
	rows, sum := e.ledger()
	if len(rows) != n+1 || sum != n+5 {
		t.Fatalf("ledger %v sum %d", rows, sum)
	}
	for id, c := range rows {
		if c != 1 {
			t.Fatalf("%s in the ledger %d times", id, c)
		}
	}
}

// TestProcessStaleOwnerPaused: an owner SIGSTOPped inside fn, past its
// lease; another worker claims the message, ends the paused owner's
// transaction and runs; the paused owner is resumed and its transaction goes
// on to commit. It is refused and changes nothing —
// whether the new owner committed first or is still at work, and whether or
// not the stale owner's own lease check sees the loss (a blind worker models
// a pause right after that check).
func TestProcessStaleOwnerPaused(t *testing.T) {
	e := newProcEnv(t)
	w2 := e.startWorker("w2")
	cases := []struct {
		name       string
		blind      bool
		newerFirst bool
		want       string // the stale owner's result
	}{
		{"blind, newer commits first", true, true, "skipped"},
		{"blind, newer still at work", true, false, "stale"},
		// Its COMMIT is not sent (its context ended with the lease), and
		// the row it then finds is the new owner's: (false, nil).
		{"sees its lease lost", false, true, "skipped"},
	}
	for i, c := range cases {
		id := fmt.Sprintf("s%d", i)
		var env []string
		if c.blind {
			env = append(env, "WORKER_BLIND=1")
		}
		w1 := e.startWorker(fmt.Sprintf("w1-%d", i), env...)
		w1.send("do %s 1 infn", id)
		w1.await("infn "+id, 30*time.Second)
		w1.signal(syscall.SIGSTOP)
		paused := time.Now()
		if c.newerFirst {
			if kind := w2.deliver(id, 2); kind != "committed" {
				t.Fatalf("%s: the new owner: %s, want committed", c.name, kind)
			}
		} else {
			// Redeliver until w2 holds the claim (w1's lease runs out first).
			for deadline := time.Now().Add(30 * time.Second); ; {
				w2.send("do %s 2 infn", id)
				l := w2.awaitEither("infn "+id, "res "+id+" ", 60*time.Second)
				if strings.HasPrefix(l, "infn") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: w2 never got the claim: %s", c.name, l)
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
		// Redis let w2 claim the id: w1's lease had run out.
		t.Logf("%s: the new owner holds the claim %v after the pause", c.name, time.Since(paused).Round(time.Millisecond))
		w1.signal(syscall.SIGCONT)
		w1.send("go %s", id)
		kind, msg := w1.result(id)
		if kind != c.want {
			t.Fatalf("%s: the stale owner's Do: %s %s, want %s", c.name, kind, msg, c.want)
		}
		if !c.newerFirst {
			w2.send("go %s", id)
			if kind, msg := w2.result(id); kind != "committed" {
				t.Fatalf("%s: the new owner: %s %s", c.name, kind, msg)
			}
		}
		rows, sum := e.ledgerFor(id)
		if rows != 1 || sum != 2 {
			t.Fatalf("%s: ledger has %d rows, amount %d for %s; want the new owner's row only", c.name, rows, sum, id)
		}
		fence, owner, processed := e.rowState(id)
		t.Logf("%s: stale owner %s (%s); row fence %s owner %s processed %v", c.name, kind, msg, fence, owner[:8], processed)
		// The new owner's lease carries a higher fence than the stale one's,
		// and the row holds it.
		w1.mu.Lock()
		staleFence := w1.fence[id]
		w1.mu.Unlock()
		rowFence, err := strconv.ParseUint(fence, 10, 64)
		if err != nil || staleFence == 0 || rowFence <= staleFence || !processed {
			t.Fatalf("%s: row fence %s (processed %v) not above the stale owner's %d", c.name, fence, processed, staleFence)
		}
		w1.kill()
	}
}

func (w *worker) awaitEither(a, b string, timeout time.Duration) string {
	w.t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case l, ok := <-w.lines:
			if !ok {
				w.t.Fatalf("worker %s exited", w.name)
			}
			if strings.HasPrefix(l, a) || strings.HasPrefix(l, b) {
				return l
			}
			w.back = append(w.back, l)
		case <-deadline:
			w.t.Fatalf("worker %s: neither %q nor %q after %v", w.name, a, b, timeout)
		}
	}
}

func (e *procEnv) ledgerFor(id string) (rows, sum int) {
	e.t.Helper()
	if err := e.pool.QueryRow(e.ctx, `SELECT count(*), coalesce(sum(amount), 0) FROM ledger WHERE msg_id = $1`, id).Scan(&rows, &sum); err != nil {
		e.t.Fatal(err)
	}
	return rows, sum
}

// TestProcessThreeWorkers: 3 worker processes, 2,000 messages, 600 of them
// delivered twice at once to different workers; one worker SIGKILLed at a
// third of the run (and replaced), Redis flushed at two thirds. Every
// message's effect is in the ledger exactly once, and the inbox holds one
// processed row per message (the retention keeps them all); a Prune with a
// retention of 1 ms then empties it in bounded batches.
func TestProcessThreeWorkers(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	e := newProcEnv(t)
	const n, dups = 2000, 600
	ws := []*worker{e.startWorker("w0"), e.startWorker("w1"), e.startWorker("w2")}
	var queue []string
	for i := range n {
		queue = append(queue, fmt.Sprintf("m%d", i))
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, i := range rng.Perm(n)[:dups] {
		queue = append(queue, fmt.Sprintf("m%d", i))
	}
	rng.Shuffle(len(queue), func(i, j int) { queue[i], queue[j] = queue[j], queue[i] })

	type result struct {
		w        *worker
		id, kind string
	}
	acked := map[string]bool{}
	outstanding := map[*worker]map[string]int{} // live worker -> id -> deliveries in flight
	const perWorker = 8
	results := make(chan result, 64)
	listen := func(w *worker) {
		outstanding[w] = map[string]int{}
		go func() {
			for l := range w.lines {
				if rest, ok := strings.CutPrefix(l, "res "); ok {
					f := strings.SplitN(rest, " ", 3)
					results <- result{w, f[0], f[1]}
				}
			}
		}()
	}
	for _, w := range ws {
		listen(w)
	}
	killed, flushed := false, false
	kinds := map[string]int{}
	var retry []string
	next := 0
	busy := func(w *worker) int {
		s := 0
		for _, c := range outstanding[w] {
			s += c
		}
		return s
	}
	for deadline := time.Now().Add(5 * time.Minute); len(acked) < n; {
		if time.Now().After(deadline) {
			t.Fatalf("after 5 minutes %d of %d messages acknowledged (kinds %v)", len(acked), n, kinds)
		}
		// Feed the workers with room: redeliveries first, then the queue.
		for _, w := range ws {
			for busy(w) < perWorker {
				var id string
				if len(retry) > 0 {
					id, retry = retry[0], retry[1:]
				} else if next < len(queue) {
					id, next = queue[next], next+1
				} else {
					break
				}
				w.send("do %s 1 none", id)
				outstanding[w][id]++
			}
		}
		var r result
		select {
		case r = <-results:
		case <-time.After(30 * time.Second):
			t.Fatalf("no result for 30 s (%d acknowledged; kinds %v)", len(acked), kinds)
		}
		if m := outstanding[r.w]; m != nil {
			if m[r.id]--; m[r.id] <= 0 {
				delete(m, r.id)
			}
		}
		kinds[r.kind]++
		switch r.kind {
		case "committed", "skipped":
			acked[r.id] = true
		default:
			if outstanding[r.w] != nil { // a dead worker's are redelivered below
				retry = append(retry, r.id)
			}
		}
		if !killed && len(acked) > n/3 {
			killed = true
			old := ws[1]
			old.kill()
			for id, c := range outstanding[old] {
				for range c {
					retry = append(retry, id) // the broker redelivers what the dead worker held
				}
			}
			delete(outstanding, old)
			ws[1] = e.startWorker("w1b")
			listen(ws[1])
		}
		if !flushed && len(acked) > 2*n/3 {
			flushed = true
			e.flushRedis()
		}
	}
	t.Logf("results: %v", kinds)
	rows, sum := e.ledger()
	if len(rows) != n || sum != n {
		t.Fatalf("ledger: %d messages, amount %d; want %d, %d", len(rows), sum, n, n)
	}
	for id, c := range rows {
		if c != 1 {
			t.Fatalf("%s in the ledger %d times", id, c)
		}
	}
	// fn read its lease's fence (LeaseFromContext): never 0, and each
	// committed ledger row's fence is the one its inbox row holds.
	var zero, mismatched int
	if err := e.pool.QueryRow(e.ctx, `SELECT count(*) FILTER (WHERE l.fence = 0), count(*) FILTER (WHERE l.fence <> i.fence)
		FROM ledger l JOIN redisonce_inbox i ON i.id = l.msg_id`).Scan(&zero, &mismatched); err != nil || zero != 0 || mismatched != 0 {
		t.Fatalf("ledger fences: %d zero, %d unlike the inbox row's (%v)", zero, mismatched, err)
	}
	var total, processed int
	if err := e.pool.QueryRow(e.ctx, `SELECT count(*), count(processed_at) FROM redisonce_inbox`).Scan(&total, &processed); err != nil {
		t.Fatal(err)
	}
	if total != n || processed != n {
		t.Fatalf("inbox: %d rows, %d processed; want %d, %d (retention keeps every row)", total, processed, n, n)
	}
	ib, err := postgres.NewInbox(must.Store(store.NewMemoryClaims()), e.pool, postgres.WithInboxRetention(time.Millisecond), postgres.WithInboxPruneBatch(300))
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	if got, err := ib.Prune(e.ctx); err != nil || got != n {
		t.Fatalf("Prune with a 1 ms retention: %d, %v; want %d", got, err, n)
	}
	if err := e.pool.QueryRow(e.ctx, `SELECT count(*) FROM redisonce_inbox`).Scan(&total); err != nil || total != 0 {
		t.Fatalf("after Prune: %d rows, %v", total, err)
	}
}
