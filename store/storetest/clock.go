// Package storetest is the stores' contract in executable form: conformance
// suites that any implementation can run, like testing/fstest.TestFS. The
// in-memory stores run them in package store; the Redis stores run them against
// real servers (standalone and cluster) in the scripts_test module.
package storetest

import (
	"sync"
	"time"
)

// Clock is a fake clock for in-memory stores: pass Now to store.WithClock and
// Advance as a suite's Wait.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a clock at a fixed instant.
func NewClock() *Clock {
	return &Clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}
