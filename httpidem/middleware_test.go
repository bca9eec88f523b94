package httpidem_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/redisonce/redisonce/httpidem"
	"github.com/redisonce/redisonce/httpidem/httpidemtest"
	"github.com/redisonce/redisonce/store"
)

// The suite on the in-memory store; scripts_test runs it on Redis.
func TestMiddlewareMemory(t *testing.T) {
	httpidemtest.TestMiddleware(t, httpidemtest.Harness{
		New: func(t *testing.T) store.RecordStore { return store.NewMemoryRecords() },
	})
}

// A fingerprint the store refuses (over store.MaxFingerprintLen) is a
// configuration error: 500, the handler does not run; a key too long once
// scoped is the client's: 400.
func TestMiddlewareRefusedOptions(t *testing.T) {
	ran := false
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ran = true })
	long := func(*http.Request, []byte) string { return strings.Repeat("f", store.MaxFingerprintLen+1) }
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
		httpidem.Middleware(store.NewMemoryRecords(), tc.opts...)(next).ServeHTTP(rec, req)
		if rec.Code != tc.want || rec.Header().Get("Content-Type") != httpidem.ProblemContentType || ran {
			t.Errorf("status %d (%s), handler ran %v; want a %d problem and no run", rec.Code, rec.Header().Get("Content-Type"), ran, tc.want)
		}
	}
}
