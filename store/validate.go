package store

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"
)

// MaxIDLen is the longest message id, connection id or record key accepted, in
// bytes (1 KiB). Ids may hold any bytes, NUL, "{", "}" and ":" included; the key
// is exactly prefix + id.
const MaxIDLen = 1024

// checkID validates an id and the context before anything is sent.
func checkID(ctx context.Context, op, id string) error {
	if err := ctx.Err(); err != nil {
		return opError(op, id, err)
	}
	if id == "" {
		return errorf(op, id, ErrInvalidArgument, "empty id")
	}
	if len(id) > MaxIDLen {
		return errorf(op, id[:32]+"...", ErrInvalidArgument, "id is %d bytes, the limit is %d", len(id), MaxIDLen)
	}
	return nil
}

// ms renders a duration as the decimal milliseconds the scripts take; a positive
// sub-millisecond duration rounds up to 1 so it never reads as "no expiry".
func ms(d time.Duration) string {
	if d <= 0 {
		return "0"
	}
	m := d.Milliseconds()
	if time.Duration(m)*time.Millisecond < d {
		m++
	}
	return strconv.FormatInt(m, 10)
}

// ms64 is ms as a number.
func ms64(d time.Duration) int64 {
	n, _ := strconv.ParseInt(ms(d), 10, 64)
	return n
}

// msCache is ms with a memory of the last duration it rendered: a store called
// with the same lease or TTL every time allocates no string for it. The zero
// value is ready; it is safe for concurrent use.
type msCache struct {
	last atomic.Pointer[msEntry]
}

type msEntry struct {
	d time.Duration
	s string
}

func (c *msCache) ms(d time.Duration) string {
	if e := c.last.Load(); e != nil && e.d == d {
		return e.s
	}
	s := ms(d)
	c.last.Store(&msEntry{d: d, s: s})
	return s
}
