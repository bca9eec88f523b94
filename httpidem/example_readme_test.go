package httpidem_test

import (
	"context"
	"errors"
	"log"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redisonce/redisonce/httpidem"
	"github.com/redisonce/redisonce/store"
)

// The drop-in configuration of the README and docs/integrations.md: keys scoped to the authenticated
// caller, responses on Redis. (It needs a Redis and listens on :8080, so it
// is compiled, not run; Example runs the same middleware in memory.)
func Example_dropIn() {
	rs, err := store.OpenRecords("redis://localhost:6379", store.WithPrefix("http-idem:")) // responses kept 24 h
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /payments", createPayment)
	idem, err := httpidem.Middleware(rs, httpidem.WithScope(func(r *http.Request) string {
		return accountID(r.Context()) // the authenticated account (token or session cookie): keys never cross accounts
	}))
	if err != nil {
		log.Fatal(err)
	}
	http.ListenAndServe(":8080", authenticate(idem(mux)))
}

// docs/stores.md's Records.Do snippet, in a handler: the flow httpidem is built
// on, for an API that keeps its own idempotency records. (Compiled, not run.)
func Example_recordsDo() {
	records, err := store.OpenRecords("redis://localhost:6379") // records live 24 h
	if err != nil {
		log.Fatal(err)
	}
	defer records.Close()

	http.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		body, _ := readBody(r)
		// In the handler:
		result, replayed, err := records.Do(r.Context(), "orders:"+r.Header.Get("Idempotency-Key"),
			store.AcquireOptions{Lease: 10 * time.Second, Fingerprint: httpidem.Fingerprint(r, body)},
			func(ctx context.Context) ([]byte, error) {
				order, err := createOrder(ctx, body)
				if errors.Is(err, errCardDeclined) {
					return nil, store.Permanent(err) // stored: every retry gets the same answer
				}
				return order, err // any other error drops the record: a retry runs again
			})
		switch {
		case errors.Is(err, store.ErrInFlight): // 409 + Retry-After: the first request is still running
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusConflict)
		case errors.Is(err, store.ErrFingerprintMismatch): // 422: the key was used with another request
			w.WriteHeader(http.StatusUnprocessableEntity)
		case errors.Is(err, store.ErrFailed): // a permanent failure, replayed; result holds its error text
			http.Error(w, string(result), http.StatusPaymentRequired)
		case err != nil: // fn's error (the record was dropped), or a store error: 5xx
			http.Error(w, "try again", http.StatusServiceUnavailable)
		default: // 200 with result; replayed == true on a retry
			if replayed {
				w.Header().Set(httpidem.HeaderReplayed, "true")
			}
			w.Write(result)
		}
	})
}

// The helpers the docs' snippets name.
var errCardDeclined = errors.New("card declined")

func createOrder(ctx context.Context, body []byte) ([]byte, error) { return body, nil }
func createPayment(w http.ResponseWriter, r *http.Request)         { w.WriteHeader(http.StatusCreated) }
func readBody(r *http.Request) ([]byte, error)                     { return nil, nil }
func accountID(ctx context.Context) string                         { id, _ := ctx.Value(accountKey{}).(string); return id }
func authenticate(next http.Handler) http.Handler                  { return next }

type accountKey struct{}

// TestREADMESnippetsAreExamples: every line of the Go snippets of the user
// docs (README.md and docs/*.md) that use httpidem appears, in order, in this
// file's examples, which compile: the docs show code that builds (comments and
// indentation aside). (TestDocSnippets, in the root module, also checks each
// block line for line against the Example its marker names.)
func TestREADMESnippetsAreExamples(t *testing.T) {
	var readme []byte
	for _, doc := range []string{"../README.md", "../docs/stores.md", "../docs/integrations.md"} {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		readme = append(readme, b...)
	}
	self, err := os.ReadFile("example_readme_test.go")
	if err != nil {
		t.Fatal(err)
	}
	var have []string
	for line := range strings.Lines(string(self)) {
		have = append(have, normalize(line))
	}
	// The blocks whose snippet marker names this package's examples (a block
	// of another module's example, such as integrations/postgres's, is
	// checked by TestDocSnippets only).
	blocks := regexp.MustCompile("(?s)<!--\\s*snippet:\\s*(\\S+)\\s*-->\\s*\n```go\n(.*?)```").FindAllStringSubmatch(string(readme), -1)
	checked := 0
	for _, b := range blocks {
		if !strings.HasPrefix(b[1], "httpidem/") || !strings.Contains(b[2], "httpidem.") {
			continue
		}
		b = b[1:]
		checked++
		i := 0
		for line := range strings.Lines(b[1]) {
			want := normalize(line)
			if want == "" {
				continue
			}
			for i < len(have) && have[i] != want {
				i++
			}
			if i == len(have) {
				t.Errorf("README snippet line %q is not in example_readme_test.go (in order)", strings.TrimSpace(line))
				break
			}
		}
	}
	if checked != 3 {
		t.Errorf("%d doc snippets use httpidem, want the 3 this test knows (the README's drop-in, docs/integrations.md's drop-in, docs/stores.md's Records.Do)", checked)
	}
}

// normalize drops indentation and the spaces before a trailing comment.
func normalize(line string) string {
	line = strings.TrimSpace(line)
	if code, comment, ok := strings.Cut(line, " //"); ok {
		line = strings.TrimSpace(code) + " //" + comment
	}
	return line
}
