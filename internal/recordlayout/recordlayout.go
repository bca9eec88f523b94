// Package recordlayout reads and writes an idempotency record as the records
// scripts store it: layout 1, one string value. It is the Go twin of the
// scripts' <snippet:record_string> (parse_record and record_value), for the
// CLI's inspect and stats and for the tests; the scripts are the authority.
//
// Layout 1, in order (struct format '>c4ddddBc0Bc0Hc0Hc0', then the payload):
//
//	4 bytes   "ro1 ", or "ro1w" on a pending record watch.lua marked (its
//	          waiters are told when it stops being pending)
//	8 bytes   created_ms  big-endian IEEE 754 double, an integer 0..2^53-1
//	8 bytes   updated_ms  (ms since the epoch, from the server's TIME)
//	8 bytes   expires_ms  (0 = none; the retention: the key expires then, or
//	                      at lease_ms while a pending owner's lease runs past it)
//	8 bytes   lease_ms    (0 = no lease; at byte offset 28, renewed in place)
//	1 byte    n, then n bytes: the fence, a canonical decimal 1..9999999999999999999
//	1 byte    n, then n bytes: the status, 1..64 bytes
//	2 bytes   n (big-endian), then n bytes: the fingerprint, 0..256 bytes
//	2 bytes   n (big-endian), then n bytes: the owner token, 0..256 bytes
//	the rest  the payload, raw (any bytes, possibly none)
package recordlayout

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Magic starts every layout-1 record; its third byte is the layout's version.
const Magic = "ro1 "

// MagicWatched starts a layout-1 record that watch.lua marked.
const MagicWatched = "ro1w"

// LeaseOffset is the byte offset of lease_ms, which renew.lua overwrites in place.
const LeaseOffset = 28

// MaxMS is the largest time a record holds: 2^53-1, exact as a double.
const MaxMS = 1<<53 - 1

// Fields are a record's stored values, in the scripts' terms.
type Fields struct {
	Status, Payload                          string
	CreatedMS, UpdatedMS, ExpiresMS, LeaseMS int64
	Fence                                    string // canonical decimal
	FP, Token                                string
	Watched                                  bool // watch.lua's mark
}

// ErrNotRecord is what the scripts answer CORRUPT for: a value that is not a
// well-formed layout-1 record.
var ErrNotRecord = errors.New("not a layout-1 record")

// Encode renders f exactly as record_value does. It does not check f: Valid does.
func Encode(f Fields) []byte {
	b := make([]byte, 0, 4+32+1+len(f.Fence)+1+len(f.Status)+2+len(f.FP)+2+len(f.Token)+len(f.Payload))
	if f.Watched {
		b = append(b, MagicWatched...)
	} else {
		b = append(b, Magic...)
	}
	for _, ms := range [4]int64{f.CreatedMS, f.UpdatedMS, f.ExpiresMS, f.LeaseMS} {
		b = binary.BigEndian.AppendUint64(b, math.Float64bits(float64(ms)))
	}
	b = append(b, byte(len(f.Fence)))
	b = append(b, f.Fence...)
	b = append(b, byte(len(f.Status)))
	b = append(b, f.Status...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(f.FP)))
	b = append(b, f.FP...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(f.Token)))
	b = append(b, f.Token...)
	return append(b, f.Payload...)
}

// Valid reports whether f can be stored: what parse_record accepts.
func (f Fields) Valid() error {
	for _, ms := range [4]int64{f.CreatedMS, f.UpdatedMS, f.ExpiresMS, f.LeaseMS} {
		if ms < 0 || ms > MaxMS {
			return fmt.Errorf("%w: time %d outside 0..2^53-1", ErrNotRecord, ms)
		}
	}
	if !canonicalFence(f.Fence) {
		return fmt.Errorf("%w: fence %q", ErrNotRecord, f.Fence)
	}
	if len(f.Status) < 1 || len(f.Status) > 64 || len(f.FP) > 256 || len(f.Token) > 256 {
		return fmt.Errorf("%w: status, fingerprint or token length", ErrNotRecord)
	}
	return nil
}

// Decode reads v as parse_record does: the fields, or ErrNotRecord (CORRUPT).
func Decode(v []byte) (Fields, error) {
	var f Fields
	if len(v) < 4+32 || (string(v[:4]) != Magic && string(v[:4]) != MagicWatched) {
		return f, fmt.Errorf("%w: no %q header", ErrNotRecord, Magic)
	}
	f.Watched = string(v[:4]) == MagicWatched
	var ms [4]int64
	for i := range ms {
		x := math.Float64frombits(binary.BigEndian.Uint64(v[4+8*i:]))
		// NaN fails every comparison, as in Lua.
		if !(x >= 0 && x <= MaxMS && x == math.Trunc(x)) {
			return f, fmt.Errorf("%w: time field %d is %v", ErrNotRecord, i+1, x)
		}
		ms[i] = int64(x)
	}
	f.CreatedMS, f.UpdatedMS, f.ExpiresMS, f.LeaseMS = ms[0], ms[1], ms[2], ms[3]
	rest := v[36:]
	var ok bool
	var fence, status, fp, token []byte
	if fence, rest, ok = cut(rest, 1); !ok {
		return f, fmt.Errorf("%w: truncated", ErrNotRecord)
	}
	if status, rest, ok = cut(rest, 1); !ok {
		return f, fmt.Errorf("%w: truncated", ErrNotRecord)
	}
	if fp, rest, ok = cut(rest, 2); !ok {
		return f, fmt.Errorf("%w: truncated", ErrNotRecord)
	}
	if token, rest, ok = cut(rest, 2); !ok {
		return f, fmt.Errorf("%w: truncated", ErrNotRecord)
	}
	f.Fence, f.Status, f.FP, f.Token, f.Payload = string(fence), string(status), string(fp), string(token), string(rest)
	return f, f.Valid()
}

// cut reads a length of n bytes (1 or 2, big-endian) and that many bytes.
func cut(b []byte, n int) (field, rest []byte, ok bool) {
	if len(b) < n {
		return nil, nil, false
	}
	l := int(b[0])
	if n == 2 {
		l = int(binary.BigEndian.Uint16(b))
	}
	b = b[n:]
	if len(b) < l {
		return nil, nil, false
	}
	return b[:l], b[l:], true
}

// canonicalFence: 1..19 decimal digits, no leading zero.
func canonicalFence(s string) bool {
	if len(s) < 1 || len(s) > 19 || s[0] == '0' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
