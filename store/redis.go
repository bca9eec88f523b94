package store

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// redisStore is what every Redis backend is built on: its client, whether it
// owns it, and its key prefix. It holds no store's logic.
type redisStore struct {
	c      redisClient // with the store's WithWaitReplicas
	owned  bool
	prefix string
}

// errNilClient is the error of a Redis store's constructor given a nil
// client.
var errNilClient = fmt.Errorf("redisonce: %w: a nil rueidis.Client", ErrInvalidArgument)

// redisConfig is the config of a Redis store named store on client c, its
// options checked.
func redisConfig(store, prefix string, c rueidis.Client, opts []Option) (config, error) {
	cfg := newConfig(prefix, opts)
	if err := cfg.validFor(store, "redis"); err != nil {
		return cfg, err
	}
	if c == nil {
		return cfg, errNilClient
	}
	return cfg, nil
}

// openRedis is redisConfig for a store that connects to url itself: an
// invalid option fails before connecting.
func openRedis(store, prefix, url string, opts []Option) (config, rueidis.Client, error) {
	cfg := newConfig(prefix, opts)
	if err := cfg.validFor(store, "redis"); err != nil {
		return cfg, nil, err
	}
	c, err := openClient(url)
	return cfg, c, err
}

// newRedisStore makes the backend's client part; owned: close closes c.
func newRedisStore(c rueidis.Client, cfg config, owned bool) redisStore {
	return redisStore{c: newRedisClient(c, cfg), prefix: cfg.prefix, owned: owned}
}

// openClient connects to url with ClientOptions, the one place where the
// stores' client settings live.
func openClient(url string) (rueidis.Client, error) {
	opt, err := ClientOptions(url)
	if err != nil {
		return nil, err
	}
	c, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, openError(url, err)
	}
	return c, nil
}

// close closes the client if the store opened it.
func (s *redisStore) close() error {
	if s.owned {
		s.c.Close()
	}
	return nil
}

// key is the Redis key of id.
func (s *redisStore) key(id string) string { return s.prefix + id }

// keys returns prefix+id for every id, all cut from one string: one
// allocation for a whole batch instead of one per key.
func (s *redisStore) keys(ids []string) []string {
	n := 0
	for _, id := range ids {
		n += len(s.prefix) + len(id)
	}
	var b strings.Builder
	b.Grow(n)
	for _, id := range ids {
		b.WriteString(s.prefix)
		b.WriteString(id)
	}
	all := b.String()
	keys := make([]string, len(ids))
	off := 0
	for i, id := range ids {
		end := off + len(s.prefix) + len(id)
		keys[i] = all[off:end]
		off = end
	}
	return keys
}

// exec runs sc on key (key(id)) with the store's client: EVALSHA, and EVAL
// when the node answers NOSCRIPT; with WithWaitReplicas a write is followed by
// WAIT on its connection (script.go).
func (s *redisStore) exec(ctx context.Context, sc *script, key string, args ...string) reply {
	return sc.exec(ctx, s.c, key, args...)
}

// execSent is exec, writing to *sent the time the command that ran was sent
// (script.execSent).
func (s *redisStore) execSent(ctx context.Context, sc *script, key string, sent *time.Time, args ...string) reply {
	return sc.execSent(ctx, s.c, key, sent, args...)
}
