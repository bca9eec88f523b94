package httpidem

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"sort"
)

// payloadVersion is the first byte of every stored response. A record whose
// payload starts with another byte was not written by this version of the
// package: it is answered with a 500 problem, never guessed at.
const payloadVersion = 1

// errCorrupt: a stored payload that does not decode.
var errCorrupt = errors.New("httpidem: corrupt stored response")

// response is what a record stores: a final answer of the handler.
type response struct {
	status int
	header http.Header
	body   []byte
}

// The stored form, compact and binary-safe:
//
//	byte     version (1)
//	uvarint  status
//	uvarint  number of header lines n
//	n times: uvarint len(name), name, uvarint len(value), value
//	rest     body
//
// Header names are written sorted, values in their order, so the same
// response always encodes to the same bytes.

// headerLen is the encoded size of h without the body: what a response of h
// costs before its first body byte.
func headerLen(status int, h http.Header) int {
	n := 1 + uvarintLen(uint64(status))
	lines := 0
	for name, vs := range h {
		for _, v := range vs {
			lines++
			n += uvarintLen(uint64(len(name))) + len(name) + uvarintLen(uint64(len(v))) + len(v)
		}
	}
	return n + uvarintLen(uint64(lines))
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

// encode renders r into its stored form.
func encode(r response) []byte {
	names := make([]string, 0, len(r.header))
	lines := 0
	for name, vs := range r.header {
		names = append(names, name)
		lines += len(vs)
	}
	sort.Strings(names)
	buf := make([]byte, 0, headerLen(r.status, r.header)+len(r.body))
	buf = append(buf, payloadVersion)
	buf = binary.AppendUvarint(buf, uint64(r.status))
	buf = binary.AppendUvarint(buf, uint64(lines))
	for _, name := range names {
		for _, v := range r.header[name] {
			buf = binary.AppendUvarint(buf, uint64(len(name)))
			buf = append(buf, name...)
			buf = binary.AppendUvarint(buf, uint64(len(v)))
			buf = append(buf, v...)
		}
	}
	return append(buf, r.body...)
}

// decode parses a stored response; any inconsistency is errCorrupt.
func decode(p []byte) (response, error) {
	if len(p) == 0 {
		return response{}, fmt.Errorf("%w: empty payload", errCorrupt)
	}
	if p[0] != payloadVersion {
		return response{}, fmt.Errorf("%w: unknown version %d", errCorrupt, p[0])
	}
	p = p[1:]
	next := func(what string) (uint64, error) {
		v, n := binary.Uvarint(p)
		if n <= 0 {
			return 0, fmt.Errorf("%w: bad %s", errCorrupt, what)
		}
		p = p[n:]
		return v, nil
	}
	str := func(what string) (string, error) {
		l, err := next(what + " length")
		if err != nil {
			return "", err
		}
		if l > uint64(len(p)) {
			return "", fmt.Errorf("%w: %s of %d bytes, %d left", errCorrupt, what, l, len(p))
		}
		s := string(p[:l])
		p = p[l:]
		return s, nil
	}
	status, err := next("status")
	if err != nil {
		return response{}, err
	}
	if status < 200 || status > 599 {
		return response{}, fmt.Errorf("%w: status %d", errCorrupt, status)
	}
	lines, err := next("header count")
	if err != nil {
		return response{}, err
	}
	// Every line takes at least 2 bytes: a bound before allocating.
	if lines > uint64(len(p))/2 {
		return response{}, fmt.Errorf("%w: %d header lines in %d bytes", errCorrupt, lines, len(p))
	}
	h := make(http.Header, lines)
	for range lines {
		name, err := str("header name")
		if err != nil {
			return response{}, err
		}
		if name == "" {
			return response{}, fmt.Errorf("%w: empty header name", errCorrupt)
		}
		v, err := str("header value")
		if err != nil {
			return response{}, err
		}
		h[name] = append(h[name], v)
	}
	var body []byte
	if len(p) > 0 {
		body = p
	}
	return response{status: int(status), header: h, body: body}, nil
}
