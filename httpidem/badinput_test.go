package httpidem_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redisonce/redisonce/httpidem"
	"github.com/redisonce/redisonce/store"
)

// No panic on bad input. A nil store, a nil option, an invalid
// option or a nil handler gives middleware that answers every request 500
// (fail closed: the handler never runs unguarded) saying what is wrong.
func TestBadInputNeverPanics(t *testing.T) {
	ran := 0
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { ran++ })
	rs := mustStore(store.NewMemoryRecords())
	for name, mw := range map[string]func() http.Handler{
		"nil store":       func() http.Handler { return httpidem.Middleware(nil)(next) },
		"nil option":      func() http.Handler { return httpidem.Middleware(rs, nil)(next) },
		"zero lease":      func() http.Handler { return httpidem.Middleware(rs, httpidem.WithLease(0))(next) },
		"negative ttl":    func() http.Handler { return httpidem.Middleware(rs, httpidem.WithTTL(-time.Second))(next) },
		"key length 0":    func() http.Handler { return httpidem.Middleware(rs, httpidem.WithMaxKeyLen(0))(next) },
		"negative body":   func() http.Handler { return httpidem.Middleware(rs, httpidem.WithMaxBody(-1))(next) },
		"nil handler":     func() http.Handler { return httpidem.Middleware(rs)(nil) },
		"nil handler GET": func() http.Handler { return httpidem.Middleware(rs)(nil) },
	} {
		t.Run(name, func(t *testing.T) {
			var h http.Handler
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("Middleware panicked: %v", p)
					}
				}()
				h = mw()
			}()
			method := http.MethodPost
			if strings.HasSuffix(name, "GET") {
				method = http.MethodGet
			}
			for _, withKey := range []bool{true, false} {
				req := httptest.NewRequest(method, "/pay", strings.NewReader("{}"))
				if withKey {
					req.Header.Set(httpidem.HeaderKey, "k-1")
				}
				rec := httptest.NewRecorder()
				func() {
					defer func() {
						if p := recover(); p != nil {
							t.Fatalf("ServeHTTP panicked: %v", p)
						}
					}()
					h.ServeHTTP(rec, req)
				}()
				if rec.Code != http.StatusInternalServerError || rec.Header().Get("Content-Type") != httpidem.ProblemContentType {
					t.Errorf("%s (key %v): %d %q, want a 500 problem", method, withKey, rec.Code, rec.Body.String())
				}
			}
		})
	}
	if ran != 0 {
		t.Errorf("the handler ran %d times behind broken middleware", ran)
	}
}
