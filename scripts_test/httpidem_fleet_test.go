package scripts_test

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/httpidem"
	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/internal/redisproc"
	"github.com/redisonce/redisonce/store"
)

// TestHTTPIdemFleet: a payments API on two servers (each its own client)
// over one Redis, scoped by account (bearer tokens that rotate, and cookie
// sessions), probed at the edges: forged keys, a 5xx, panics after a write,
// a response over the limit and a streamed one, Redis paused for longer than
// 5 s under a running handler, a holder that dies mid-handler (its retries
// obeying Retry-After). Every key is retried on both servers; every key is
// charged exactly once, and no caller ever sees another's response.
func TestHTTPIdemFleet(t *testing.T) {
	t.Parallel()
	const lease = 12 * time.Second
	srv := newServer(t, redisproc.Options{})
	prefix := uniquePrefix(t)
	accounts := map[string]string{
		"Bearer alice-1": "alice", "Bearer alice-2": "alice", "session=alice-web": "alice",
		"Bearer bob-1": "bob", "session=bob-web": "bob",
	}
	account := func(r *http.Request) string {
		if c, err := r.Cookie("session"); err == nil {
			return accounts["session="+c.Value]
		}
		return accounts[r.Header.Get("Authorization")]
	}
	var mu sync.Mutex
	charges := map[string]int{} // account/key -> charges
	charge := func(r *http.Request) int {
		mu.Lock()
		defer mu.Unlock()
		k := account(r) + "/" + r.Header.Get(httpidem.HeaderKey)
		charges[k]++
		return charges[k]
	}
	slowStarted, slowRelease := make(chan struct{}, 1), make(chan struct{})
	hangStarted, hangKilled := make(chan struct{}, 1), make(chan struct{})
	var hangRuns atomic.Int64
	big := bytes.Repeat([]byte("b"), store.MaxRecordPayloadLen+10)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /pay", func(w http.ResponseWriter, r *http.Request) {
		n := charge(r)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"account":%q,"charge":%d}`, account(r), n)
	})
	mux.HandleFunc("POST /fail", func(w http.ResponseWriter, r *http.Request) {
		charge(r)
		w.WriteHeader(http.StatusBadGateway) // the charge went through, the receipt did not
	})
	mux.HandleFunc("POST /panic", func(w http.ResponseWriter, r *http.Request) {
		charge(r)
		w.WriteHeader(http.StatusCreated)
		panic(http.ErrAbortHandler)
	})
	mux.HandleFunc("POST /big", func(w http.ResponseWriter, r *http.Request) {
		charge(r)
		w.Write(big)
	})
	mux.HandleFunc("POST /stream", func(w http.ResponseWriter, r *http.Request) {
		charge(r)
		for range 20 {
			w.Write(big[:64<<10])
			w.(http.Flusher).Flush()
		}
	})
	mux.HandleFunc("POST /slow", func(w http.ResponseWriter, r *http.Request) {
		slowStarted <- struct{}{}
		<-slowRelease
		n := charge(r)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":%d}`, n)
	})
	mux.HandleFunc("POST /hang", func(w http.ResponseWriter, r *http.Request) {
		if hangRuns.Add(1) == 1 {
			hangStarted <- struct{}{}
			<-hangKilled // the server died before the charge
			return
		}
		n := charge(r)
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"charge":%d}`, n)
	})
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	newAPI := func(c rueidis.Client) string {
		rs := must.Store(store.NewRecords(c, store.WithPrefix(prefix)))
		api := httptest.NewUnstartedServer(mustMiddleware(t, rs, httpidem.WithScope(account), httpidem.WithLease(lease), httpidem.WithLogger(quiet))(mux))
		api.Config.ErrorLog = log.New(io.Discard, "", 0) // the panic probe's stack
		api.Start()
		t.Cleanup(api.Close)
		return api.URL
	}
	servers := []string{newAPI(newClient(t, srv.URL())), newAPI(newClient(t, srv.URL()))}
	type answer struct {
		status             int
		body, retryAfter   string
		replayed, answered bool
	}
	ask := func(server int, path, key, cred string, timeout time.Duration) answer {
		req, _ := http.NewRequest("POST", servers[server]+path, strings.NewReader("amount=100"))
		req.Header.Set(httpidem.HeaderKey, key)
		if strings.HasPrefix(cred, "session=") {
			req.Header.Set("Cookie", cred)
		} else if cred != "" {
			req.Header.Set("Authorization", cred)
		}
		resp, err := (&http.Client{Timeout: timeout}).Do(req)
		if err != nil {
			return answer{}
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return answer{resp.StatusCode, string(b), resp.Header.Get("Retry-After"), resp.Header.Get(httpidem.HeaderReplayed) == "true", true}
	}

	// Rotated tokens and cookie sessions of one account replay; the other
	// account runs its own; forged keys spelling the record keys reach nobody.
	first := ask(0, "/pay", "order-1", "Bearer alice-1", time.Minute)
	for i, cred := range []string{"Bearer alice-2", "session=alice-web", "Bearer alice-1"} {
		if a := ask(i%2, "/pay", "order-1", cred, time.Minute); a.body != first.body || !a.replayed {
			t.Errorf("alice with %q: %+v, want her replay of %q", cred, a, first.body)
		}
	}
	for _, cred := range []string{"Bearer bob-1", "session=bob-web", ""} {
		for _, key := range []string{"order-1", "s:alice:order-1", "alice:order-1", "k:order-1", "s::order-1"} {
			if a := ask(1, "/pay", key, cred, time.Minute); strings.Contains(a.body, "alice") {
				t.Errorf("%q with key %q got alice's response %+v", cred, key, a)
			}
		}
	}
	// Every edge, each retried on both servers.
	for _, path := range []string{"/fail", "/panic", "/big", "/stream"} {
		for try := range 4 {
			a := ask(try%2, path, "edge"+path, "Bearer bob-1", time.Minute)
			if try > 0 && (a.status == 0 || !a.replayed) {
				t.Errorf("%s retry %d: %+v, want the stored outcome replayed", path, try, a)
			}
		}
	}
	// Redis paused for longer than 5 s while a handler runs and finishes.
	slowDone := make(chan answer, 1)
	go func() { slowDone <- ask(0, "/slow", "slow-1", "Bearer alice-1", time.Minute) }()
	<-slowStarted
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	close(slowRelease)
	during := ask(1, "/slow", "slow-1", "Bearer alice-2", 2*time.Second)
	time.Sleep(6 * time.Second)
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	if a := <-slowDone; a.status != http.StatusCreated {
		t.Errorf("the request across the pause: %+v, want its 201", a)
	}
	if during.answered && during.status != http.StatusServiceUnavailable && during.status != http.StatusConflict {
		t.Errorf("a retry during the pause: %+v", during)
	}
	for try := range 2 {
		if a := ask(try%2, "/slow", "slow-1", "Bearer alice-2", time.Minute); a.status != http.StatusCreated || !a.replayed {
			t.Errorf("retry %d after the pause: %+v, want the 201 replayed", try, a)
		}
	}
	// A holder that dies mid-handler: its own client closes (no renewal, no
	// final write); the retries go to the other server, obeying Retry-After.
	deadClient := newClient(t, srv.URL())
	deadAPI := newAPI(deadClient)
	go func() {
		req, _ := http.NewRequest("POST", deadAPI+"/hang", strings.NewReader("amount=100"))
		req.Header.Set(httpidem.HeaderKey, "hang-1")
		req.Header.Set("Authorization", "Bearer bob-1")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	<-hangStarted
	deadClient.Close()
	defer close(hangKilled)
	retries := 0
	for {
		a := ask(retries%2, "/hang", "hang-1", "Bearer bob-1", time.Minute)
		if a.status == http.StatusCreated {
			break
		}
		ra, err := strconv.Atoi(a.retryAfter)
		if a.status != http.StatusConflict || err != nil || ra < 1 || time.Duration(ra)*time.Second > lease {
			t.Fatalf("a retry while the dead holder's lease runs: %+v, want 409 with Retry-After 1..%v", a, lease)
		}
		if retries++; retries > 3 {
			t.Fatalf("still 409 after %d retries obeying Retry-After", retries)
		}
		time.Sleep(time.Duration(ra) * time.Second)
	}
	if retries > 2 {
		t.Errorf("%d retries before the dead holder's key was free, want 1 or 2", retries)
	}
	mu.Lock()
	defer mu.Unlock()
	for k, n := range charges {
		if n != 1 {
			t.Errorf("%s charged %d times, want 1", k, n)
		}
	}
	if len(charges) < 6 {
		t.Errorf("%d keys charged, want every probe's: %v", len(charges), charges)
	}
}
