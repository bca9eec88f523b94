package store_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/rueidis"
	"github.com/redis/rueidis/mock"
	"go.uber.org/mock/gomock"

	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
)

// What a batch sends, on a mock client that records every DoMulti: the
// duplicates of a batch are resolved in Go (no key is sent twice), and a
// standalone client sends one group in one DoMulti however many calls of
// 500 keys the batch is cut into. The same properties against real Redis,
// with a replica and on a migrating cluster, are in scripts_test
// (batch_first_wins_test.go).

// batchRecorder is a standalone mock client whose DoMulti answers every
// EVALSHA of n keys with n times each (an integer reply for one key) and
// WAIT with 1, and records the keys of every EVALSHA per DoMulti.
type batchRecorder struct {
	mu     sync.Mutex
	multis [][][]string // per DoMulti, per EVALSHA, its keys
	waits  int          // WAITs sent
}

func newBatchRecorder(t *testing.T, each int64) (rueidis.Client, *batchRecorder) {
	ctrl := gomock.NewController(t)
	c := mock.NewClient(ctrl)
	rec := &batchRecorder{}
	c.EXPECT().Mode().Return(rueidis.ClientModeStandalone).AnyTimes()
	c.EXPECT().Nodes().Return(map[string]rueidis.Client{"n": c}).AnyTimes()
	c.EXPECT().DoMulti(gomock.Any(), gomock.Any()).DoAndReturn(func(_ context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
		out := make([]rueidis.RedisResult, len(cmds))
		var calls [][]string
		waits := 0
		for i, cmd := range cmds {
			args := cmd.Commands()
			if args[0] == "WAIT" {
				waits++
				out[i] = mock.Result(i64(1))
				continue
			}
			var n int
			_, _ = fmt.Sscan(args[2], &n)
			keys := args[3 : 3+n]
			calls = append(calls, keys)
			if n == 1 {
				out[i] = mock.Result(i64(each))
				continue
			}
			vals := make([]rueidis.RedisMessage, n)
			for j := range vals {
				vals[j] = i64(each)
			}
			out[i] = mock.Result(arr(vals...))
		}
		rec.mu.Lock()
		rec.multis = append(rec.multis, calls)
		rec.waits += waits
		rec.mu.Unlock()
		return out
	}).AnyTimes()
	return c, rec
}

// sentKeys is every key sent, in order, and how many times each was sent.
func (r *batchRecorder) sentKeys() (keys []string, count map[string]int) {
	count = map[string]int{}
	for _, m := range r.multis {
		for _, call := range m {
			for _, k := range call {
				keys = append(keys, k)
				count[k]++
			}
		}
	}
	return keys, count
}

// TestClaimManyDedupesInGo: of an id given several times only the first
// occurrence is sent, and gets the script's answer; the later ones are false
// for ClaimMany and the first one's answer for SeenMany (a read). Across the
// 500-key cut too.
func TestClaimManyDedupesInGo(t *testing.T) {
	ctx := context.Background()
	for _, size := range []int{3, 1200} {
		ids := make([]string, 0, size+3)
		for i := range size {
			ids = append(ids, fmt.Sprint("id", i%(size*2/3)))
		}
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			for _, seen := range []bool{false, true} {
				c, rec := newBatchRecorder(t, 1)
				s := must.Store(store.NewClaims(c, store.WithPrefix("p:")))
				var got []bool
				var err error
				if seen {
					got, err = s.SeenMany(ctx, ids)
				} else {
					got, err = s.ClaimMany(ctx, ids)
				}
				if err != nil {
					t.Fatal(err)
				}
				first := map[string]bool{}
				want := make([]bool, len(ids))
				var wantKeys []string
				for i, id := range ids {
					want[i] = seen || !first[id]
					if !first[id] {
						wantKeys = append(wantKeys, "p:"+id)
					}
					first[id] = true
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("seen=%v: results (-want +got):\n%s", seen, diff)
				}
				keys, count := rec.sentKeys()
				for k, n := range count {
					if n > 1 {
						t.Errorf("seen=%v: key %q sent %d times; duplicates must be resolved before sending", seen, k, n)
						break
					}
				}
				if diff := cmp.Diff(wantKeys, keys); diff != "" {
					t.Errorf("seen=%v: keys sent, in order (-want +got):\n%s", seen, diff)
				}
			}
		})
	}
}

// TestClaimManyOneGroupStandalone: with WithWaitReplicas, a standalone
// client's batch of several 500-key calls is ONE DoMulti followed by ONE
// WAIT (one connection, calls in order), not one concurrent DoMulti per call.
func TestClaimManyOneGroupStandalone(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, rec := newBatchRecorder(t, 1)
	s := must.Store(store.NewClaims(c, store.WithWaitReplicas(1, time.Second)))
	ids := make([]string, 2100)
	for i := range ids {
		ids[i] = fmt.Sprint("m", i)
	}
	got, err := s.ClaimMany(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range got {
		if !v {
			t.Fatalf("result %d is false", i)
		}
	}
	if len(rec.multis) != 1 || rec.waits != 1 {
		var sizes []string
		for _, m := range rec.multis {
			sizes = append(sizes, fmt.Sprint(len(m)))
		}
		t.Fatalf("%d DoMulti (calls each: %s) and %d WAIT; want 1 DoMulti of 5 calls and 1 WAIT",
			len(rec.multis), strings.Join(sizes, " "), rec.waits)
	}
	if n := len(rec.multis[0]); n != 5 {
		t.Errorf("%d calls; want 5 (2100 keys in calls of at most 500)", n)
	}
}

// TestClaimManyRepeatsObserved: a repeat is reported as the outcome its
// call would have had: a duplicate for ClaimMany, its first occurrence's
// answer for SeenMany; events count every id given.
func TestClaimManyRepeatsObserved(t *testing.T) {
	ctx := context.Background()
	for _, seen := range []bool{false, true} {
		c, _ := newBatchRecorder(t, 1)
		got := map[store.Outcome]int{}
		obs := store.ObserverFunc(func(_ context.Context, e store.Event) { got[e.Outcome] += e.N })
		s := must.Store(store.NewClaims(c, store.WithObserver(obs)))
		ids := []string{"a", "b", "a", "c", "a"}
		var err error
		want := map[store.Outcome]int{store.Outcome("claimed"): 3, store.Outcome("duplicate"): 2}
		if seen {
			_, err = s.SeenMany(ctx, ids)
			want = map[store.Outcome]int{store.Outcome("seen"): 5}
		} else {
			_, err = s.ClaimMany(ctx, ids)
		}
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("seen=%v: outcomes reported (-want +got):\n%s", seen, diff)
		}
	}
}
