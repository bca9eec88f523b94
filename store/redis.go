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

// errNilClient is every call's error on a store that New* made on a nil
// client (Open* makes one too, then connects it).
var errNilClient = fmt.Errorf("redisonce: %w: a nil rueidis.Client", ErrInvalidArgument)

// newRedisStore makes the backend's client part; a nil client is recorded
// as cfg's error unless an option failed first.
func newRedisStore(c rueidis.Client, cfg *config) redisStore {
	if c == nil && cfg.err == nil {
		cfg.err = errNilClient
	}
	return redisStore{c: newRedisClient(c, *cfg), prefix: cfg.prefix}
}

// open connects to url with ClientOptions and takes ownership of the client
// (close closes it), clearing the nil client's error from co. An invalid
// option fails here, before connecting.
func (s *redisStore) open(url string, co *core) error {
	if co.err != nil && co.err != errNilClient {
		return co.err
	}
	c, err := openClient(url)
	if err != nil {
		return err
	}
	s.c.Client, s.owned, co.err = c, true, nil
	return nil
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
