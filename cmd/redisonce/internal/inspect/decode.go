// Package inspect reads the stores' keys with plain read commands (TYPE, GET,
// GETRANGE, STRLEN, EXISTS, PTTL, HGETALL, HMGET, HLEN, TIME; never a script,
// never a write) and puts their state in words, for `redisonce inspect` and
// `redisonce stats`.
//
// The layouts it decodes are the scripts' (see their headers):
//
//	claims   STRING  "1" (or any value not starting with "~") = processed;
//	                 "~<token>" = in flight, the key's PTTL is the lease left
//	outbox   HASH    _seq, _gen, _epoch (µs), _rid, <msg_id> -> "<seq>:<payload>"
//	records  STRING  "ro1 ", four times, fence, status, fp, token, payload
//	                 (internal/recordlayout; docs/non-go.md)
//
// A key of another type or shape is reported as Foreign, never a crash.
package inspect

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/redisonce/redisonce/internal/recordlayout"
)

// Foreign is a key that is not the store's: another type, or a value the
// store's scripts never write.
type Foreign struct{ Reason string }

func (f *Foreign) Error() string { return f.Reason }

func foreign(format string, args ...any) error { return &Foreign{Reason: fmt.Sprintf(format, args...)} }

// States of a claim.
const (
	Processed = "processed"
	InFlight  = "in flight"
)

// Claim is a claims key in words.
type Claim struct {
	Key   string `json:"key"`
	State string `json:"state"`           // Processed or InFlight
	Value string `json:"value,omitempty"` // a processed value other than "1" (written by something else)
	Token string `json:"token,omitempty"` // in flight: the lease's token
	TTLms int64  `json:"ttl_ms"`          // ms until the key expires (in flight: the lease left); -1 never
}

// DecodeClaim reads a claims key's value and PTTL.
func DecodeClaim(key, value string, pttl int64) (Claim, error) {
	c := Claim{Key: key, State: Processed, TTLms: pttl}
	token, leased := strings.CutPrefix(value, "~")
	switch {
	case leased && (token == "" || len(token) > 256):
		return c, foreign("value %s is not \"~<token>\" with a 1..256-byte token", Preview(value, 40))
	case leased:
		c.State, c.Token = InFlight, token
	case value != "1":
		c.Value = value // claim.lua counts any value not starting with "~" as processed
	}
	return c, nil
}

// Tail is an outbox connection's hash in words.
type Tail struct {
	Key        string    `json:"key"`
	EpochUs    uint64    `json:"epoch_us"`   // server time in µs when this incarnation was created
	Generation string    `json:"generation"` // ack-generation floor, decimal uint64
	Seq        uint64    `json:"seq"`        // last sequence appended
	TTLms      int64     `json:"ttl_ms"`     // -1 never
	Messages   []Message `json:"messages"`   // in seq order
}

// Message is one unacked message of a tail.
type Message struct {
	ID      string `json:"id"`
	Seq     uint64 `json:"seq"`
	Size    int    `json:"size"`    // payload bytes
	Preview string `json:"preview"` // the payload's start, quoted
}

// tailReserved are an outbox hash's fields that are not messages.
var tailReserved = []string{"_epoch", "_gen", "_seq", "_rid"}

// DecodeTail reads an outbox hash. Fields other than the reserved ones are
// messages; with only the reserved fields given (stats reads no more), the
// tail has no Messages.
func DecodeTail(key string, fields map[string]string, pttl int64) (Tail, error) {
	t := Tail{Key: key, TTLms: pttl, Messages: []Message{}}
	var err error
	if t.EpochUs, err = decimal(fields, "_epoch", true); err != nil {
		return t, err
	}
	if _, err = decimal(fields, "_gen", true); err != nil {
		return t, err
	}
	t.Generation = fields["_gen"]
	if t.Seq, err = decimal(fields, "_seq", false); err != nil {
		return t, err
	}
	for id, v := range fields {
		if slices.Contains(tailReserved, id) {
			continue
		}
		seq, payload, ok := strings.Cut(v, ":")
		n, perr := strconv.ParseUint(seq, 10, 64)
		if strings.HasPrefix(id, "_") || !ok || perr != nil {
			return t, foreign("field %s is not a message id with a \"<seq>:<payload>\" value", Preview(id, 40))
		}
		t.Messages = append(t.Messages, Message{ID: id, Seq: n, Size: len(payload), Preview: Preview(payload, 40)})
	}
	sort.Slice(t.Messages, func(i, j int) bool { return t.Messages[i].Seq < t.Messages[j].Seq })
	return t, nil
}

// decimal parses fields[name] as a decimal uint64; a missing field is an
// error when required, else 0.
func decimal(fields map[string]string, name string, required bool) (uint64, error) {
	v, ok := fields[name]
	if !ok && !required {
		return 0, nil
	}
	if !ok {
		return 0, foreign("field %s is missing", name)
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, foreign("field %s is %s, want a decimal number", name, Preview(v, 24))
	}
	return n, nil
}

// Statuses of a record the stores write; update.lua accepts others.
const (
	Pending   = "pending"
	Completed = "completed"
	Failed    = "failed"
)

// Record is an idempotency record in words. Times are ms since the epoch on
// the server's clock, 0 = none.
type Record struct {
	Key         string `json:"key"`
	Status      string `json:"status"`
	CreatedMs   int64  `json:"created_ms"`
	UpdatedMs   int64  `json:"updated_ms"`
	ExpiresMs   int64  `json:"expires_ms"`
	LeaseMs     int64  `json:"lease_ms"` // a pending owner's lease deadline
	Fence       string `json:"fence"`
	Fingerprint string `json:"fingerprint,omitempty"`
	Token       string `json:"token,omitempty"`
	Size        int    `json:"payload_size"`
	Preview     string `json:"payload_preview"`
}

// DecodeRecordValue reads a record string: a Foreign error for any
// other string (what the scripts answer CORRUPT for).
func DecodeRecordValue(key, v string) (Record, error) {
	f, err := recordlayout.Decode([]byte(v))
	if err != nil {
		return Record{Key: key}, foreign("a string that is not a record (%v): not the store's", err)
	}
	return recordFromFields(key, f, len(f.Payload), Preview(f.Payload, 40)), nil
}

// DecodeRecordHeader is DecodeRecordValue of a value's first bytes (stats
// reads no payload): the payload is cut, and size is the value's length.
func DecodeRecordHeader(key, prefix string, size int) (Record, error) {
	r, err := DecodeRecordValue(key, prefix)
	if err == nil {
		r.Size -= len(prefix) - size
		r.Preview = ""
	}
	return r, err
}

func recordFromFields(key string, f recordlayout.Fields, size int, preview string) Record {
	return Record{Key: key, Status: f.Status, CreatedMs: f.CreatedMS, UpdatedMs: f.UpdatedMS, ExpiresMs: f.ExpiresMS,
		LeaseMs: f.LeaseMS, Fence: f.Fence, Fingerprint: f.FP, Token: f.Token, Size: size, Preview: preview}
}

// Preview quotes the first n bytes of s (cut at a character boundary) for
// a terminal: non-printable bytes escaped, "…" when cut.
func Preview(s string, n int) string {
	if len(s) <= n {
		return strconv.Quote(s)
	}
	cut := n
	for cut > n-utf8.UTFMax && cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "…"
}

// Show is how the CLI prints any string that came from Redis (ids, key
// names, tokens, statuses, fingerprints, generations, message ids, library
// names, reply strings), so that stored bytes never reach a terminal raw: s
// as it is when it is valid UTF-8 made of printable characters other than
// space, '"' and '\' (strconv.IsPrint: no control character, escape
// sequence, DEL or bidi override); otherwise Go-quoted (strconv.Quote:
// "msg\x1b]0;pwned\a", "bad\xff", "a b"). A bare string is never ambiguous
// with a quoted one: a string that starts with '"' is quoted.
func Show(s string) string {
	if s == "" {
		return `""`
	}
	for _, r := range s {
		if r == utf8.RuneError || r == ' ' || r == '"' || r == '\\' || !strconv.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

// SafeJSON escapes, in JSON text b, every character a terminal could act on
// that encoding/json leaves raw (it escapes control characters and replaces
// invalid UTF-8 with U+FFFD, but writes DEL, U+202E and other unprintable
// characters as they are) as \uXXXX: the same JSON value, printable on a
// terminal.
func SafeJSON(b []byte) []byte {
	var out []byte
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if (r < utf8.RuneSelf && r != 0x7f) || (r >= utf8.RuneSelf && strconv.IsPrint(r)) {
			out = append(out, b[i:i+size]...)
		} else if r1, r2 := utf16.EncodeRune(r); r1 != utf8.RuneError {
			out = fmt.Appendf(out, `\u%04x\u%04x`, r1, r2)
		} else {
			out = fmt.Appendf(out, `\u%04x`, r)
		}
		i += size
	}
	return out
}
