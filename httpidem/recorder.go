package httpidem

import (
	"bufio"
	"bytes"
	"maps"
	"net"
	"net/http"
)

// recorder is the http.ResponseWriter the handler gets. It keeps the response
// (status, header snapshot, body) in memory, to store, for as long as it fits
// in a record; a Flush, a Hijack or a body past the payload limit make it
// pass what it has, and everything after, straight to the client (passed),
// while it still keeps a copy of what fits (a streamed response that fits is
// stored all the same).
type recorder struct {
	w      http.ResponseWriter // the client's
	keep   func(name string) bool
	limit  int // the largest encoded response a record holds
	header http.Header
	status int         // 0 until WriteHeader or the first Write
	sent   http.Header // the header at WriteHeader: what net/http would send
	budget int         // body bytes that still fit in a record
	body   bytes.Buffer
	passed bool // the response went (is going) to the client as written
	// over: the response does not fit in a record (ErrTooLarge);
	// hijacked: the handler took the connection (ErrHijacked).
	over, hijacked bool
	flushed        bool // the handler flushed (a streaming response)
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
// Hints) go to the client at once and are not stored; 101 (switching
// protocols) is a hijack.
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
	case code == http.StatusSwitchingProtocols:
		r.hijacked = true
		r.pass()
	case r.budget < 0:
		r.over = true
		r.pass()
	}
}

// Write keeps p while the response still fits in a record; once it does not,
// it sends everything so far and p to the client.
func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	if !r.over && r.body.Len()+len(p) > r.budget {
		r.over = true
		r.pass()
		r.body = bytes.Buffer{} // nothing of it is stored any more
	}
	if r.passed {
		if !r.over {
			r.body.Write(p)
		}
		return r.w.Write(p)
	}
	return r.body.Write(p)
}

// Flush sends the response so far to the client and everything after it
// as it is written (a streaming response); a copy is still kept to store
// while it fits.
func (r *recorder) Flush() { _ = r.FlushError() }

// FlushError is Flush for http.ResponseController, with the client's error.
func (r *recorder) FlushError() error {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	r.flushed = true
	r.pass()
	return http.NewResponseController(r.w).Flush()
}

// Hijack hands the connection to the handler; what it sends there is never
// seen, so the response is not stored (ErrHijacked).
func (r *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	r.hijacked = true
	return http.NewResponseController(r.w).Hijack()
}

// Unwrap lets http.ResponseController reach the client's writer for what the
// recorder does not do itself (read and write deadlines, full duplex).
func (r *recorder) Unwrap() http.ResponseWriter { return r.w }

// pass sends the header and the body kept so far to the client, once; from
// then on writes go through as well.
func (r *recorder) pass() {
	if r.passed {
		return
	}
	r.passed = true
	maps.Copy(r.w.Header(), r.sent)
	r.w.WriteHeader(r.status)
	if r.body.Len() > 0 {
		_, _ = r.w.Write(r.body.Bytes())
	}
}

// finish ends the handler's turn: a handler that wrote nothing answered 200
// with an empty body, as with net/http, and that is its response.
func (r *recorder) finish() {
	if r.status == 0 && !r.hijacked {
		r.WriteHeader(http.StatusOK)
	}
}

// notStorable says why the response cannot be stored, or nil.
func (r *recorder) notStorable() error {
	switch {
	case r.hijacked:
		return ErrHijacked
	case r.over && r.flushed:
		return ErrStreamed
	case r.over:
		return ErrTooLarge
	}
	return nil
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
// header snapshot, not only the stored part), unless it went already.
func (r *recorder) deliver() {
	if r.passed || r.hijacked || r.status == 0 {
		return
	}
	r.passed = true
	maps.Copy(r.w.Header(), r.sent)
	r.w.WriteHeader(r.status)
	if r.body.Len() > 0 {
		_, _ = r.w.Write(r.body.Bytes())
	}
}
