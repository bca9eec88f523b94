package httpidem_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redisonce/redisonce/httpidem"
	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
)

// No panic on bad input: a nil store, a nil option, an invalid option or
// no scope decision is an error from Middleware, before any request; a nil
// handler gives a handler that answers every request 500 (fail closed: the
// handler never runs unguarded) saying what is wrong.
func TestBadInputNeverPanics(t *testing.T) {
	rs := must.Store(store.NewMemoryRecords())
	shared := httpidem.WithSharedKeys()
	for name, opts := range map[string][]httpidem.Option{
		"no scope":          nil,
		"no scope, options": {httpidem.WithLease(time.Second), httpidem.WithRetry5xx()},
		"nil scope":         {httpidem.WithScope(nil)},
		"nil option":        {shared, nil},
		"zero lease":        {shared, httpidem.WithLease(0)},
		"negative ttl":      {shared, httpidem.WithTTL(-time.Second)},
		"key length 0":      {shared, httpidem.WithMaxKeyLen(0)},
		"negative body":     {shared, httpidem.WithMaxBody(-1)},
		"negative wait":     {shared, httpidem.WithWait(-1)},
		"negative cap":      {shared, httpidem.WithRetryAfter(-1)},
	} {
		t.Run(name, func(t *testing.T) {
			mw, err := httpidem.Middleware(rs, opts...)
			if err == nil || mw != nil || !strings.HasPrefix(err.Error(), "httpidem: ") {
				t.Errorf("Middleware: %v, %v; want an error and no middleware", mw != nil, err)
			}
		})
	}
	if _, err := httpidem.Middleware(nil, shared); err == nil {
		t.Error("Middleware(nil store): no error")
	}
	var typedNil *store.Records
	if _, err := httpidem.Middleware(typedNil, shared); err == nil {
		t.Error("Middleware(typed nil *store.Records): no error")
	}
	for _, opt := range []httpidem.Option{shared, httpidem.WithCredentialScope(), httpidem.WithScope(func(*http.Request) string { return "" })} {
		if _, err := httpidem.Middleware(rs, opt); err != nil {
			t.Errorf("Middleware with a scope decision: %v", err)
		}
	}
	mw, err := httpidem.Middleware(rs, shared)
	if err != nil {
		t.Fatal(err)
	}
	h := mw(nil)
	for _, method := range []string{http.MethodPost, http.MethodGet} {
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
				t.Errorf("nil handler, %s (key %v): %d %q, want a 500 problem", method, withKey, rec.Code, rec.Body.String())
			}
		}
	}
}
