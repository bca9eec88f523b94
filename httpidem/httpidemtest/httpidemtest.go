// Package httpidemtest checks httpidem's middleware over a
// *store.Records, on a real net/http server: the same suite runs on the
// in-memory store (package httpidem's tests) and on Redis (scripts_test), and
// a user can run it on a store of their own, as store/storetest does
// for the store. It covers replays (status, headers, body), 422 for another
// request under a key (query string included), 409 with a short Retry-After,
// WithWait (duplicates answered by the push, the handler run once), a client
// that times out or hangs up (its response kept and replayed, one run),
// WithCancelOnDisconnect and WithShutdown, callers who share a key value
// under WithScope and under the default credential scope (no cross replay,
// no 422), responses not stored (5xx, panic, too large, streamed,
// nothing written) and their events, keys quoted or bare, and problem types.
// A store's Do must honour store.AcquireOptions.Wait for the WithWait tests.
package httpidemtest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
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

	"github.com/redisonce/redisonce/httpidem"
	"github.com/redisonce/redisonce/store"
)

// Harness tells TestMiddleware how to make a store under test.
type Harness struct {
	// New returns an empty store, isolated from every other store New
	// returns (a fresh prefix, say). The suite closes it.
	New func(t *testing.T) *store.Records
}

// reply is one response as a client saw it.
type reply struct {
	status int
	header http.Header
	body   string
}

func (r reply) String() string {
	return fmt.Sprintf("%d %v %q", r.status, r.header, r.body)
}

// server runs handler behind the middleware on a real net/http server.
type server struct {
	t    *testing.T
	url  string
	runs atomic.Int64
	rs   *store.Records
}

func newServer(t *testing.T, h Harness, handler http.HandlerFunc, opts ...httpidem.Option) *server {
	t.Helper()
	rs := h.New(t)
	t.Cleanup(func() { rs.Close() })
	s := &server{t: t, rs: rs}
	counted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.runs.Add(1)
		handler(w, r)
	})
	mux := http.NewServeMux()
	// Shared keys unless a test scopes them: the record key is the header
	// value, which the tests read back from the store.
	mux.Handle("/", httpidem.Middleware(rs, append([]httpidem.Option{httpidem.WithSharedKeys()}, opts...)...)(counted))
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the panic test's stack
	srv.Start()
	t.Cleanup(srv.Close)
	s.url = srv.URL
	return s
}

// client is the suite's HTTP client: a server that never answers fails the
// test after 30 s instead of hanging it.
var client = &http.Client{Timeout: 30 * time.Second}

// userScope is the suite's scope: the caller named by the X-User header
// (the tests' stand-in for an authenticated identity).
func userScope(r *http.Request) string { return r.Header.Get("X-User") }

// do sends one request; key "" sends no Idempotency-Key.
func (s *server) do(method, path, key, body string) reply {
	s.t.Helper()
	req, err := http.NewRequest(method, s.url+path, strings.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	if key != "" {
		req.Header.Set(httpidem.HeaderKey, key)
	}
	resp, err := client.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatalf("%s %s: reading the body: %v", method, path, err)
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// retry409 sends the request until it is not answered 409 (the first try's
// handler still running), at most 200 times 10 ms apart.
func (s *server) retry409(method, path, key, body string) reply {
	s.t.Helper()
	var r reply
	for range 200 {
		if r = s.do(method, path, key, body); r.status != http.StatusConflict {
			return r
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.t.Fatalf("still 409 after 200 tries: %s", r)
	return r
}

func (s *server) wantRuns(n int64) {
	s.t.Helper()
	if got := s.runs.Load(); got != n {
		s.t.Errorf("the handler ran %d times, want %d", got, n)
	}
}

func wantReplayed(t *testing.T, r reply, replayed bool) {
	t.Helper()
	got := r.header.Get(httpidem.HeaderReplayed)
	if replayed && got != "true" {
		t.Errorf("%s: %s = %q, want \"true\"", r, httpidem.HeaderReplayed, got)
	}
	if !replayed && len(r.header.Values(httpidem.HeaderReplayed)) != 0 {
		t.Errorf("%s: has %s, want none", r, httpidem.HeaderReplayed)
	}
}

// wantProblem checks an RFC 9457 problem+json answer.
func wantProblem(t *testing.T, r reply, status int) httpidem.Problem {
	t.Helper()
	if r.status != status {
		t.Errorf("status %d, want %d (%s)", r.status, status, r)
	}
	if ct := r.header.Get("Content-Type"); ct != httpidem.ProblemContentType {
		t.Errorf("Content-Type %q, want %q", ct, httpidem.ProblemContentType)
	}
	var p httpidem.Problem
	if err := json.Unmarshal([]byte(r.body), &p); err != nil {
		t.Fatalf("problem body %q: %v", r.body, err)
	}
	if p.Status != status || p.Type == "" || p.Title == "" || p.Detail == "" {
		t.Errorf("problem %+v, want status %d, a type, a title and a detail", p, status)
	}
	return p
}

// created is a handler answering 201 with headers and a body.
func created(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Order", "o-1")
	w.Header().Add("Link", "</a>; rel=a")
	w.Header().Add("Link", "</b>; rel=b")
	w.Header().Set("Set-Cookie", "session=secret")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"order":"o-1","request":%q}`, body)
}

// TestMiddleware runs the suite.
func TestMiddleware(t *testing.T, h Harness) {
	t.Run("ReplaysStatusHeadersBody", func(t *testing.T) {
		s := newServer(t, h, created)
		first := s.do("POST", "/orders", "k1", `{"amount":10}`)
		if first.status != http.StatusCreated || first.body != `{"order":"o-1","request":"{\"amount\":10}"}` {
			t.Fatalf("first response %s", first)
		}
		wantReplayed(t, first, false)
		if first.header.Get("Set-Cookie") == "" {
			t.Error("the first response lost its Set-Cookie")
		}
		for i := range 2 {
			again := s.do("POST", "/orders", "k1", `{"amount":10}`)
			if again.status != first.status || again.body != first.body {
				t.Errorf("retry %d: %s, want %s", i, again, first)
			}
			for _, name := range []string{"Content-Type", "X-Order", "Link", "Content-Length"} {
				if got, want := again.header.Values(name), first.header.Values(name); fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("retry %d: %s = %q, want %q", i, name, got, want)
				}
			}
			if again.header.Get("Set-Cookie") != "" {
				t.Errorf("retry %d: Set-Cookie was replayed", i)
			}
			wantReplayed(t, again, true)
		}
		s.wantRuns(1)
	})

	t.Run("BodyReachesHandlerIntact", func(t *testing.T) {
		var got []string
		var mu sync.Mutex
		s := newServer(t, h, func(w http.ResponseWriter, r *http.Request) {
			b, err := io.ReadAll(r.Body)
			if err != nil {
				t.Errorf("reading the body in the handler: %v", err)
			}
			mu.Lock()
			got = append(got, string(b))
			mu.Unlock()
			w.Write(b)
		})
		big := strings.Repeat("0123456789", 100_000) // 1 MB, more than one read
		r := s.do("POST", "/echo", "k", big)
		if r.body != big || len(got) != 1 || got[0] != big {
			t.Errorf("the handler got %d bodies (lengths %v) and answered %d bytes, want the %d-byte body once", len(got), lens(got), len(r.body), len(big))
		}
	})

	t.Run("OtherRequestSameKey422", func(t *testing.T) {
		s := newServer(t, h, created)
		if r := s.do("POST", "/orders", "k", "a"); r.status != http.StatusCreated {
			t.Fatalf("first %s", r)
		}
		p := wantProblem(t, s.do("POST", "/orders", "k", "b"), http.StatusUnprocessableEntity)
		if p.Header != httpidem.HeaderKey {
			t.Errorf("problem names header %q, want %q", p.Header, httpidem.HeaderKey)
		}
		wantProblem(t, s.do("POST", "/other", "k", "a"), http.StatusUnprocessableEntity)
		wantProblem(t, s.do("PATCH", "/orders", "k", "a"), http.StatusUnprocessableEntity)
		s.wantRuns(1)
		if r := s.do("POST", "/orders", "k", "a"); r.status != http.StatusCreated {
			t.Errorf("the original request after a mismatch: %s", r)
		}
		s.wantRuns(1)
	})

	t.Run("ConcurrentRetry409", func(t *testing.T) {
		started, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		s := newServer(t, h, func(w http.ResponseWriter, r *http.Request) {
			once.Do(func() { close(started) })
			<-release
			w.WriteHeader(http.StatusAccepted)
			io.WriteString(w, "done")
		}, httpidem.WithLease(5*time.Second))
		firstDone := make(chan reply, 1)
		go func() { firstDone <- s.do("POST", "/slow", "k", "x") }()
		<-started
		r := s.do("POST", "/slow", "k", "x")
		wantProblem(t, r, http.StatusConflict)
		ra, err := strconv.Atoi(r.header.Get("Retry-After"))
		if err != nil || ra < 1 || ra > 5 {
			t.Errorf("Retry-After %q, want whole seconds in 1..5 (the lease)", r.header.Get("Retry-After"))
		}
		close(release)
		if first := <-firstDone; first.status != http.StatusAccepted || first.body != "done" {
			t.Errorf("first %s", first)
		}
		again := s.do("POST", "/slow", "k", "x")
		if again.status != http.StatusAccepted || again.body != "done" {
			t.Errorf("retry after the first finished: %s", again)
		}
		wantReplayed(t, again, true)
		s.wantRuns(1)
	})

	t.Run("5xxNotStored", func(t *testing.T) {
		var n atomic.Int64
		s := newServer(t, h, func(w http.ResponseWriter, r *http.Request) {
			if n.Add(1) == 1 {
				w.Header().Set("Retry-After", "3")
				w.WriteHeader(http.StatusServiceUnavailable)
				io.WriteString(w, "provider down")
				return
			}
			w.WriteHeader(http.StatusOK)
			io.WriteString(w, "paid")
		})
		first := s.do("POST", "/pay", "k", "x")
		if first.status != http.StatusServiceUnavailable || first.body != "provider down" || first.header.Get("Retry-After") != "3" {
			t.Errorf("the 503 did not reach the client as written: %s", first)
		}
		wantReplayed(t, first, false)
		second := s.do("POST", "/pay", "k", "x")
		if second.status != http.StatusOK || second.body != "paid" {
			t.Errorf("retry after a 503: %s, want the handler to run again", second)
		}
		wantReplayed(t, second, false)
		third := s.do("POST", "/pay", "k", "x")
		if third.status != http.StatusOK || third.body != "paid" {
			t.Errorf("third %s", third)
		}
		wantReplayed(t, third, true)
		s.wantRuns(2)
	})

	t.Run("4xxReplayed", func(t *testing.T) {
		s := newServer(t, h, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, "amount missing")
		})
		first := s.do("POST", "/pay", "k", "")
		again := s.do("POST", "/pay", "k", "")
		if first.status != http.StatusBadRequest || again.status != http.StatusBadRequest || again.body != "amount missing" || again.header.Get("Content-Type") != "text/plain" {
			t.Errorf("first %s, retry %s", first, again)
		}
		wantReplayed(t, first, false)
		wantReplayed(t, again, true)
		s.wantRuns(1)
	})

	t.Run("EmptyResponseReplayed", func(t *testing.T) {
		// A status written without a body is a response: stored, replayed.
		s := newServer(t, h, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
		first := s.do("POST", "/noop", "k", "")
		again := s.do("POST", "/noop", "k", "")
		if first.status != http.StatusNoContent || again.status != http.StatusNoContent || again.body != "" {
			t.Errorf("first %s, retry %s", first, again)
		}
		wantReplayed(t, again, true)
		s.wantRuns(1)
	})

	t.Run("NoKeyAndGETPassThrough", func(t *testing.T) {
		s := newServer(t, h, created)
		for i, req := range []struct{ method, key string }{
			{"POST", ""}, {"POST", ""}, {"GET", "k"}, {"GET", "k"}, {"PUT", "k"}, {"DELETE", "k"},
		} {
			r := s.do(req.method, "/orders", req.key, "")
			if r.status != http.StatusCreated {
				t.Errorf("request %d (%s, key %q): %s", i, req.method, req.key, r)
			}
			wantReplayed(t, r, false)
		}
		s.wantRuns(6)
		if _, ok, err := s.rs.Get(context.Background(), "k"); ok || err != nil {
			t.Errorf("a GET with a key left a record (found %v, err %v)", ok, err)
		}
	})

	t.Run("RequiredKey", func(t *testing.T) {
		s := newServer(t, h, created, httpidem.WithRequireKey(true))
		p := wantProblem(t, s.do("POST", "/orders", "", "x"), http.StatusBadRequest)
		if p.Header != httpidem.HeaderKey || !strings.Contains(p.Detail, httpidem.HeaderKey) {
			t.Errorf("problem %+v does not name the header %s", p, httpidem.HeaderKey)
		}
		if r := s.do("GET", "/orders", "", ""); r.status != http.StatusCreated {
			t.Errorf("a GET without a key: %s", r)
		}
		s.wantRuns(1)
	})

	t.Run("BadKey400", func(t *testing.T) {
		s := newServer(t, h, created)
		for _, key := range []string{strings.Repeat("k", 256), "tab\there", "caf\u00e9"} {
			req, _ := http.NewRequest("POST", s.url+"/orders", nil)
			req.Header[httpidem.HeaderKey] = []string{key}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			wantProblem(t, reply{resp.StatusCode, resp.Header, string(b)}, http.StatusBadRequest)
		}
		if r := s.do("POST", "/orders", strings.Repeat("k", 255), "x"); r.status != http.StatusCreated {
			t.Errorf("a 255-byte key: %s", r)
		}
		s.wantRuns(1)
	})

	t.Run("KeyQuotedOrBare", func(t *testing.T) {
		// The draft's sf-string ("k-1") and Stripe's bare token (k-1) are
		// one key; a malformed quoted string is 400.
		s := newServer(t, h, created)
		first := s.do("POST", "/orders", `"k-1"`, "x")
		again := s.do("POST", "/orders", "k-1", "x")
		escaped := s.do("POST", "/orders", `"k\-1"`, "x")
		if first.status != http.StatusCreated || again.status != http.StatusCreated || again.body != first.body {
			t.Errorf("quoted %s, then bare %s: want one key", first, again)
		}
		wantReplayed(t, first, false)
		wantReplayed(t, again, true)
		wantProblem(t, escaped, http.StatusBadRequest) // \- is no sf-string escape
		if r := s.do("POST", "/orders", `"say \"hi\""`, "x"); r.status != http.StatusCreated {
			t.Errorf("a quoted key with escaped quotes: %s", r)
		}
		for _, bad := range []string{`"open`, `"a"b`, `""`} {
			wantProblem(t, s.do("POST", "/orders", bad, "x"), http.StatusBadRequest)
		}
		s.wantRuns(2)
	})

	t.Run("ProblemType", func(t *testing.T) {
		// WithProblemType: every problem the middleware answers with points
		// at the user's docs.
		const docs = "https://api.example.com/docs/idempotency"
		started, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		s := newServer(t, h, func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" {
				once.Do(func() { close(started) })
				<-release
			}
			w.WriteHeader(http.StatusCreated)
		}, httpidem.WithProblemType(docs), httpidem.WithRequireKey(true))
		done := make(chan reply, 1)
		go func() { done <- s.do("POST", "/slow", "k", "x") }()
		<-started
		for _, c := range []struct {
			r      reply
			status int
		}{
			{s.do("POST", "/slow", "k", "x"), http.StatusConflict},
			{s.do("POST", "/slow", "k", "y"), http.StatusUnprocessableEntity},
			{s.do("POST", "/slow", "", "x"), http.StatusBadRequest},
			{s.do("POST", "/slow", `"bad`, "x"), http.StatusBadRequest},
		} {
			if p := wantProblem(t, c.r, c.status); p.Type != docs {
				t.Errorf("%d problem type %q, want %q", c.status, p.Type, docs)
			}
		}
		close(release)
		<-done
	})

	t.Run("BodyCap413", func(t *testing.T) {
		s := newServer(t, h, created, httpidem.WithMaxBody(10))
		wantProblem(t, s.do("POST", "/orders", "k", "01234567890"), http.StatusRequestEntityTooLarge)
		if r := s.do("POST", "/orders", "k", "0123456789"); r.status != http.StatusCreated {
			t.Errorf("a body at the cap: %s", r)
		}
		s.wantRuns(1)
	})

	t.Run("ScopedKeys", func(t *testing.T) {
		s := newServer(t, h, func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "hello "+r.Header.Get("X-User"))
		}, httpidem.WithScope(func(r *http.Request) string { return r.Header.Get("X-User") }))
		ask := func(user string) reply {
			req, _ := http.NewRequest("POST", s.url+"/", strings.NewReader("x"))
			req.Header.Set(httpidem.HeaderKey, "same")
			req.Header.Set("X-User", user)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return reply{resp.StatusCode, resp.Header, string(b)}
		}
		for range 2 {
			for _, u := range []string{"ann", "bob", "a:b"} {
				if r := ask(u); r.body != "hello "+u {
					t.Errorf("user %s: %s", u, r)
				}
			}
		}
		s.wantRuns(3)
	})

	t.Run("TooLargeSentNotStored", func(t *testing.T) {
		big := bytes.Repeat([]byte("x"), store.MaxRecordPayloadLen+1)
		s := newServer(t, h, func(w http.ResponseWriter, r *http.Request) {
			w.Write(big[:1000])
			w.Write(big[1000:])
		})
		for range 2 {
			r := s.do("POST", "/big", "k", "")
			if r.status != http.StatusOK || r.body != string(big) {
				t.Errorf("status %d, %d bytes, want 200 and %d bytes", r.status, len(r.body), len(big))
			}
			wantReplayed(t, r, false)
		}
		s.wantRuns(2)
		if _, ok, err := s.rs.Get(context.Background(), "k"); ok || err != nil {
			t.Errorf("a record is left (found %v, err %v), want it released", ok, err)
		}
	})

	t.Run("FlushPassesThroughUnstored", func(t *testing.T) {
		s := newServer(t, h, func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "part 1,")
			w.(http.Flusher).Flush()
			io.WriteString(w, "part 2")
		})
		for range 2 {
			if r := s.do("POST", "/stream", "k", ""); r.status != http.StatusOK || r.body != "part 1,part 2" {
				t.Errorf("stream %s", r)
			}
		}
		s.wantRuns(2)
	})

	t.Run("PanicNotStored", func(t *testing.T) {
		var n atomic.Int64
		rs := h.New(t)
		t.Cleanup(func() { rs.Close() })
		quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
		mw := httpidem.Middleware(rs, httpidem.WithSharedKeys(), httpidem.WithLogger(quiet))(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if n.Add(1) == 1 {
				w.WriteHeader(http.StatusCreated)
				panic("boom")
			}
			w.WriteHeader(http.StatusCreated)
		}))
		serve := func() (rec *httptest.ResponseRecorder, recovered any) {
			defer func() { recovered = recover() }()
			rec = httptest.NewRecorder()
			req := httptest.NewRequest("POST", "/p", strings.NewReader("x"))
			req.Header.Set(httpidem.HeaderKey, "k")
			mw.ServeHTTP(rec, req)
			return rec, nil
		}
		if _, p := serve(); p != "boom" {
			t.Fatalf("the panic became %v, want it to go on as \"boom\"", p)
		}
		if _, ok, err := rs.Get(context.Background(), "k"); ok || err != nil {
			t.Errorf("after the panic a record is left (found %v, err %v)", ok, err)
		}
		rec, p := serve()
		if p != nil || rec.Code != http.StatusCreated || rec.Header().Get(httpidem.HeaderReplayed) != "" {
			t.Errorf("retry after a panic: %d %v (panic %v), want the handler to run again", rec.Code, rec.Header(), p)
		}
		if n.Load() != 2 {
			t.Errorf("the handler ran %d times, want 2", n.Load())
		}
	})

	t.Run("CancelOnDisconnect", func(t *testing.T) {
		// WithCancelOnDisconnect: the hang-up cancels the handler's context;
		// a handler that then writes nothing stores nothing (the retry runs
		// it again), one that writes a status has it stored all the same.
		var n atomic.Int64
		sawCancel := make(chan time.Duration, 2)
		inside := make(chan struct{}, 2)
		s := newServer(t, h, func(w http.ResponseWriter, r *http.Request) {
			k := n.Add(1)
			if k > 2 {
				w.WriteHeader(http.StatusTeapot) // only the replay may answer now
				return
			}
			inside <- struct{}{}
			t0 := time.Now()
			select {
			case <-r.Context().Done():
				sawCancel <- time.Since(t0)
			case <-time.After(5 * time.Second):
				sawCancel <- -1
			}
			if k == 2 {
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, "made after the hang-up")
			}
		}, httpidem.WithCancelOnDisconnect())
		// hangUp sends a request and hangs up once the handler runs. A
		// request answered before it reaches the handler (409: the previous
		// hang-up's record is still being given back) is sent again, at most
		// 200 times 10 ms apart.
		hangUp := func() {
			t.Helper()
			for range 200 {
				ctx, cancel := context.WithCancel(context.Background())
				errc := make(chan error, 1)
				go func() {
					req, _ := http.NewRequestWithContext(ctx, "POST", s.url+"/p", strings.NewReader("x"))
					req.Header.Set(httpidem.HeaderKey, "k")
					resp, err := client.Do(req)
					if err == nil {
						resp.Body.Close()
					}
					errc <- err
				}()
				select {
				case <-inside:
					cancel()
					<-errc
					if d := <-sawCancel; d < 0 {
						t.Error("the handler's context did not end within 5 s of the hang-up")
					}
					return
				case <-errc:
					cancel()
					time.Sleep(10 * time.Millisecond)
				}
			}
			t.Fatal("the request never reached the handler in 200 tries")
		}
		hangUp() // writes nothing: not stored
		hangUp() // runs again, writes 201 after the hang-up: stored
		r := s.retry409("POST", "/p", "k", "x")
		if r.status != http.StatusCreated || r.body != "made after the hang-up" {
			t.Errorf("retry: %s, want the stored 201", r)
		}
		wantReplayed(t, r, true)
		s.wantRuns(2)
	})

	t.Run("ShutdownEndsHandler", func(t *testing.T) {
		// WithShutdown: the detached handler's context ends with the
		// shutdown context's cause.
		down, shut := context.WithCancelCause(context.Background())
		errShutdown := fmt.Errorf("server stopping")
		inside, cause := make(chan struct{}), make(chan error, 1)
		s := newServer(t, h, func(w http.ResponseWriter, r *http.Request) {
			close(inside)
			select {
			case <-r.Context().Done():
				cause <- context.Cause(r.Context())
			case <-time.After(5 * time.Second):
				cause <- nil
			}
			w.WriteHeader(http.StatusServiceUnavailable)
		}, httpidem.WithShutdown(down))
		done := make(chan reply, 1)
		go func() { done <- s.do("POST", "/p", "k", "x") }()
		<-inside
		shut(errShutdown)
		if c := <-cause; c != errShutdown {
			t.Errorf("the handler's context ended with %v, want the shutdown's cause", c)
		}
		if r := <-done; r.status != http.StatusServiceUnavailable {
			t.Errorf("%s, want the handler's 503", r)
		}
	})

	t.Run("DefaultScopeIsTheCredential", func(t *testing.T) {
		// Middleware with no scope option: callers with other credentials
		// (Authorization, here Basic and Bearer) never meet under one key
		// value — no replay of another's response, no 422 oracle — while a
		// caller's retry with the same credentials, and an anonymous caller's
		// retry, replay.
		rs := h.New(t)
		t.Cleanup(func() { rs.Close() })
		var runs atomic.Int64
		srv := httptest.NewServer(httpidem.Middleware(rs)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n := runs.Add(1)
			body, _ := io.ReadAll(r.Body)
			w.Header().Set("X-Download-Token", fmt.Sprintf("secret-%d", n))
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"run":%d,"auth":%q,"body":%q}`, n, r.Header.Get("Authorization"), body)
		})))
		t.Cleanup(srv.Close)
		ask := func(auth, body string) reply {
			req, _ := http.NewRequest("POST", srv.URL+"/accounts", strings.NewReader(body))
			req.Header.Set(httpidem.HeaderKey, "shared-key")
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return reply{resp.StatusCode, resp.Header, string(b)}
		}
		alice := "Basic " + base64.StdEncoding.EncodeToString([]byte("alice:pw"))
		a := ask(alice, "iban=1")
		if a.status != http.StatusCreated {
			t.Fatalf("alice: %s", a)
		}
		for _, c := range []struct{ auth, body string }{
			{"Basic " + base64.StdEncoding.EncodeToString([]byte("bob:pw")), "iban=1"},
			{"Bearer carol-token", "iban=2"},
			{"", "iban=1"}, // anonymous: not alice either
		} {
			r := ask(c.auth, c.body)
			if r.status != http.StatusCreated || r.body == a.body || r.header.Get("X-Download-Token") == a.header.Get("X-Download-Token") {
				t.Errorf("%q with alice's key and body %q: %s, want a 201 of their own", c.auth, c.body, r)
			}
			wantReplayed(t, r, false)
		}
		if again := ask(alice, "iban=1"); again.body != a.body || again.header.Get(httpidem.HeaderReplayed) != "true" {
			t.Errorf("alice's retry: %s, want her own replay %q", again, a.body)
		}
		if anon := ask("", "iban=1"); anon.header.Get(httpidem.HeaderReplayed) != "true" || anon.status != http.StatusCreated {
			t.Errorf("an anonymous retry: %s, want the anonymous first response replayed", anon)
		}
		if got := runs.Load(); got != 4 {
			t.Errorf("the handler ran %d times, want 4 (alice, bob, carol, anonymous)", got)
		}
	})

	t.Run("CrossCallerNoReplayNo422", func(t *testing.T) {
		// Two callers, one key value: B never gets A's response, with the
		// same request or another one (no 422 telling B the key is in use).
		s := newServer(t, h, func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			w.Header().Set("X-Download-Token", "secret-of-"+r.Header.Get("X-User"))
			w.WriteHeader(http.StatusCreated)
			fmt.Fprintf(w, `{"owner":%q,"body":%q}`, r.Header.Get("X-User"), body)
		}, httpidem.WithScope(userScope))
		ask := func(user, body string) reply {
			req, _ := http.NewRequest("POST", s.url+"/accounts", strings.NewReader(body))
			req.Header.Set(httpidem.HeaderKey, "shared-key")
			req.Header.Set("X-User", user)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return reply{resp.StatusCode, resp.Header, string(b)}
		}
		a := ask("alice", "iban=1")
		// bob: alice's key with her very request; carol: with another body
		for _, c := range []struct{ user, body string }{{"bob", "iban=1"}, {"carol", "iban=2"}} {
			r := ask(c.user, c.body)
			if r.status != http.StatusCreated || strings.Contains(r.body, "alice") || strings.Contains(r.header.Get("X-Download-Token"), "alice") {
				t.Errorf("%s with alice's key and body %q: %s, want a 201 of their own", c.user, c.body, r)
			}
			wantReplayed(t, r, false)
		}
		if again := ask("alice", "iban=1"); again.body != a.body || again.header.Get(httpidem.HeaderReplayed) != "true" {
			t.Errorf("alice's retry: %s, want her own replay %q", again, a.body)
		}
		s.wantRuns(3)
	})

	t.Run("NotStoredReported", func(t *testing.T) {
		// Every response sent but not stored is an observer event and a log line.
		var mu sync.Mutex
		var events []store.Event
		obs := store.ObserverFunc(func(_ context.Context, e store.Event) {
			mu.Lock()
			events = append(events, e)
			mu.Unlock()
		})
		var logs bytes.Buffer
		var logMu sync.Mutex
		logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &logMu}, nil))
		big := bytes.Repeat([]byte("x"), store.MaxRecordPayloadLen+1)
		s := newServer(t, h, func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/5xx":
				w.WriteHeader(http.StatusBadGateway)
			case "/big":
				w.Write(big)
			case "/flush":
				w.(http.Flusher).Flush()
			case "/nothing":
			}
		}, httpidem.WithObserver(obs), httpidem.WithLogger(logger))
		cases := map[string]error{"/5xx": httpidem.ErrServerError, "/big": httpidem.ErrTooLarge, "/flush": httpidem.ErrStreamed, "/nothing": httpidem.ErrNothingWritten}
		for path := range cases {
			s.do("POST", path, "k"+path, "")
		}
		mu.Lock()
		defer mu.Unlock()
		if len(events) != len(cases) {
			t.Errorf("%d events, want %d: %+v", len(events), len(cases), events)
		}
		for _, e := range events {
			path := strings.TrimPrefix(e.Key, "k")
			want, ok := cases[path]
			if !ok || e.Store != "httpidem" || e.Op != "respond" || e.Outcome != httpidem.OutcomeNotStored || !errors.Is(e.Err, want) || !errors.Is(e.Err, httpidem.ErrNotStored) {
				t.Errorf("event %+v, want httpidem/respond/not_stored with %v", e, want)
			}
		}
		logMu.Lock()
		defer logMu.Unlock()
		if n := strings.Count(logs.String(), "level=WARN msg=\"httpidem: response sent but not stored"); n != len(cases) {
			t.Errorf("%d warnings of a response not stored, want %d:\n%s", n, len(cases), logs.String())
		}
	})

	t.Run("LogsNoKey", func(t *testing.T) {
		// Keys can carry user data: the middleware's log lines (a response
		// not stored, a failed record, an unreadable stored response) name
		// neither the key nor an error text quoting it, unless WithLogKey.
		ctx := context.Background()
		for _, withKey := range []bool{false, true} {
			var logs bytes.Buffer
			var logMu sync.Mutex
			logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &logMu}, nil))
			opts := []httpidem.Option{httpidem.WithLogger(logger), httpidem.WithFingerprint(nil)}
			if withKey {
				opts = append(opts, httpidem.WithLogKey())
			}
			s := newServer(t, h, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusBadGateway)
			}, opts...)
			const user = "alice@example.com-order-7"
			// a 5xx: sent, not stored (Warn)
			s.do("POST", "/5xx", user+"-5xx", "")
			// a failed record (Error, with the store's error quoting the key)
			failed, done := store.StatusFailed, store.StatusCompleted
			for _, seed := range []struct {
				key     string
				status  *store.Status
				payload []byte
			}{{user + "-failed", &failed, []byte("declined")}, {user + "-corrupt", &done, []byte("garbage")}} {
				if _, _, err := s.rs.AcquireWith(ctx, seed.key, store.AcquireOptions{}); err != nil {
					t.Fatal(err)
				}
				if err := s.rs.Update(ctx, seed.key, store.Update{Status: seed.status, Payload: &seed.payload}); err != nil {
					t.Fatal(err)
				}
				wantProblem(t, s.do("POST", "/x", seed.key, ""), http.StatusInternalServerError)
			}
			logMu.Lock()
			text := logs.String()
			logMu.Unlock()
			if n := strings.Count(text, "\n"); n != 3 {
				t.Errorf("WithLogKey %v: %d log lines, want 3 (not stored, failed, unreadable):\n%s", withKey, n, text)
			}
			if got := strings.Count(text, user); withKey && got < 3 || !withKey && got != 0 {
				t.Errorf("WithLogKey %v: the key appears %d times in the log:\n%s", withKey, got, text)
			}
		}
	})

	t.Run("WaitReplaysToDuplicates", func(t *testing.T) {
		// WithWait: 6 duplicates arrive while the first runs; the handler
		// finishes 1.1 s after they began waiting (just after the store's
		// first bounded re-read, 1 s), so each must be answered by the push,
		// within 600 ms, long before the next re-read: the first's response,
		// replayed, identical. The handler runs once.
		started, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		s := newServer(t, h, func(w http.ResponseWriter, r *http.Request) {
			once.Do(func() { close(started) })
			<-release
			w.Header().Set("X-Charge", "ch_1")
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"charge":"ch_1"}`)
		}, httpidem.WithWait(10*time.Second))
		firstc := make(chan reply, 1)
		go func() { firstc <- s.do("POST", "/charges", "k", "amount=10") }()
		<-started
		const n = 6
		replies := make([]reply, n)
		at := make([]time.Time, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				replies[i] = s.do("POST", "/charges", "k", "amount=10")
				at[i] = time.Now()
			}()
		}
		time.Sleep(1100 * time.Millisecond)
		released := time.Now()
		close(release)
		wg.Wait()
		first := <-firstc
		if first.status != http.StatusCreated {
			t.Fatalf("first %s", first)
		}
		for i, r := range replies {
			if r.status != first.status || r.body != first.body || r.header.Get("X-Charge") != "ch_1" {
				t.Errorf("duplicate %d: %s, want the first's %s", i, r, first)
			}
			wantReplayed(t, r, true)
			if lat := at[i].Sub(released); lat > 600*time.Millisecond {
				t.Errorf("duplicate %d answered %v after the handler finished, want within 600 ms (pushed)", i, lat)
			}
		}
		s.wantRuns(1)
	})

	t.Run("WaitRunsOut409", func(t *testing.T) {
		// WithWait(300 ms) and a handler of 2 s: the duplicate waits 300 ms,
		// then is told 409 with the short Retry-After hint.
		started, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		s := newServer(t, h, func(w http.ResponseWriter, r *http.Request) {
			once.Do(func() { close(started) })
			<-release
			w.WriteHeader(http.StatusCreated)
		}, httpidem.WithWait(300*time.Millisecond))
		done := make(chan reply, 1)
		go func() { done <- s.do("POST", "/slow", "k", "x") }()
		<-started
		t0 := time.Now()
		r := s.do("POST", "/slow", "k", "x")
		took := time.Since(t0)
		close(release)
		wantProblem(t, r, http.StatusConflict)
		if got := r.header.Get("Retry-After"); got != "1" {
			t.Errorf("Retry-After %q, want 1", got)
		}
		if took < 300*time.Millisecond || took > 300*time.Millisecond+time.Second {
			t.Errorf("the 409 came after %v, want the 300 ms wait (and at most a re-read more)", took)
		}
		<-done
		s.wantRuns(1)
	})

	t.Run("LongHandlerKeepsLease", func(t *testing.T) {
		// The handler runs for 3.5 leases: the store's Do renews the lease,
		// so a retry after 2.5 leases is still told 409, never taken over.
		const lease = 200 * time.Millisecond
		s := newServer(t, h, func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(lease * 7 / 2)
			io.WriteString(w, "slow")
		}, httpidem.WithLease(lease))
		first := make(chan reply, 1)
		go func() { first <- s.do("POST", "/", "k", "") }()
		time.Sleep(lease * 5 / 2)
		r := s.do("POST", "/", "k", "")
		wantProblem(t, r, http.StatusConflict)
		if r.header.Get("Retry-After") != "1" {
			t.Errorf("Retry-After %q, want 1 (a 200 ms lease, rounded up)", r.header.Get("Retry-After"))
		}
		if f := <-first; f.status != http.StatusOK || f.body != "slow" {
			t.Errorf("first %s", f)
		}
		s.wantRuns(1)
	})

	t.Run("LeaseInHandlerContext", func(t *testing.T) {
		var leases []store.Lease
		var mu sync.Mutex
		s := newServer(t, h, func(w http.ResponseWriter, r *http.Request) {
			l, ok := store.LeaseFromContext(r.Context())
			if !ok {
				t.Error("the handler's context carries no lease")
			}
			mu.Lock()
			leases = append(leases, l)
			mu.Unlock()
			w.WriteHeader(http.StatusOK) // a response, stored: the second request replays
		})
		s.do("POST", "/", "k", "")
		s.do("POST", "/", "k", "")
		if len(leases) != 1 || leases[0].ID != "k" || leases[0].Token == "" || leases[0].Fence != 1 {
			t.Errorf("leases seen by the handler: %+v, want one for key k with a token and fence 1", leases)
		}
	})

	t.Run("CorruptStoredResponse500", func(t *testing.T) {
		s := newServer(t, h, created, httpidem.WithFingerprint(nil))
		ctx := context.Background()
		for i, payload := range [][]byte{nil, []byte("garbage"), {1, 0xff}, {1, 200, 1, 5, 'a'}, {2, 200, 1, 0}} {
			key := fmt.Sprint("corrupt-", i)
			if _, _, err := s.rs.AcquireWith(ctx, key, store.AcquireOptions{}); err != nil {
				t.Fatal(err)
			}
			done := store.StatusCompleted
			if err := s.rs.Update(ctx, key, store.Update{Status: &done, Payload: &payload}); err != nil {
				t.Fatal(err)
			}
			wantProblem(t, s.do("POST", "/orders", key, ""), http.StatusInternalServerError)
		}
		s.wantRuns(0)
	})
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func lens(ss []string) []int {
	n := make([]int, len(ss))
	for i, s := range ss {
		n[i] = len(s)
	}
	return n
}
