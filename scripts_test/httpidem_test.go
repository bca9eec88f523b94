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
	"testing"
	"time"

	"github.com/redisonce/redisonce/httpidem"
	"github.com/redisonce/redisonce/httpidem/httpidemtest"
	"github.com/redisonce/redisonce/internal/must"
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
				New: func(t *testing.T) *store.Records {
					return must.Store(store.NewRecords(c, store.WithPrefix(uniquePrefix(t))))
				},
			})
		})
	}
}

// TestHTTPIdemRawRecord: what the middleware leaves in Redis — a completed
// record whose payload is the versioned response envelope after a 201 and
// after a 503 (the handler ran: its 5xx is its outcome), under the shared
// key space's "k:" record key; and no key at all after a handler that called
// NotDone.
func TestHTTPIdemRawRecord(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, standaloneURL(t))
	prefix := uniquePrefix(t)
	rs := must.Store(store.NewRecords(c, store.WithPrefix(prefix)))
	h := mustMiddleware(t, rs, httpidem.WithSharedKeys())(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/notdone":
			httpidem.NotDone(r)
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		case "/503":
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("X-A", "b")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "ok")
	}))
	for _, path := range []string{"/ok", "/503", "/notdone"} {
		req := httptest.NewRequest("POST", path, strings.NewReader("x"))
		req.Header.Set(httpidem.HeaderKey, path)
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	for key, want := range map[string]string{
		"k:/ok":  "\x01\xc9\x01\x01\x03X-A\x01bok", // version 1, status 201 (uvarint c9 01), 1 header line "X-A: b", body "ok"
		"k:/503": "\x01\xf7\x03\x00",               // version 1, status 503 (uvarint f7 03), no header, no body
	} {
		hash := rawRecord(t, c, prefix+key).Hash
		if hash["status"] != "completed" || hash["payload"] != want || hash["lease_ms"] != "0" || len(hash["fp"]) != 64 {
			t.Errorf("record %s: %q, want completed, payload %q, no lease, a 64-hex fingerprint", key, hash, want)
		}
	}
	n, err := c.Do(ctx, c.B().Exists().Key(prefix+"k:/notdone").Build()).AsInt64()
	if err != nil || n != 0 {
		t.Errorf("EXISTS after NotDone = %d, %v; want 0", n, err)
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

// TestHTTPIdemClientsGiveUp: a payments API on a real HTTP server over the
// Redis store. 40 keys whose first try times out (http.Client.Timeout, a
// third of the handler's time) and 20 whose client hangs up after sending,
// all at once; then every key is retried until it is not 409. Each key is
// charged exactly once, and every retry gets the first run's response,
// byte for byte, marked replayed.
func TestHTTPIdemClientsGiveUp(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, standaloneURL(t))
	rs := must.Store(store.NewRecords(c, store.WithPrefix(uniquePrefix(t))))
	var mu sync.Mutex
	charges := map[string]int{}
	byFirstTry := map[string]bool{} // the key's charge came from the try that gave up
	mux := http.NewServeMux()
	mux.HandleFunc("POST /charges", func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get(httpidem.HeaderKey)
		mu.Lock()
		charges[key]++
		n := charges[key]
		byFirstTry[key] = r.Header.Get("X-Try") == "first"
		mu.Unlock()
		time.Sleep(150 * time.Millisecond) // the provider call
		w.Header().Set("X-Charge", fmt.Sprintf("ch_%s_%d", key, n))
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"key":%q,"charge":%d}`, key, n)
	})
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	srv := httptest.NewServer(mustMiddleware(t, rs, httpidem.WithSharedKeys(), httpidem.WithLogger(quiet))(mux))
	t.Cleanup(srv.Close)
	post := func(ctx context.Context, cl *http.Client, key, try string) (*http.Response, []byte, error) {
		req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/charges", strings.NewReader("amount=10"))
		req.Header.Set(httpidem.HeaderKey, key)
		req.Header.Set("X-Try", try) // not in the fingerprint: one request
		resp, err := cl.Do(req)
		if err != nil {
			return nil, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp, b, err
	}
	var keys []string
	var wg sync.WaitGroup
	impatient := &http.Client{Timeout: 50 * time.Millisecond}
	for i := range 60 {
		key := fmt.Sprintf("k%02d", i)
		keys = append(keys, key)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i < 40 {
				if _, _, err := post(ctx, impatient, key, "first"); err == nil {
					t.Errorf("%s: the first try did not time out", key)
				}
				return
			}
			hctx, hangUp := context.WithCancel(ctx)
			time.AfterFunc(30*time.Millisecond, hangUp) // after sending, before the answer
			if _, _, err := post(hctx, http.DefaultClient, key, "first"); err == nil {
				t.Errorf("%s: the hung-up try got an answer", key)
			}
		}()
	}
	wg.Wait()
	patient := &http.Client{Timeout: 30 * time.Second}
	for _, key := range keys {
		var first []byte
		var firstCharge string
		for try := 0; try < 2; try++ {
			var resp *http.Response
			var body []byte
			var err error
			for range 300 { // 409 while the first try's handler runs: at most 3 s
				resp, body, err = post(ctx, patient, key, "retry")
				if err != nil {
					t.Fatalf("%s: %v", key, err)
				}
				if resp.StatusCode != http.StatusConflict {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			mu.Lock()
			wantReplay := try == 1 || byFirstTry[key]
			mu.Unlock()
			if resp.StatusCode != http.StatusCreated || (resp.Header.Get(httpidem.HeaderReplayed) == "true") != wantReplay {
				t.Errorf("%s retry %d: %d %v %q, want 201, replayed %v", key, try, resp.StatusCode, resp.Header, body, wantReplay)
				continue
			}
			if try == 0 {
				first, firstCharge = body, resp.Header.Get("X-Charge")
			} else if string(body) != string(first) || resp.Header.Get("X-Charge") != firstCharge {
				t.Errorf("%s: replays differ: %q %q vs %q %q", key, body, resp.Header.Get("X-Charge"), first, firstCharge)
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	timedOut, hungUp := 0, 0
	for i, key := range keys {
		if charges[key] != 1 {
			t.Errorf("%s charged %d times, want 1", key, charges[key])
		}
		if byFirstTry[key] && i < 40 {
			timedOut++
		} else if byFirstTry[key] {
			hungUp++
		}
	}
	// A first try that gave up before it reached the handler charged
	// nothing, and its retry was the first run; enough of each kind must
	// have reached it for the test to mean something.
	t.Logf("first tries that reached the handler: %d of 40 timed out, %d of 20 hung up", timedOut, hungUp)
	if timedOut == 0 || hungUp == 0 {
		t.Errorf("no first try of a kind reached the handler (timed out %d, hung up %d): nothing tested", timedOut, hungUp)
	}
}
