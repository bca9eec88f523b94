package scripts_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/internal/redisproc"
	"github.com/redisonce/redisonce/store"
)

// "Of duplicates inside a batch the first wins", however the batch is cut:
// ClaimMany of a batch bigger than one script call (500 keys), with
// duplicates whose first occurrence is in an earlier call than the repeat,
// (1) with WithWaitReplicas on a standalone server with a replica, where the
// calls once ran concurrently on their own connections, and (2) on a cluster
// whose slot is migrating, where the 500-key call waits on TRYAGAIN while a
// 1-key call runs at once through ASK. Each checks every result, the raw
// keys, and that the fault was there.

// crossCut is a batch of n distinct ids in tag's slot and, after them, the
// last dups of them again (the first dups when first): every repeat lands in
// a later call than its first occurrence. want is first-wins.
func crossCut(tag string, n, dups int, first bool) (ids []string, want []bool) {
	for i := range n {
		ids = append(ids, fmt.Sprintf("{%s}m%d", tag, i))
		want = append(want, true)
	}
	from := n - dups
	if first {
		from = 0
	}
	for j := range dups {
		ids = append(ids, ids[from+j])
		want = append(want, false)
	}
	return ids, want
}

// checkFirstWins compares got with want and the raw keys with "1".
func checkFirstWins(t *testing.T, round string, c interface {
	Do(args ...string) (string, error)
}, prefix string, ids []string, want, got []bool) {
	t.Helper()
	wrong := 0
	var first string
	for i := range want {
		if i >= len(got) || got[i] != want[i] {
			if wrong == 0 {
				first = fmt.Sprintf("ids[%d] %q: got %v, want %v", i, ids[i], i < len(got) && got[i], want[i])
			}
			wrong++
		}
	}
	if wrong > 0 || len(got) != len(want) {
		t.Errorf("%s: %d of %d results wrong (len %d, want %d), first %s", round, wrong, len(want), len(got), len(want), first)
	}
	for _, id := range ids[:3] {
		if v, err := c.Do("GET", prefix+id); err != nil || v != "1" {
			t.Errorf("%s: raw GET %s = %q, %v; want \"1\"", round, prefix+id, v, err)
		}
	}
}

// clusterGet runs a command through a cluster client, for checkFirstWins.
type clusterGet struct{ c rueidis.Client }

func (g clusterGet) Do(args ...string) (string, error) {
	return g.c.Do(context.Background(), g.c.B().Arbitrary(args...).Build()).ToString()
}

// infoInt reads one integer field of INFO section from n.
func infoInt(t *testing.T, n *redisproc.Server, section, field string) int64 {
	t.Helper()
	info, err := n.Do("INFO", section)
	if err != nil {
		t.Fatalf("INFO %s: %v", section, err)
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			k, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("INFO %s: %q", section, line)
			}
			return k
		}
	}
	t.Fatalf("INFO %s has no %s", section, field)
	return 0
}

// TestBatchFirstWinsWaitReplicas: standalone with a replica and
// WithWaitReplicas. Before the fix the calls of one batch went out as
// concurrent DoMultis, each on a dedicated connection with its own WAIT, and
// the repeat's call often ran first (24 of 30 rounds in the report).
func TestBatchFirstWinsWaitReplicas(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	primary, _ := newReplicated(t)
	// One client for every round, as an application has: its pool of
	// dedicated connections (where a DoMulti with WAIT runs) stays warm.
	c := newClient(t, primary.URL())
	for round := range 20 {
		prefix := fmt.Sprintf("%sr%d:", uniquePrefix(t), round)
		cs := must.Store(store.NewClaims(c, store.WithWaitReplicas(1, 5*time.Second), store.WithPrefix(prefix)))
		// Odd rounds: 1500 distinct ids (calls of 500, 500, 500) and 600
		// repeats (two more calls); even rounds: 500 distinct and a repeat
		// of the first (a 1-key call, quick to run). Every repeat is in a
		// later call than its first occurrence.
		n, dups := 1500, 600
		if round%2 == 0 {
			n, dups = 500, 1
		}
		// The repeats are of the last ids of their calls: the script
		// reaches those last, the widest window for a repeat to go first.
		ids, want := crossCut("w", n, dups, false)
		got, err := cs.ClaimMany(ctx, ids)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		checkFirstWins(t, fmt.Sprint("round ", round), primary, prefix, ids, want, got)
	}

	// One batch of 20,000 ids (40 calls) is one group on one connection:
	// count the connections the server accepted while it ran.
	before := infoInt(t, primary, "stats", "total_connections_received")
	ids := make([]string, 20_000)
	for i := range ids {
		ids[i] = fmt.Sprint("big", i)
	}
	cs, err := store.OpenClaims(primary.URL(), store.WithWaitReplicas(1, 5*time.Second), store.WithPrefix(uniquePrefix(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	afterOpen := infoInt(t, primary, "stats", "total_connections_received")
	got, err := cs.ClaimMany(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range got {
		if !v {
			t.Fatalf("big batch: ids[%d] not claimed", i)
		}
	}
	// Each INFO here runs on a connection of its own (redisproc dials one
	// per command), counted before INFO answers: subtract the last one's.
	opened := infoInt(t, primary, "stats", "total_connections_received") - afterOpen - 1
	// rueidis runs a DoMulti holding WAIT on one dedicated connection: one
	// group opens one (the 40 calls' concurrent groups opened 40).
	if opened > 1 {
		t.Errorf("a batch of 40 calls opened %d connections (opening the store: %d); want at most 1: one group, one WAIT", opened, afterOpen-before)
	}
	t.Logf("20 rounds of 501 or 2100 ids; a 20,000-id batch opened %d connection(s)", opened)
}

// TestBatchFirstWinsSlotMigration: a cluster slot in MIGRATING/IMPORTING
// state. A script call on several keys of the slot that are absent is sent
// on to the target by ASK, where it gets TRYAGAIN until the migration ends
// (the store retries it until ctx's deadline); a call on one key runs through ASK at
// once. A batch of 500 ids and a repeat of its first (a 1-key tail call) once
// let the repeat win: it created the key while the 500-key call waited.
func TestBatchFirstWinsSlotMigration(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cl := newCluster(t, 3, redisproc.Options{})
	admin := newClient(t, cl.URL())
	tags, slots := tagsInSlots(t, cl.Nodes[0], 3)
	for round, tag := range tags {
		name := fmt.Sprintf("round %d (slot %d)", round, slots[round])
		prefix := fmt.Sprintf("%sr%d:", uniquePrefix(t), round)
		s, err := store.OpenClaims(cl.URL(), store.WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		// The prefix goes before the tag: the slot is the tag's.
		ids, want := crossCut(tag, 500, 1, true)
		tryAgain := errorStat(t, admin, "TRYAGAIN")
		migrating, release := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		paused := false
		go func() {
			done <- migrateSlot(cl, slots[round], cl.Nodes[0], cl.Nodes[1], 100, func() {
				if paused {
					return
				}
				paused = true
				close(migrating)
				select {
				case <-release:
				case <-time.After(20 * time.Second):
				}
			})
		}()
		select {
		case <-migrating:
		case err := <-done:
			t.Fatalf("%s: migration ended before the batch: %v", name, err)
		}
		// The migration ends 500 ms into the batch: well inside the 60 s the
		// store retries TRYAGAIN, long enough for the 1-key call to land.
		time.AfterFunc(500*time.Millisecond, func() { close(release) })
		got, err := s.ClaimMany(ctx, ids)
		if merr := <-done; merr != nil {
			t.Fatalf("%s: migration: %v", name, merr)
		}
		s.Close()
		if err != nil {
			t.Fatalf("%s: ClaimMany: %v", name, err)
		}
		if n := errorStat(t, admin, "TRYAGAIN") - tryAgain; n == 0 {
			t.Errorf("%s: no TRYAGAIN was answered during the batch; the test proves nothing", name)
		}
		checkFirstWins(t, name, clusterGet{admin}, prefix, ids, want, got)
	}
}

// TestBatchFirstWinsSentinel: the same on a Sentinel deployment (a client in
// Sentinel mode is not a cluster client: one group, one WAIT). A guard: on
// rueidis v1.0.79 a Sentinel client's commands already shared one Slot(), so
// this passed before the fix too; a standalone client's did not.
func TestBatchFirstWinsSentinel(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	d := redisproc.StartSentinelT(t, redisproc.SentinelOptions{Sentinels: 1})
	prefix := uniquePrefix(t)
	s, err := store.OpenClaims(d.URL(), store.WithWaitReplicas(1, 5*time.Second), store.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	primary := d.Servers[0]
	ids, want := crossCut("s", 10_000, 2_000, false)
	before := infoInt(t, primary, "stats", "total_connections_received")
	got, err := s.ClaimMany(ctx, ids)
	if err != nil {
		t.Fatal(err)
	}
	opened := infoInt(t, primary, "stats", "total_connections_received") - before - 1 // the INFO's own
	checkFirstWins(t, "sentinel", primary, prefix, ids, want, got)
	if opened > 1 {
		t.Errorf("a batch of 24 calls opened %d connections to the primary; want at most 1: one group, one WAIT", opened)
	}
	t.Logf("12,000 ids (2,000 repeats): %d connection(s) opened", opened)
}
