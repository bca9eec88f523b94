package scripts_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/redisonce/redisonce/httpidem"
	"github.com/redisonce/redisonce/httpidem/httpidemtest"
	"github.com/redisonce/redisonce/store"
)

// TestHTTPIdem runs httpidem's suite, with its default options, on the Redis
// records store: replays, 422, 409 with Retry-After, 5xx and panics not
// stored, and the rest.
func TestHTTPIdem(t *testing.T) {
	for name, url := range map[string]func(*testing.T) string{"standalone": standaloneURL, "cluster": clusterURL} {
		t.Run(name, func(t *testing.T) {
			c := newClient(t, url(t))
			httpidemtest.TestMiddleware(t, httpidemtest.Harness{
				New: func(t *testing.T) store.RecordStore {
					return store.NewRecords(c, store.WithPrefix(uniquePrefix(t)))
				},
			})
		})
	}
}

// TestHTTPIdemRawRecord: what the middleware leaves in Redis — a completed
// record hash whose payload is the versioned response envelope after a 201,
// and no key at all after a 503.
func TestHTTPIdemRawRecord(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, standaloneURL(t))
	prefix := uniquePrefix(t)
	rs := store.NewRecords(c, store.WithPrefix(prefix))
	h := httpidem.Middleware(rs)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/fail" {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("X-A", "b")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "ok")
	}))
	for _, path := range []string{"/ok", "/fail"} {
		req := httptest.NewRequest("POST", path, strings.NewReader("x"))
		req.Header.Set(httpidem.HeaderKey, path)
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	hash := rawRecord(t, c, prefix+"/ok").Hash
	// version 1, status 201 (uvarint c9 01), 1 header line "X-A: b", body "ok"
	want := "\x01\xc9\x01\x01\x03X-A\x01bok"
	if hash["status"] != "completed" || hash["payload"] != want || hash["lease_ms"] != "0" || len(hash["fp"]) != 64 {
		t.Errorf("record after a 201: %q, want completed, payload %q, no lease, a 64-hex fingerprint", hash, want)
	}
	n, err := c.Do(ctx, c.B().Exists().Key(prefix+"/fail").Build()).AsInt64()
	if err != nil || n != 0 {
		t.Errorf("EXISTS after a 503 = %d, %v; want 0", n, err)
	}
}
