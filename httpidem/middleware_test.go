package httpidem_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"testing"

	"github.com/redisonce/redisonce/httpidem"
	"github.com/redisonce/redisonce/httpidem/httpidemtest"
	"github.com/redisonce/redisonce/store"
)

// The suite on the in-memory store; scripts_test runs it on Redis.
func TestMiddlewareMemory(t *testing.T) {
	httpidemtest.TestMiddleware(t, httpidemtest.Harness{
		New: func(t *testing.T) *store.Records { return mustStore(store.NewMemoryRecords()) },
	})
}

// A fingerprint the store refuses (over 256 bytes) is a
// configuration error: 500, the handler does not run; a key too long once
// scoped is the client's: 400.
func TestMiddlewareRefusedOptions(t *testing.T) {
	ran := false
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ran = true })
	long := func(*http.Request, []byte) string { return strings.Repeat("f", 256+1) }
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		opts []httpidem.Option
		key  string
		want int
	}{
		{[]httpidem.Option{httpidem.WithFingerprint(long), httpidem.WithLogger(quiet)}, "k", http.StatusInternalServerError},
		{[]httpidem.Option{httpidem.WithScope(func(*http.Request) string { return strings.Repeat("é", 200) })}, strings.Repeat("k", 255), http.StatusBadRequest},
	} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("POST", "/", strings.NewReader("x"))
		req.Header.Set(httpidem.HeaderKey, tc.key)
		mustMiddleware(t, mustStore(store.NewMemoryRecords()), append([]httpidem.Option{httpidem.WithSharedKeys()}, tc.opts...)...)(next).ServeHTTP(rec, req)
		if rec.Code != tc.want || rec.Header().Get("Content-Type") != httpidem.ProblemContentType || ran {
			t.Errorf("status %d (%s), handler ran %v; want a %d problem and no run", rec.Code, rec.Header().Get("Content-Type"), ran, tc.want)
		}
	}
}

// serveTwice runs the same keyed POST through h twice and returns both
// recorders.
func serveTwice(t *testing.T, h http.Handler) (first, second *httptest.ResponseRecorder) {
	t.Helper()
	serve := func() *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("POST", "/", strings.NewReader("x"))
		req.Header.Set(httpidem.HeaderKey, "k")
		h.ServeHTTP(rec, req)
		return rec
	}
	return serve(), serve()
}

// The recorder follows net/http: the header is a snapshot taken at
// WriteHeader (later changes are neither sent nor stored), a second
// WriteHeader is ignored, 1xx responses go out at once and are not stored.
func TestMiddlewareWriterSemantics(t *testing.T) {
	runs := 0
	h := mustMiddleware(t, mustStore(store.NewMemoryRecords()), httpidem.WithSharedKeys())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Set("X-Before", "1")
		w.WriteHeader(http.StatusAccepted)
		w.WriteHeader(http.StatusTeapot)
		w.Header().Set("X-After", "1")
		io.WriteString(w, "body")
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	for i := range 2 {
		var early []int
		trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, _ textproto.MIMEHeader) error {
			early = append(early, code)
			return nil
		}}
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "POST", srv.URL, strings.NewReader("x"))
		req.Header.Set(httpidem.HeaderKey, "k")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted || string(body) != "body" || resp.Header.Get("X-Before") != "1" || resp.Header.Get("X-After") != "" {
			t.Errorf("response %d: %d %q %v", i, resp.StatusCode, body, resp.Header)
		}
		if replayed := resp.Header.Get(httpidem.HeaderReplayed) == "true"; replayed != (i == 1) {
			t.Errorf("response %d: replayed %v", i, replayed)
		}
		if want := []int{103}; i == 1 {
			if len(early) != 0 {
				t.Errorf("the replay sent 1xx responses %v", early)
			}
		} else if fmt.Sprint(early) != fmt.Sprint(want) {
			t.Errorf("first response: 1xx responses %v, want %v", early, want)
		}
	}
	if runs != 1 {
		t.Errorf("runs %d, want 1", runs)
	}
}

// Flushing through http.ResponseController passes the response through as
// Flusher does; it fits in a record, so it is stored and replayed.
func TestMiddlewareResponseControllerFlush(t *testing.T) {
	runs := 0
	h := mustMiddleware(t, mustStore(store.NewMemoryRecords()), httpidem.WithSharedKeys())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		io.WriteString(w, "a")
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Errorf("Flush: %v", err)
		}
		io.WriteString(w, "b")
	}))
	first, second := serveTwice(t, h)
	if first.Body.String() != "ab" || second.Body.String() != "ab" || !first.Flushed || runs != 1 {
		t.Errorf("bodies %q %q, flushed %v, runs %d; want ab twice, flushed, 1 run", first.Body, second.Body, first.Flushed, runs)
	}
	if second.Header().Get(httpidem.HeaderReplayed) != "true" {
		t.Error("a streamed response that fits was not replayed")
	}
}

// mustMiddleware is httpidem.Middleware, failing the test on an error.
func mustMiddleware(t *testing.T, rs httpidem.Store, opts ...httpidem.Option) func(http.Handler) http.Handler {
	t.Helper()
	mw, err := httpidem.Middleware(rs, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return mw
}
