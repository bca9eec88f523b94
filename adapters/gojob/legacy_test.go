package gojob_test

// go-job's own Redis store (queue/idempotency/redis) beside the adapter:
// its JSON strings under the same key, and the migration of README.md.

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/goliatone/go-job/queue/idempotency"
	gojobredis "github.com/goliatone/go-job/queue/idempotency/redis"
	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/adapters/gojob"
	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
)

// goJobClient is go-job's redis.Client over rueidis, as an application
// would write it for go-redis.
type goJobClient struct{ c rueidis.Client }

func (g goJobClient) Get(ctx context.Context, key string) (string, error) {
	v, err := g.c.Do(ctx, g.c.B().Get().Key(key).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return "", nil
	}
	return v, err
}

func (g goJobClient) Set(ctx context.Context, key, value string, ttl time.Duration) error {
	if ttl > 0 {
		return g.c.Do(ctx, g.c.B().Set().Key(key).Value(value).Px(ttl).Build()).Error()
	}
	return g.c.Do(ctx, g.c.B().Set().Key(key).Value(value).Build()).Error()
}

func (g goJobClient) SetNX(ctx context.Context, key, value string, ttl time.Duration) (bool, error) {
	cmd := g.c.B().Set().Key(key).Value(value).Nx()
	var err error
	if ttl > 0 {
		err = g.c.Do(ctx, cmd.Px(ttl).Build()).Error()
	} else {
		err = g.c.Do(ctx, cmd.Build()).Error()
	}
	if rueidis.IsRedisNil(err) {
		return false, nil
	}
	return err == nil, err
}

func (g goJobClient) Del(ctx context.Context, key string) error {
	return g.c.Do(ctx, g.c.B().Del().Key(key).Build()).Error()
}

// Difference: go-job's Redis store and redisonce's default prefix write the
// same Redis key ("idempotency:" + key). Without WithLegacy, a key holding
// go-job's JSON string is refused with store.ErrUnexpectedReply — never
// misread, never overwritten — and Delete removes it.
func TestGoJobJSONStringSamePrefix(t *testing.T) {
	c := newClient(t)
	key := fmt.Sprintf("samekey-%d", time.Now().UnixNano())
	old := gojobredis.NewStore(goJobClient{c}) // prefix "idempotency"
	if _, acquired, err := old.Acquire(ctx, key, time.Minute); err != nil || !acquired {
		t.Fatalf("go-job's store: Acquire = %v, %v", acquired, err)
	}
	s := gojob.NewStore(must.Store(store.NewRecords(c))) // prefix "idempotency:"

	if _, _, err := s.Get(ctx, key); !errors.Is(err, store.ErrUnexpectedReply) {
		t.Errorf("Get of go-job's JSON string = %v, want store.ErrUnexpectedReply", err)
	}
	if _, _, err := s.Acquire(ctx, key, time.Minute); !errors.Is(err, store.ErrUnexpectedReply) {
		t.Errorf("Acquire over go-job's JSON string = %v, want store.ErrUnexpectedReply", err)
	}
	done := idempotency.StatusCompleted
	if err := s.Update(ctx, key, idempotency.Update{Status: &done}); !errors.Is(err, store.ErrUnexpectedReply) {
		t.Errorf("Update of go-job's JSON string = %v, want store.ErrUnexpectedReply", err)
	}
	if rec, found, err := old.Get(ctx, key); err != nil || !found || rec.Status != idempotency.StatusPending {
		t.Errorf("go-job's record after the refusals: %+v, %v, %v; want it unchanged", rec, found, err)
	}
	if err := s.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	if _, found, err := old.Get(ctx, key); found || err != nil {
		t.Errorf("after Delete go-job's record is still there (%v, %v)", found, err)
	}
}

// The same prefix with WithLegacy: a record go-job wrote is read, acquired
// (as a duplicate) and updated through go-job's store; new keys are record
// hashes, which go-job's store cannot read (WRONGTYPE): old instances must be
// gone before new keys are written under the old prefix.
func TestLegacySamePrefix(t *testing.T) {
	c := newClient(t)
	base := fmt.Sprintf("legacy-same-%d-", time.Now().UnixNano())
	old := gojobredis.NewStore(goJobClient{c})
	if _, _, err := old.Acquire(ctx, base+"old", time.Minute); err != nil {
		t.Fatal(err)
	}
	s := gojob.NewStore(must.Store(store.NewRecords(c)), gojob.WithLegacy(old))

	rec, acquired, err := s.Acquire(ctx, base+"old", time.Minute)
	if err != nil || acquired || rec.Status != idempotency.StatusPending {
		t.Errorf("Acquire of go-job's record = %+v, %v, %v; want it as a duplicate", rec, acquired, err)
	}
	done, payload := idempotency.StatusCompleted, []byte("receipt")
	if err := s.Update(ctx, base+"old", idempotency.Update{Status: &done, Payload: &payload}); err != nil {
		t.Fatalf("Update of go-job's record: %v", err)
	}
	if rec, found, err := s.Get(ctx, base+"old"); err != nil || !found || rec.Status != done || string(rec.Payload) != "receipt" {
		t.Errorf("Get of go-job's record = %+v, %v, %v; want it completed", rec, found, err)
	}

	mustAcquire(t, s, base+"new", time.Minute)
	if _, _, err := old.Get(ctx, base+"new"); err == nil {
		t.Error("go-job's store read a record hash without an error")
	}
	if _, acquired, err := s.Acquire(ctx, base+"new", time.Minute); err != nil || acquired {
		t.Errorf("second Acquire of a new key = %v, %v; want a duplicate", acquired, err)
	}
	for _, k := range []string{"old", "new"} {
		if err := s.Delete(ctx, base+k); err != nil {
			t.Errorf("Delete %s: %v", k, err)
		}
	}
}

// The migration README.md recommends: a new prefix, and WithLegacy while
// go-job's records may still be retried. Records go-job wrote are honoured;
// new ones go under the new prefix; nothing is written to the old one.
func TestLegacyNewPrefix(t *testing.T) {
	c := newClient(t)
	oldPrefix := fmt.Sprintf("legacy-%d", time.Now().UnixNano())
	old := gojobredis.NewStore(goJobClient{c}, gojobredis.WithPrefix(oldPrefix))
	if _, _, err := old.Acquire(ctx, "job-1", time.Minute); err != nil {
		t.Fatal(err)
	}
	s := gojob.NewStore(must.Store(store.NewRecords(c, store.WithPrefix(oldPrefix+"-v2:"))), gojob.WithLegacy(old))

	if _, acquired, err := s.Acquire(ctx, "job-1", time.Minute); err != nil || acquired {
		t.Errorf("Acquire of a job go-job's store holds = %v, %v; want a duplicate", acquired, err)
	}
	failed, text := idempotency.StatusFailed, []byte("boom")
	if err := s.Update(ctx, "job-1", idempotency.Update{Status: &failed, Payload: &text}); err != nil {
		t.Fatal(err)
	}
	if rec, _, _ := old.Get(ctx, "job-1"); rec.Status != failed {
		t.Errorf("the Update of a legacy job did not reach go-job's store: %+v", rec)
	}
	mustAcquire(t, s, "job-2", time.Minute)
	if _, found, err := old.Get(ctx, "job-2"); found || err != nil {
		t.Errorf("a new job reached go-job's store (%v, %v)", found, err)
	}
	n, err := c.Do(ctx, c.B().Exists().Key(oldPrefix+"-v2:job-2").Build()).AsInt64()
	if err != nil || n != 1 {
		t.Errorf("EXISTS %s-v2:job-2 = %d, %v; want the record hash", oldPrefix, n, err)
	}
	if err := s.Delete(ctx, "job-1"); err != nil {
		t.Fatal(err)
	}
	if _, found, _ := old.Get(ctx, "job-1"); found {
		t.Error("Delete left go-job's record")
	}
	_ = s.Delete(ctx, "job-2")
}
