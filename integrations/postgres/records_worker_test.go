package postgres

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/httpidem"
	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
)

// The fault tests run the payments API below in a worker process — this
// test binary again, TestRecordsWorker with PGREC_WORKER set — so that a
// real SIGKILL or SIGSTOP can hit it at a chosen point.

// chargeHandler is the payments API: it inserts a charge with the request's
// transaction (Tx) and answers 201 with the charge's id. after, when not
// nil, runs after the insert, before the response.
func chargeHandler(charges string, after func(id int64)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, ok := Tx(r.Context())
		if !ok {
			http.Error(w, "no transaction in the request's context", http.StatusInternalServerError)
			return
		}
		var in struct {
			Amount int `json:"amount"`
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var id int64
		err := tx.QueryRow(r.Context(), `INSERT INTO `+charges+` (key, amount) VALUES ($1, $2) RETURNING id`,
			r.Header.Get(httpidem.HeaderKey), in.Amount).Scan(&id)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if after != nil {
			after(id)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":%d,"amount":%d}`, id, in.Amount)
	})
}

// paymentsServer serves chargeHandler through httpidem over s.
func paymentsServer(t *testing.T, s httpidem.Store, charges string, lease, wait time.Duration, after func(int64)) *httptest.Server {
	opts := []httpidem.Option{httpidem.WithSharedKeys(), httpidem.WithLease(lease)}
	if wait > 0 {
		opts = append(opts, httpidem.WithWait(wait))
	}
	mw, err := httpidem.Middleware(s, opts...)
	if err != nil {
		panic(err) // the options are fixed: a broken test
	}
	srv := httptest.NewServer(mw(chargeHandler(charges, after)))
	if t != nil {
		t.Cleanup(srv.Close)
	}
	return srv
}

// TestRecordsWorker is the worker process's main; it returns at once in a
// normal test run. PGREC_MODE says where it stops: kill-before-commit and
// kill-after-commit SIGKILL the process just before or just after fn's
// transaction commits (after: before the Redis record's final write);
// stall prints "inserted <id>" after the handler's insert and waits for a
// line on stdin before it answers.
func TestRecordsWorker(t *testing.T) {
	if os.Getenv("PGREC_WORKER") == "" {
		t.Skip("the worker process of the records fault tests")
	}
	ctx := context.Background()
	lease, _ := strconv.Atoi(os.Getenv("PGREC_LEASE_MS"))
	pool, err := pgxpool.New(ctx, os.Getenv("PGREC_PG"))
	if err != nil {
		fail(err)
	}
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{os.Getenv("PGREC_REDIS")}, DisableCache: true})
	if err != nil {
		fail(err)
	}
	s, err := NewRecords(must.Store(store.NewRecords(client, store.WithPrefix(os.Getenv("PGREC_PREFIX")))), pool, WithRecordsTable(os.Getenv("PGREC_TABLE")))
	if err != nil {
		fail(err)
	}
	var after func(int64)
	switch mode := os.Getenv("PGREC_MODE"); mode {
	case "kill-before-commit", "kill-after-commit":
		when := strings.TrimPrefix(strings.TrimSuffix(mode, "-commit"), "kill-")
		commitHook = func(_, w string) {
			if w == when {
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {}
			}
		}
	case "stall":
		stdin := bufio.NewReader(os.Stdin)
		after = func(id int64) {
			fmt.Printf("inserted %d\n", id)
			_, _ = stdin.ReadString('\n')
		}
	default:
		fail(fmt.Errorf("PGREC_MODE %q", mode))
	}
	srv := paymentsServer(nil, s, os.Getenv("PGREC_CHARGES"), time.Duration(lease)*time.Millisecond, 0, after)
	fmt.Printf("url %s\n", srv.URL)
	select {}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "worker:", err)
	os.Exit(2)
}

// worker is a running worker process.
type worker struct {
	cmd    *exec.Cmd
	url    string
	stdout *bufio.Reader
	stdin  io.WriteCloser
	done   chan error // cmd.Wait's result
}

// startWorker starts a worker process on e's servers, table and prefix.
func startWorker(t *testing.T, e *recEnv, charges, mode string, lease time.Duration) *worker {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestRecordsWorker$", "-test.timeout=5m")
	cmd.Env = append(os.Environ(), "PGREC_WORKER=1", "PGREC_MODE="+mode,
		"PGREC_PG="+e.pg.URL("postgres"), "PGREC_REDIS="+e.redis.Addr, "PGREC_PREFIX="+e.prefix,
		"PGREC_TABLE="+e.table, "PGREC_CHARGES="+charges, "PGREC_LEASE_MS="+strconv.FormatInt(lease.Milliseconds(), 10))
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &worker{cmd: cmd, stdout: bufio.NewReader(out), stdin: stdin, done: make(chan error, 1)}
	t.Cleanup(func() {
		_ = syscall.Kill(cmd.Process.Pid, syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-w.done
	})
	w.url = strings.TrimPrefix(w.line(t), "url ")
	go func() { w.done <- cmd.Wait() }()
	return w
}

// line reads the worker's next line of output (30 s at most).
func (w *worker) line(t *testing.T) string {
	t.Helper()
	c := make(chan string, 1)
	go func() {
		l, _ := w.stdout.ReadString('\n')
		c <- strings.TrimSpace(l)
	}()
	select {
	case l := <-c:
		if l == "" {
			t.Fatal("the worker ended without a line of output")
		}
		return l
	case <-time.After(30 * time.Second):
		t.Fatal("no line from the worker in 30 s")
		return ""
	}
}

// killedBySIGKILL waits for the worker's end and checks that SIGKILL ended it.
func (w *worker) killedBySIGKILL(t *testing.T) {
	t.Helper()
	select {
	case err := <-w.done:
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("worker ended with %v, want SIGKILL", err)
		}
		if ws, ok := ee.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("worker ended with %v, want SIGKILL", err)
		}
		w.done <- err // for the cleanup
	case <-time.After(30 * time.Second):
		t.Fatal("the worker did not end in 30 s")
	}
}

// response is what a client saw of one request.
type response struct {
	status   int
	replayed bool
	body     string
	err      error
}

// post sends the payments request for key to url.
func post(url, key string, amount int) response {
	req, _ := http.NewRequest(http.MethodPost, url+"/charges", strings.NewReader(fmt.Sprintf(`{"amount":%d}`, amount)))
	req.Header.Set(httpidem.HeaderKey, key)
	req.Header.Set("Content-Type", "application/json")
	c := &http.Client{Timeout: 60 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return response{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, replayed: resp.Header.Get(httpidem.HeaderReplayed) == "true", body: string(b), err: err}
}

// chargesTable creates e's charges table and returns its name.
func (e *recEnv) chargesTable(t *testing.T) string {
	t.Helper()
	name := "charges_" + strings.TrimPrefix(e.table, "records_")
	e.exec(t, `CREATE TABLE `+name+` (id bigserial PRIMARY KEY, key text NOT NULL, amount int NOT NULL)`)
	return name
}

// charges returns the ids of the charges for key, in order.
func (e *recEnv) charges(t *testing.T, table, key string) []int64 {
	t.Helper()
	rows, err := e.pool.Query(context.Background(), `SELECT id FROM `+table+` WHERE key = $1 ORDER BY id`, key)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ids []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return ids
}

// chargeBody is the body chargeHandler answers for charge id.
func chargeBody(id int64, amount int) string {
	return fmt.Sprintf(`{"charge":%d,"amount":%d}`, id, amount)
}
