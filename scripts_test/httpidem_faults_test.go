package scripts_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redisonce/redisonce/httpidem"
	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/internal/redisproc"
	"github.com/redisonce/redisonce/store"
)

// idemReply is one response as a client saw it.
type idemReply struct {
	status  int
	body    string
	replay  string
	problem bool
	err     error
}

func idemPost(url, key string, timeout time.Duration) idemReply {
	req, _ := http.NewRequest("POST", url, strings.NewReader("amount=100"))
	req.Header.Set(httpidem.HeaderKey, key)
	resp, err := (&http.Client{Timeout: timeout}).Do(req)
	if err != nil {
		return idemReply{err: err}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return idemReply{status: resp.StatusCode, body: string(b), replay: resp.Header.Get(httpidem.HeaderReplayed),
		problem: resp.Header.Get("Content-Type") == httpidem.ProblemContentType}
}

// TestHTTPIdemOutage: Redis stops answering in the middle of the handler
// and stays away for longer than 5 s — paused (SIGSTOP), or killed and
// restarted on the same port (append-only file on) — while the handler
// finishes. The client gets its 201 once Redis is back (the response is
// stored, the lease kept meanwhile); a retry during the outage does not run
// the handler; every retry after it gets the 201 replayed: one charge.
func TestHTTPIdemOutage(t *testing.T) {
	for _, mode := range []string{"pause", "restart"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			srv := newServer(t, redisproc.Options{AppendOnly: true})
			c := newClient(t, srv.URL())
			rs := must.Store(store.NewRecords(c, store.WithPrefix(uniquePrefix(t))))
			var charges atomic.Int64
			started, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
			api := httptest.NewServer(mustMiddleware(t, rs, httpidem.WithSharedKeys(), httpidem.WithLogger(quiet))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := charges.Add(1)
				once.Do(func() { close(started) })
				<-release
				w.WriteHeader(http.StatusCreated)
				fmt.Fprintf(w, "charge %d", n)
			})))
			t.Cleanup(api.Close)
			first := make(chan idemReply, 1)
			go func() { first <- idemPost(api.URL, "pay-1", time.Minute) }()
			<-started
			do(t, c, "BGREWRITEAOF")
			time.Sleep(1500 * time.Millisecond) // the acquire on disk (appendfsync everysec)
			var err error
			if mode == "pause" {
				err = srv.Pause()
			} else {
				err = srv.Kill()
			}
			if err != nil {
				t.Fatal(err)
			}
			close(release) // the handler finishes while Redis is away
			during := idemPost(api.URL, "pay-1", 3*time.Second)
			time.Sleep(outage)
			if mode == "pause" {
				err = srv.Resume()
			} else {
				err = srv.Restart()
			}
			if err != nil {
				t.Fatal(err)
			}
			if r := <-first; r.err != nil || r.status != http.StatusCreated || r.body != "charge 1" {
				t.Fatalf("the first request across a %v %s: %+v, want its 201", outage, mode, r)
			}
			if during.err == nil && during.status != http.StatusServiceUnavailable && during.status != http.StatusConflict {
				t.Errorf("a retry during the outage: %+v, want 503, 409 or no answer", during)
			}
			for i := range 3 {
				r := idemPost(api.URL, "pay-1", 30*time.Second)
				if r.status != http.StatusCreated || r.body != "charge 1" || r.replay != "true" {
					t.Errorf("retry %d after the outage: %+v, want the 201 replayed", i, r)
				}
			}
			if n := charges.Load(); n != 1 {
				t.Errorf("%d charges, want 1", n)
			}
		})
	}
}

// TestHTTPIdemFullMemory: Redis fills up (maxmemory, noeviction) while two
// handlers run. The small response (under store.MaxSmallPayloadLen encoded)
// is stored anyway and replayed; the large one reaches its client, and every
// retry gets the not-replayable 500 problem. Neither handler runs again,
// though memory stays full.
func TestHTTPIdemFullMemory(t *testing.T) {
	t.Parallel()
	srv := newServer(t, redisproc.Options{MaxMemory: "8mb", MaxMemoryPolicy: "noeviction"})
	c := newClient(t, srv.URL())
	loadScripts(t, c) // SCRIPT LOAD is refused under OOM too
	rs := must.Store(store.NewRecords(c, store.WithPrefix(uniquePrefix(t))))
	large := strings.Repeat("L", 4<<10)
	var runs sync.Map // path -> *atomic.Int64
	var arrived sync.WaitGroup
	arrived.Add(2)
	goOn := make(chan struct{})
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	api := httptest.NewServer(mustMiddleware(t, rs, httpidem.WithSharedKeys(), httpidem.WithLogger(quiet))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, _ := runs.LoadOrStore(r.URL.Path, new(atomic.Int64))
		if v.(*atomic.Int64).Add(1) == 1 {
			arrived.Done()
			<-goOn
		}
		w.WriteHeader(http.StatusCreated)
		if r.URL.Path == "/large" {
			io.WriteString(w, large)
			return
		}
		io.WriteString(w, "charged")
	})))
	t.Cleanup(api.Close)
	small, big := make(chan idemReply, 1), make(chan idemReply, 1)
	go func() { small <- idemPost(api.URL+"/small", "s", time.Minute) }()
	go func() { big <- idemPost(api.URL+"/large", "l", time.Minute) }()
	arrived.Wait() // both keys acquired, both handlers running
	fillMemory(t, c)
	do(t, c, "CONFIG", "SET", "maxmemory", fmt.Sprint(usedMemory(t, c)/2))
	if _, _, err := rs.AcquireWith(context.Background(), "fresh", store.AcquireOptions{}); err == nil || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("acquire under full memory: %v; want OOM (the test checks nothing)", err)
	}
	close(goOn)
	if r := <-small; r.status != http.StatusCreated || r.body != "charged" {
		t.Errorf("small: %+v", r)
	}
	if r := <-big; r.status != http.StatusCreated || r.body != large {
		t.Errorf("large: status %d, %d bytes, %v", r.status, len(r.body), r.err)
	}
	for i := range 2 {
		if r := idemPost(api.URL+"/small", "s", 30*time.Second); r.status != http.StatusCreated || r.body != "charged" || r.replay != "true" {
			t.Errorf("small retry %d under full memory: %+v, want the 201 replayed", i, r)
		}
		if r := idemPost(api.URL+"/large", "l", 30*time.Second); r.status != http.StatusInternalServerError || !r.problem || !strings.Contains(r.body, "not replayed") {
			t.Errorf("large retry %d under full memory: %+v, want the not-replayable 500 problem", i, r)
		}
	}
	runs.Range(func(k, v any) bool {
		if n := v.(*atomic.Int64).Load(); n != 1 {
			t.Errorf("%s ran %d times, want 1", k, n)
		}
		return true
	})
}
