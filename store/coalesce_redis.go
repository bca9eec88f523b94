package store

import (
	"context"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

var (
	scriptCoalesceTrigger = mustScript("coalesce_trigger")
	scriptCoalesceTake    = mustScript("coalesce_take")
	scriptCoalesceExtend  = mustScript("coalesce_extend")
	scriptCoalesceFinish  = mustScript("coalesce_finish")
)

// NewCoalescer returns a Coalescer on Redis that runs fn, on a client the
// caller keeps (Close does not close it). o are the store's modes (see
// CoalesceOptions for the defaults). Options: WithPrefix (default
// "redisonce:coalesce:"), WithWaitReplicas (every trigger, take and final
// write waits for the replicas: a kept trigger is then on n replicas, and a
// failover does not lose it). It fails with ErrInvalidArgument on a nil
// client or fn, a negative duration in o, or an invalid option (WithClock:
// Redis runs on the server's clock).
func NewCoalescer(c rueidis.Client, fn func(ctx context.Context, key string, payload []byte) error, o CoalesceOptions, opts ...Option) (*Coalescer, error) {
	cfg, err := redisConfig("coalesce", defaultCoalescePrefix, c, opts)
	if err != nil {
		return nil, err
	}
	if o, err = coalescerArgs(fn, o); err != nil {
		return nil, err
	}
	return newCoalescer(&coalesceRedis{redisStore: newRedisStore(c, cfg, false)}, fn, o, true), nil
}

// coalesceRedis runs the coalescing scripts.
type coalesceRedis struct {
	redisStore
	msCache [5]msCache // lease, debounce, max wait, throttle, retry: the same every call
}

func (b *coalesceRedis) close() error { return b.redisStore.close() }

func (b *coalesceRedis) trigger(ctx context.Context, key, token string, payload []byte, o CoalesceOptions, sent *time.Time) (coalesceReply, error) {
	return coalesceParse("coalesce", key, b.execSent(ctx, scriptCoalesceTrigger, b.key(key), sent, token,
		b.msCache[0].ms(o.Lease), b.msCache[1].ms(o.Debounce), b.msCache[2].ms(o.MaxWait), b.msCache[3].ms(o.Throttle),
		rueidis.BinaryString(payload)))
}

func (b *coalesceRedis) take(ctx context.Context, key, token string, lease time.Duration, sent *time.Time) (coalesceReply, error) {
	return coalesceParse("take", key, b.execSent(ctx, scriptCoalesceTake, b.key(key), sent, token, b.msCache[0].ms(lease)))
}

func (b *coalesceRedis) extend(ctx context.Context, key, token string, lease time.Duration, sent *time.Time) (bool, error) {
	n, err := replyInt("extend", key, b.execSent(ctx, scriptCoalesceExtend, b.key(key), sent, token, b.msCache[0].ms(lease)))
	return n == 1, err
}

func (b *coalesceRedis) finish(ctx context.Context, key, token, fence string, retry bool, o CoalesceOptions, sent *time.Time) (coalesceReply, error) {
	outcome := "done"
	if retry {
		outcome = "retry"
	}
	return coalesceParse("finish", key, b.execSent(ctx, scriptCoalesceFinish, b.key(key), sent, token, fence, outcome,
		b.msCache[4].ms(o.RetryDelay), b.msCache[0].ms(o.Lease), b.msCache[3].ms(o.Throttle)))
}

// keys scans every node for the prefix's keys (SCAN MATCH, never KEYS).
func (b *coalesceRedis) keys(ctx context.Context, fn func(key string) error) error {
	seen := map[string]bool{}
	match := globEscape(b.prefix) + "*"
	for _, n := range b.c.Nodes() {
		var cursor uint64
		for {
			e, err := n.Do(ctx, n.B().Scan().Cursor(cursor).Match(match).Count(1000).Build()).AsScanEntry()
			if err != nil {
				return opError("sweep", "", err)
			}
			for _, k := range e.Elements {
				if id := strings.TrimPrefix(k, b.prefix); id != "" && !seen[id] {
					seen[id] = true
					if err := fn(id); err != nil {
						return err
					}
				}
			}
			if cursor = e.Cursor; cursor == 0 {
				break
			}
		}
	}
	return nil
}

// globEscape quotes the glob metacharacters of a SCAN MATCH pattern.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// coalesceParse reads {1, fence[, payload]}, {0, wait_ms} or {-1}. With
// WithWaitReplicas an unconfirmed write returns its reply with
// ErrNotReplicated.
func coalesceParse(op, key string, r reply) (coalesceReply, error) {
	if err := r.Error(); err != nil {
		return coalesceReply{}, opError(op, key, err)
	}
	m, err := r.ToMessage()
	if err != nil {
		return coalesceReply{}, opError(op, key, err)
	}
	arr, err := m.ToArray()
	if err != nil || len(arr) < 1 || len(arr) > 3 || !arr[0].IsInt64() {
		return coalesceReply{}, errorf(op, key, ErrUnexpectedReply, "want {1, fence[, payload]}, {0, wait_ms} or {-1}, got %s", m.String())
	}
	kind, _ := arr[0].AsInt64()
	var out coalesceReply
	switch {
	case kind == -1 && len(arr) == 1:
		out.idle = true
	case kind == 0 && len(arr) == 2 && arr[1].IsInt64():
		w, _ := arr[1].AsInt64()
		if w < 1 {
			return coalesceReply{}, errorf(op, key, ErrUnexpectedReply, "wait_ms %d", w)
		}
		out.wait = time.Duration(w) * time.Millisecond
	case kind == 1 && len(arr) >= 2:
		f, err := replyString(&arr[1])
		if err != nil || len(f) < 1 || len(f) > 19 {
			return coalesceReply{}, errorf(op, key, ErrUnexpectedReply, "fence %s", arr[1].String())
		}
		out.granted, out.fence = true, f
		if len(arr) == 3 {
			p, err := replyString(&arr[2])
			if err != nil {
				return coalesceReply{}, errorf(op, key, ErrUnexpectedReply, "payload: %v", err)
			}
			out.payload = []byte(p)
		}
	default:
		return coalesceReply{}, errorf(op, key, ErrUnexpectedReply, "want {1, fence[, payload]}, {0, wait_ms} or {-1}, got %s", m.String())
	}
	return out, r.replicated(op, key)
}
