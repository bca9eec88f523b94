package gojob_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redisonce/redisonce/adapters/gojob"
	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
)

// target is one store the ported go-job tests run on.
type target struct {
	name string
	// setup returns the adapter over a fresh, empty store made with opts,
	// and its clock.
	setup func(t *testing.T, opts ...store.Option) (*gojob.Store, clock)
	// scale shrinks the tests' durations: Redis runs on its own clock, so
	// "advance 6 s" is a real sleep there, of 6 s * scale.
	scale float64
}

// clock is what the tests move: a manual clock for the memory store, real
// time (sleep) for Redis.
type clock interface {
	Now() time.Time
	Advance(d time.Duration)
}

func (tg target) d(d time.Duration) time.Duration { return time.Duration(float64(d) * tg.scale) }

var prefixSeq atomic.Int64

// targets: the in-memory records store on a manual clock (as go-job's tests
// use), and the Redis records store.
func targets() []target {
	return []target{
		{name: "memory", scale: 1, setup: func(t *testing.T, opts ...store.Option) (*gojob.Store, clock) {
			c := newManualClock(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC))
			rs := must.Store(store.NewMemoryRecords(append([]store.Option{store.WithClock(c.Now)}, opts...)...))
			return gojob.NewStore(rs, gojob.WithClock(c.Now)), c
		}},
		{name: "redis", scale: 1.0 / 40, setup: func(t *testing.T, opts ...store.Option) (*gojob.Store, clock) {
			prefix := fmt.Sprintf("gojob-test:%d:%s:", prefixSeq.Add(1), t.Name())
			rs := must.Store(store.NewRecords(newClient(t), append([]store.Option{store.WithPrefix(prefix)}, opts...)...))
			return gojob.NewStore(rs), realClock{}
		}},
	}
}

// forEach runs test on every target.
func forEach(t *testing.T, test func(t *testing.T, tg target)) {
	for _, tg := range targets() {
		t.Run(tg.name, func(t *testing.T) { test(t, tg) })
	}
}

type realClock struct{}

func (realClock) Now() time.Time          { return time.Now() }
func (realClock) Advance(d time.Duration) { time.Sleep(d) }

// manualClock is go-job's test clock, as in its store tests.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func newManualClock(start time.Time) *manualClock {
	return &manualClock{now: start}
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// gojobStore is the adapter over rs on clock c.
func gojobStore(rs *store.Records, c clock) *gojob.Store {
	return gojob.NewStore(rs, gojob.WithClock(c.Now))
}
