package scripts_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/redisonce/redisonce"
	"github.com/redisonce/redisonce/store"
)

// TestRecordsHashIsCorrupt: a record is one string; a hash under a record's
// key, even one holding the nine fields of a record (status, payload, the
// four times, fence, fp, token), is not a record. Every records script that
// reads the key answers CORRUPT and leaves the key exactly as it was; the Go
// store reports ErrUnexpectedReply, and an unfenced Delete removes the key.
func TestRecordsHashIsCorrupt(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, standaloneURL(t))
	loadScripts(t, c)
	now := time.Now().UnixMilli()
	ms := func(v int64) string { return strconv.FormatInt(v, 10) }
	seed := func(key string) {
		do(t, c, "HSET", key, "status", "pending", "payload", "", "created_ms", ms(now-1000),
			"updated_ms", ms(now-500), "expires_ms", "0", "lease_ms", ms(now-10), "fence", "7", "fp", "", "token", "tokA")
	}
	for _, tc := range []struct {
		script string
		args   []string
	}{
		{"acquire", []string{"0", "tokB", "", "30000"}},
		{"get", nil},
		{"update", []string{"tokA", "status", "completed"}},
		{"renew", []string{"tokA", "30000"}},
		{"delete", []string{"tokA"}},
		{"watch", nil},
	} {
		t.Run(tc.script, func(t *testing.T) {
			key := keyFor(t, "rec:")
			seed(key)
			before := recReadRaw(t, c, key)
			s, _ := redisonce.Get(tc.script)
			cmd := c.B().Evalsha().Sha1(s.SHA1).Numkeys(1).Key(key).Arg(tc.args...).Build()
			err := c.Do(ctx, cmd).Error()
			if code := errCode(err); code != "CORRUPT" {
				t.Errorf("%s on a nine-field hash: %v, want CORRUPT", tc.script, err)
			}
			if diff := cmp.Diff(before, recReadRaw(t, c, key)); diff != "" {
				t.Errorf("the refused call changed the key (-before +after):\n%s", diff)
			}
		})
	}

	prefix := uniquePrefix(t)
	s, err := store.NewRecords(c, store.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	seed(prefix + "h")
	if _, _, err := s.Get(ctx, "h"); !errors.Is(err, store.ErrUnexpectedReply) {
		t.Errorf("Get of a hash: %v, want ErrUnexpectedReply", err)
	}
	if _, _, err := s.Acquire(ctx, "h", time.Minute); !errors.Is(err, store.ErrUnexpectedReply) {
		t.Errorf("Acquire of a hash: %v, want ErrUnexpectedReply", err)
	}
	if err := s.Delete(ctx, "h"); err != nil {
		t.Errorf("Delete of a hash: %v", err)
	}
	if n, err := c.Do(ctx, c.B().Exists().Key(prefix+"h").Build()).AsInt64(); err != nil || n != 0 {
		t.Errorf("after Delete the hash exists: %d, %v", n, err)
	}
}
