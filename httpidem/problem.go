package httpidem

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// Problem is the RFC 9457 problem details object the middleware answers with
// when it answers for itself (a bad or missing key, a key reused with another
// request, a retry while the first request runs, an unavailable store). Type
// is "about:blank" unless WithProblemType sets a URI of the user's docs;
// Title is the status's text; Detail says what happened and, where there is
// one, Header names the request header at fault.
type Problem struct {
	// Type is "about:blank" (the status says what kind of problem it is), or
	// the WithProblemType URI.
	Type string `json:"type"`
	// Title is the status's text (http.StatusText).
	Title string `json:"title"`
	// Status is the response's status code.
	Status int `json:"status"`
	// Detail says what happened, for a human.
	Detail string `json:"detail,omitempty"`
	// Header is an extension member: the request header the problem is about
	// ("Idempotency-Key").
	Header string `json:"header,omitempty"`
}

// ProblemContentType is the media type of a Problem body.
const ProblemContentType = "application/problem+json"

// writeProblem answers with a problem+json body. retryAfter > 0 adds a
// Retry-After header in seconds.
func writeProblem(w http.ResponseWriter, typ string, status int, detail, header string, retryAfter int) {
	if typ == "" {
		typ = "about:blank"
	}
	p := Problem{Type: typ, Title: http.StatusText(status), Status: status, Detail: detail, Header: header}
	body, _ := json.Marshal(p) // strings and an int: cannot fail
	h := w.Header()
	h.Set("Content-Type", ProblemContentType)
	h.Set("Content-Length", strconv.Itoa(len(body)+1))
	h.Set("Cache-Control", "no-store")
	h.Del(HeaderReplayed)
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(retryAfter))
	}
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}
