package scripts_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
)

// recordsLoad drives Records: AcquireWith of fresh keys (each must be
// acquired), a fenced Update of the key the worker acquired last to completed,
// Do on fresh keys, and AcquireWith of a few shared keys (exactly one owner
// each, the others see its record).
type recordsLoad struct {
	s      *store.Records
	prefix string
	tags   []string

	mu         sync.Mutex
	tried      map[string]bool   // every key an operation was sent for
	pending    map[string]bool   // keys the store said this caller acquired
	completed  map[string]string // key -> payload the store acknowledged as completed
	tokens     map[int]recToken  // worker -> its last acquired key and token
	sharedWins map[string]int
	sharedErrs map[string]bool
	violations []string
}

type recToken struct{ key, token string }

func newRecordsLoad(c rueidis.Client, prefix string, tags []string) *recordsLoad {
	return &recordsLoad{
		s: must.Store(store.NewRecords(c, store.WithPrefix(prefix))), prefix: prefix, tags: tags,
		tried: map[string]bool{}, pending: map[string]bool{}, completed: map[string]string{},
		tokens: map[int]recToken{}, sharedWins: map[string]int{}, sharedErrs: map[string]bool{},
	}
}

func (l *recordsLoad) violate(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.violations = append(l.violations, fmt.Sprintf(format, args...))
}

func (l *recordsLoad) Op(ctx context.Context, w, i int) error {
	key := taggedID(l.tags, w, i, "")
	lease := store.AcquireOptions{Lease: time.Minute}
	switch i % 4 {
	case 0:
		l.mu.Lock()
		l.tried[key] = true
		l.mu.Unlock()
		rec, acquired, err := l.s.AcquireWith(ctx, key, lease)
		if err != nil {
			return err
		}
		if !acquired || rec.Status != store.StatusPending || !createdFence(rec) || rec.Token == "" {
			l.violate("AcquireWith(%q) of a fresh key = %+v, %v", key, rec, acquired)
			return nil
		}
		l.mu.Lock()
		l.pending[key] = true
		l.tokens[w] = recToken{key, rec.Token}
		l.mu.Unlock()
	case 1:
		l.mu.Lock()
		tok, ok := l.tokens[w]
		delete(l.tokens, w)
		l.mu.Unlock()
		if !ok {
			return nil
		}
		st, payload := store.StatusCompleted, []byte("result of "+tok.key)
		if err := l.s.Update(ctx, tok.key, store.Update{Status: &st, Payload: &payload, Token: tok.token}); err != nil {
			return err
		}
		l.mu.Lock()
		l.completed[tok.key] = string(payload)
		l.mu.Unlock()
	case 2:
		l.mu.Lock()
		l.tried[key] = true
		l.mu.Unlock()
		want := "done " + key
		res, replayed, err := l.s.Do(ctx, key, lease, func(context.Context) ([]byte, error) { return []byte(want), nil })
		if err != nil {
			return err
		}
		if replayed || string(res) != want {
			l.violate("Do(%q) of a fresh key = %q, replayed %v", key, res, replayed)
			return nil
		}
		l.mu.Lock()
		l.completed[key] = want
		l.mu.Unlock()
	case 3:
		shared := "shared-" + strconv.Itoa(i%16)
		if len(l.tags) > 0 {
			shared = fmt.Sprintf("{%s}%s", l.tags[i%len(l.tags)], shared)
		}
		l.mu.Lock()
		l.tried[shared] = true
		l.mu.Unlock()
		rec, acquired, err := l.s.AcquireWith(ctx, shared, lease)
		l.mu.Lock()
		defer l.mu.Unlock()
		if err != nil {
			l.sharedErrs[shared] = true
			return err
		}
		if !createdFence(rec) || rec.Status != store.StatusPending || acquired != (rec.Token != "") {
			l.violations = append(l.violations, fmt.Sprintf("AcquireWith(%q) = %+v, %v", shared, rec, acquired))
		}
		if acquired {
			l.sharedWins[shared]++
			l.pending[shared] = true
		} else if _, ok := l.sharedWins[shared]; !ok {
			l.sharedWins[shared] = 0
		}
	}
	return nil
}

var (
	recordToken = regexp.MustCompile(`^[0-9a-f]{32}$`)
	recordMS    = regexp.MustCompile(`^(0|[1-9][0-9]*)$`)
)

func (l *recordsLoad) Check(t *testing.T, c rueidis.Client) int {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, v := range l.violations {
		t.Error(v)
	}
	fields := []string{"status", "payload", "created_ms", "updated_ms", "expires_ms", "lease_ms", "fence", "fp", "token"}
	for key := range l.tried {
		k := rawRecord(t, c, l.prefix+key)
		if k.Type == "none" {
			if l.pending[key] || l.completed[key] != "" {
				t.Errorf("acknowledged record %q is gone", key)
			}
			continue
		}
		if k.Type != "string" || len(k.Hash) != len(fields) {
			t.Errorf("record %q: raw key %+v, want a layout-1 record of the %d fields", key, k, len(fields))
			continue
		}
		for _, f := range fields {
			if _, ok := k.Hash[f]; !ok {
				t.Errorf("record %q: field %q missing: %v", key, f, k.Hash)
			}
		}
		for _, f := range []string{"created_ms", "updated_ms", "expires_ms", "lease_ms", "fence"} {
			if !recordMS.MatchString(k.Hash[f]) {
				t.Errorf("record %q: %s = %q", key, f, k.Hash[f])
			}
		}
		// Never taken over: the fence it was created with, the server's
		// clock in ns at created_ms.
		if !strings.HasPrefix(k.Hash["fence"], k.Hash["created_ms"]) || len(k.Hash["fence"]) != 19 || !recordToken.MatchString(k.Hash["token"]) {
			t.Errorf("record %q: fence %q token %q, want the clock's at created_ms %s and an owner token", key, k.Hash["fence"], k.Hash["token"], k.Hash["created_ms"])
		}
		switch st := k.Hash["status"]; {
		case l.completed[key] != "" && (st != "completed" || k.Hash["payload"] != l.completed[key]):
			t.Errorf("record %q: %s %q, the store acknowledged completed %q", key, st, k.Hash["payload"], l.completed[key])
		case st == "pending" && (k.Hash["lease_ms"] == "0" || k.Hash["payload"] != ""):
			t.Errorf("record %q: pending with lease %q payload %q", key, k.Hash["lease_ms"], k.Hash["payload"])
		case st == "completed" && k.Hash["lease_ms"] != "0":
			t.Errorf("record %q: completed with a lease %q", key, k.Hash["lease_ms"])
		case st != "pending" && st != "completed":
			t.Errorf("record %q: status %q", key, st)
		}
	}
	for key, n := range l.sharedWins {
		if n > 1 || (n == 0 && !l.sharedErrs[key]) {
			t.Errorf("shared record %q acquired %d times, want once", key, n)
		}
	}
	return len(l.tried)
}

func recordsProbes(c rueidis.Client, prefix string) []probe {
	s := must.Store(store.NewRecords(c, store.WithPrefix(prefix), store.WithTTL(time.Hour)))
	st, payload := store.StatusCompleted, []byte("x")
	return []probe{
		{name: "Acquire", write: true, run: func(ctx context.Context, id string) (bool, error) {
			_, _, err := s.Acquire(ctx, id, 0)
			return false, err
		}},
		{name: "AcquireWith", write: true, run: func(ctx context.Context, id string) (bool, error) {
			_, _, err := s.AcquireWith(ctx, id, store.AcquireOptions{Lease: time.Minute, Fingerprint: "fp"})
			return false, err
		}},
		{name: "Get", run: func(ctx context.Context, id string) (bool, error) {
			_, _, err := s.Get(ctx, id)
			return false, err
		}},
		{name: "Update", write: true, run: func(ctx context.Context, id string) (bool, error) {
			return false, s.Update(ctx, id, store.Update{Status: &st, Payload: &payload})
		}},
		{name: "UpdateFenced", write: true, run: func(ctx context.Context, id string) (bool, error) {
			return false, s.Update(ctx, id, store.Update{Status: &st, Token: "not-the-owner"})
		}},
		{name: "DeleteFenced", write: true, frees: true, run: func(ctx context.Context, id string) (bool, error) {
			return false, s.DeleteFenced(ctx, id, "not-the-owner")
		}},
		{name: "Do", write: true, readsWhenFull: true, run: func(ctx context.Context, id string) (bool, error) {
			called := false
			_, _, err := s.Do(ctx, id, store.AcquireOptions{Lease: time.Minute}, func(context.Context) ([]byte, error) {
				called = true
				return []byte("r"), nil
			})
			return called, err
		}},
		{name: "Delete", write: true, frees: true, run: func(ctx context.Context, id string) (bool, error) {
			return false, s.Delete(ctx, id)
		}, wrongTypeOK: true},
	}
}

// recordsSeed gives key id a pending record with a long lease.
func recordsSeed(ctx context.Context, c rueidis.Client, prefix, id string) error {
	_, _, err := must.Store(store.NewRecords(c, store.WithPrefix(prefix))).AcquireWith(ctx, id, store.AcquireOptions{Lease: time.Hour})
	return err
}
