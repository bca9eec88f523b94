package store

import (
	"context"
	"sort"
	"strconv"
	"sync"
	"time"
)

// NewMemoryCoalescer returns a Coalescer that keeps its keys in this
// process's memory, with the same behaviour as NewCoalescer's (the storetest
// suite checks both): for tests and single-process programs. Options:
// WithClock (default time.Now). With WithClock, nothing runs on a timer: a
// kept next whose time has come runs on the next Trigger of its key or on
// Sweep, so a test moves the clock and calls Sweep. It fails with
// ErrInvalidArgument like NewCoalescer (WithWaitReplicas: it has no
// replicas).
func NewMemoryCoalescer(fn func(ctx context.Context, key string, payload []byte) error, o CoalesceOptions, opts ...Option) (*Coalescer, error) {
	cfg, err := memoryConfig("coalesce", defaultCoalescePrefix, opts)
	if err != nil {
		return nil, err
	}
	if o, err = coalescerArgs(fn, o); err != nil {
		return nil, err
	}
	b := &coalesceMemory{m: map[string]*memCoalesce{}, fences: map[string]string{}, now: cfg.now}
	return newCoalescer(b, fn, o, !cfg.clockSet), nil
}

// coalesceMemory restates the coalescing scripts in plain Go: each method is
// its script, under one mutex. Times are ms since the epoch, as the scripts
// count them.
type coalesceMemory struct {
	mu sync.Mutex
	m  map[string]*memCoalesce
	// fences: the last fence granted for each key, kept after the key is
	// deleted. Redis relies on its clock moving between a delete and the
	// next grant (next_fence); a clock moved by hand may stand still.
	fences map[string]string
	now    func() time.Time
	err    error
}

// memCoalesce is one key's hash: its fields, as coalesce_trigger.lua's header
// lists them.
type memCoalesce struct {
	tok     string // "" = no holder
	lease   int64
	fence   string
	run     []byte // nil: no run
	next    []byte // nil: no next
	due     int64
	first   int64
	last    int64
	expires int64 // 0: never (PEXPIREAT of an idle throttled key)
	// running: a run in this process holds the key and extends its lease,
	// so it does not pass (as MemoryClaims' leases, on a clock moved by hand).
	running bool
}

func (b *coalesceMemory) close() error { return nil }

func (b *coalesceMemory) nowMS() int64 { return b.now().UnixMilli() }

// get returns key's state, nil when absent (or expired).
func (b *coalesceMemory) get(key string, now int64) *memCoalesce {
	s := b.m[key]
	if s != nil && s.expires != 0 && now >= s.expires {
		delete(b.m, key)
		return nil
	}
	return s
}

// nextFence is the next_fence snippet: the clock in ns at µs precision, or the
// stored fence + 1 when that is larger.
func (b *coalesceMemory) nextFence(stored string) string {
	clock := uint64(b.now().UnixMicro()) * 1000
	if s, err := strconv.ParseUint(stored, 10, 64); err == nil && s >= clock {
		clock = s + 1
	}
	return strconv.FormatUint(clock, 10)
}

func (s *memCoalesce) held(now int64) bool {
	return s.tok != "" && (s.running || s.lease > now)
}

func (b *coalesceMemory) grant(key string, s *memCoalesce, token string, lease time.Duration, payload []byte, now int64) string {
	s.tok, s.lease, s.fence, s.run, s.last, s.running = token, now+durMS(lease), b.nextFence(b.fences[key]), payload, now, true
	b.fences[key] = s.fence
	s.next, s.due, s.first, s.expires = nil, 0, 0, 0
	return s.fence
}

func (b *coalesceMemory) trigger(_ context.Context, key, token string, payload []byte, o CoalesceOptions, sent *time.Time) (coalesceReply, error) {
	stamp(sent)
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.nowMS()
	s := b.get(key, now)
	if s == nil {
		s = &memCoalesce{}
		b.m[key] = s
	}
	first := now
	if s.next != nil {
		first = s.first
	}
	due := now
	if d := durMS(o.Debounce); d > 0 {
		due = now + d
		if mw := durMS(o.MaxWait); mw > 0 && first+mw < due {
			due = max(first+mw, now)
		}
	}
	if t := durMS(o.Throttle); t > 0 && s.last > 0 && s.last+t > due {
		due = s.last + t
	}
	held := s.held(now)
	if held || due > now {
		s.next, s.due, s.first, s.expires = append([]byte{}, payload...), due, first, 0
		wake := due
		if held {
			wake = max(wake, s.lease, now+1)
		}
		return coalesceReply{wait: time.Duration(wake-now) * time.Millisecond}, nil
	}
	return coalesceReply{granted: true, fence: b.grant(key, s, token, o.Lease, append([]byte{}, payload...), now)}, nil
}

func (b *coalesceMemory) take(_ context.Context, key, token string, lease time.Duration, sent *time.Time) (coalesceReply, error) {
	stamp(sent)
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.nowMS()
	s := b.get(key, now)
	if s == nil {
		return coalesceReply{idle: true}, nil
	}
	held := s.held(now)
	payload := s.next
	if payload == nil && !held {
		payload = s.run
	}
	if payload == nil {
		return coalesceReply{idle: true}, nil
	}
	if held || s.due > now {
		wake := s.due
		if held {
			wake = max(wake, s.lease, now+1)
		}
		return coalesceReply{wait: time.Duration(wake-now) * time.Millisecond}, nil
	}
	fence := b.grant(key, s, token, lease, payload, now)
	return coalesceReply{granted: true, fence: fence, payload: append([]byte{}, payload...)}, nil
}

func (b *coalesceMemory) extend(_ context.Context, key, token string, lease time.Duration, sent *time.Time) (bool, error) {
	stamp(sent)
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.nowMS()
	s := b.get(key, now)
	if s == nil || s.tok != token {
		return false, nil
	}
	s.lease = now + durMS(lease)
	return true, nil
}

func (b *coalesceMemory) finish(_ context.Context, key, token, fence string, retry bool, o CoalesceOptions, sent *time.Time) (coalesceReply, error) {
	stamp(sent)
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.nowMS()
	s := b.get(key, now)
	if s == nil || s.tok != token || s.fence != fence {
		return coalesceReply{}, errorf("finish", key, ErrStaleOwner, "the key is not held by this run")
	}
	payload, due, first := s.next, s.due, s.first
	if payload == nil && retry {
		payload, due, first = s.run, now+durMS(o.RetryDelay), now
	}
	switch {
	case payload != nil && due <= now:
		f := b.grant(key, s, token, o.Lease, payload, now)
		return coalesceReply{granted: true, fence: f, payload: append([]byte{}, payload...)}, nil
	case payload != nil:
		s.next, s.due, s.first = payload, due, first
		s.tok, s.lease, s.run, s.running = "", 0, nil, false
		return coalesceReply{wait: time.Duration(due-now) * time.Millisecond}, nil
	}
	if t := durMS(o.Throttle); t > 0 && s.last+t > now {
		s.tok, s.lease, s.run, s.running, s.expires = "", 0, nil, false, s.last+t
	} else {
		delete(b.m, key)
	}
	return coalesceReply{idle: true}, nil
}

func (b *coalesceMemory) keys(ctx context.Context, fn func(key string) error) error {
	b.mu.Lock()
	keys := make([]string, 0, len(b.m))
	for k := range b.m {
		keys = append(keys, k)
	}
	b.mu.Unlock()
	sort.Strings(keys)
	for _, k := range keys {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(k); err != nil {
			return err
		}
	}
	return nil
}
