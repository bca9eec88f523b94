package store

import (
	"strconv"
	"sync/atomic"
	"time"
)

// Durations and instants as the scripts take them: decimal integer
// milliseconds. Every store, Redis or memory, rounds with durMS (durations)
// and atMS (instants), so a positive sub-millisecond duration is never "none"
// and both implementations agree to the millisecond.

// durMS is d in whole milliseconds, rounded up; 0 for d <= 0 ("none").
func durMS(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	m := d.Milliseconds()
	if time.Duration(m)*time.Millisecond < d {
		m++
	}
	return m
}

// expiryAt is when a key given a TTL of d at now expires, as Redis rounds it
// (PX durMS(d)); the zero time, "never", for d <= 0. For the memory twins.
func expiryAt(now time.Time, d time.Duration) time.Time {
	if d <= 0 {
		return time.Time{}
	}
	return now.Add(time.Duration(durMS(d)) * time.Millisecond)
}

// untilMS is t as update.lua's duration from now in ms: "0" for the zero time
// (none); else time.Until(t) rounded up to a ms (durMS), at least 1 for a time
// still ahead and at most -1 for one at or before now (past: a past ExpiresAt
// deletes the record, a past LeaseUntil leaves it open to takeover), capped at
// 15 digits either way.
func untilMS(t time.Time) string {
	if t.IsZero() {
		return "0"
	}
	d := time.Until(t)
	var ms int64
	if d > 0 {
		ms = durMS(d)
	} else {
		ms = -max((-d).Milliseconds(), 1) // toward zero, never 0
	}
	ms = max(min(ms, maxMS), -maxMS)
	return strconv.FormatInt(ms, 10)
}

// ms renders d for a script's *_ms argument: durMS in decimal.
func ms(d time.Duration) string {
	return strconv.FormatInt(durMS(d), 10)
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

// maxMS is the largest millisecond value the scripts accept (15 digits, about
// the year 33658): Lua numbers are exact below 2^53.
const maxMS = 999_999_999_999_999

// atMS converts an instant to ms since the epoch, rounded up; the zero time is
// 0 ("none"). An instant at or before the epoch is 1 ms, "long past", never 0.
func atMS(t time.Time) (int64, bool) {
	if t.IsZero() {
		return 0, true
	}
	m := t.UnixMilli()
	if t.After(time.UnixMilli(m)) {
		m++
	}
	if m < 1 {
		m = 1
	}
	return m, m <= maxMS
}

// msTime converts the scripts' ms since the epoch to a UTC time; 0 is the zero time.
func msTime(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms).UTC()
}
