package httpidem

import (
	"bufio"
	"bytes"
	"maps"
	"net"
	"net/http"
)

// recorder is the http.ResponseWriter the handler gets. It keeps the response
// (status, header snapshot, body) in memory while it can still be stored; a
// 5xx status, a Flush, a Hijack or a body past the payload limit make it pass
// what it has, and everything after, straight to the client (passed says why).
type recorder struct {
	w      http.ResponseWriter // the client's
	keep   func(name string) bool
	limit  int // the largest encoded response a record holds
	header http.Header
	status int         // 0 until WriteHeader or the first Write
	sent   http.Header // the header at WriteHeader: what net/http would send
	budget int         // body bytes that still fit in a record
	body   bytes.Buffer
	passed error // non-nil: the response went to the client, unstored
}

func newRecorder(w http.ResponseWriter, keep func(string) bool, limit int) *recorder {
	return &recorder{w: w, keep: keep, limit: limit, header: http.Header{}}
}

// Header is the handler's response header, empty at first: headers an outer
// middleware set on the client's writer stay there and are neither stored nor
// replayed.
func (r *recorder) Header() http.Header { return r.header }

// WriteHeader records the status and a snapshot of the header, as net/http
// does; a second call is ignored. 1xx informational responses (103 Early
// Hints) go to the client at once and are not stored; 101 and 5xx make the
// response pass through.
func (r *recorder) WriteHeader(code int) {
	if r.status != 0 {
		return
	}
	if code < 100 || code > 999 {
		r.w.WriteHeader(code) // net/http panics with its own message
		return
	}
	if code < 200 && code != http.StatusSwitchingProtocols {
		maps.Copy(r.w.Header(), r.header)
		r.w.WriteHeader(code)
		return
	}
	r.status = code
	r.sent = r.header.Clone()
	if r.sent == nil {
		r.sent = http.Header{}
	}
	r.budget = r.limit - headerLen(code, r.stored())
	switch {
	case code >= 500:
		r.pass(ErrServerError)
	case code == http.StatusSwitchingProtocols:
		r.pass(ErrHijacked)
	case r.budget < 0:
		r.pass(ErrTooLarge)
	}
}

// Write keeps p while the response still fits in a record, else sends
// everything so far and p to the client.
func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	if r.passed != nil {
		return r.w.Write(p)
	}
	if r.body.Len()+len(p) > r.budget {
		r.pass(ErrTooLarge)
		return r.w.Write(p)
	}
	return r.body.Write(p)
}

// Flush sends the response so far to the client and everything after it
// unbuffered: a streaming response is not stored.
func (r *recorder) Flush() { _ = r.FlushError() }

// FlushError is Flush for http.ResponseController, with the client's error.
func (r *recorder) FlushError() error {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	if r.passed == nil {
		r.pass(ErrStreamed)
	}
	return http.NewResponseController(r.w).Flush()
}

// Hijack hands the connection to the handler; the response is not stored.
func (r *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if r.passed == nil {
		r.passed = ErrHijacked
	}
	return http.NewResponseController(r.w).Hijack()
}

// Unwrap lets http.ResponseController reach the client's writer for what the
// recorder does not do itself (read and write deadlines, full duplex).
func (r *recorder) Unwrap() http.ResponseWriter { return r.w }

// pass sends the header and the body kept so far to the client; from now on
// writes go straight through. why is recorded.
func (r *recorder) pass(why error) {
	r.passed = why
	maps.Copy(r.w.Header(), r.sent)
	r.w.WriteHeader(r.status)
	if r.body.Len() > 0 {
		_, _ = r.w.Write(r.body.Bytes())
	}
	r.body = bytes.Buffer{}
}

// finish ends the handler's turn: a handler that wrote nothing answered 200
// with an empty body, as with net/http, and that is not stored
// (ErrNothingWritten).
func (r *recorder) finish() {
	if r.status == 0 && r.passed == nil {
		r.WriteHeader(http.StatusOK)
		r.pass(ErrNothingWritten)
	}
}

// stored is the part of the header snapshot a record keeps.
func (r *recorder) stored() http.Header {
	h := make(http.Header, len(r.sent))
	for name, vs := range r.sent {
		if r.keep(name) && len(vs) > 0 {
			h[name] = vs
		}
	}
	dropConnectionTokens(h, r.sent)
	return h
}

// response is the kept response, to store.
func (r *recorder) response() response {
	return response{status: r.status, header: r.stored(), body: r.body.Bytes()}
}

// deliver sends a kept response to the client (the first answer: the full
// header snapshot, not only the stored part).
func (r *recorder) deliver() {
	if r.passed != nil {
		return
	}
	maps.Copy(r.w.Header(), r.sent)
	r.w.WriteHeader(r.status)
	if r.body.Len() > 0 {
		_, _ = r.w.Write(r.body.Bytes())
	}
}
