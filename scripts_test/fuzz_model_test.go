package scripts_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/rueidis"
)

// Model-based fuzzing: a fuzz input is read as store options and a sequence
// of operations (fuzz_ops_test.go), applied in turn to the Redis store and to
// its in-memory twin; every reply must be the same. Ids include invalid and
// odd ones, so argument validation is compared too. `go test` runs the seed
// corpus (testdata/fuzz/<target>) as plain tests; `make fuzz` fuzzes.

func FuzzClaimsModel(f *testing.F)  { fuzzModel(f, claimsModel) }
func FuzzOutboxModel(f *testing.F)  { fuzzModel(f, outboxModel) }
func FuzzRecordsModel(f *testing.F) { fuzzModel(f, recordsModel) }

var fuzzSeq atomic.Int64

// fuzzModel is the fuzz target of one opModel.
func fuzzModel(f *testing.F, m opModel) {
	for _, seed := range modelSeeds {
		f.Add(seed)
	}
	c := harnessNewClient(f, harnessStandaloneURL(f))
	f.Fuzz(func(t *testing.T, data []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		r := &opReader{b: data}
		opts := m.options(r)
		ops := decodeOps(m, r, false, 64)
		prefix := fmt.Sprintf("fuzz:%s:%d:", m.name, fuzzSeq.Add(1))
		defer cleanKeys(t, c, prefix, m.ids)
		rs, ms := m.newRedis(c, prefix, opts...), m.newMemory(opts...)
		renv, menv := newApplyEnv(), newApplyEnv()
		for i, o := range ops {
			o.Ref = resolveRef(o.Ref, renv)
			want := m.apply(ctx, ms, o, menv)
			start := time.Now()
			got := m.apply(ctx, rs, o, renv)
			if d := time.Since(start); d > 2*time.Second {
				t.Fatalf("operation %d, %v took %v", i, o, d)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("operation %d, %v: the Redis store and the memory store differ (-memory +redis):\n%s\nthe operations: %v",
					i, o, diff, ops[:i+1])
			}
		}
	})
}

// modelSeeds are hand-written starts for every model: the first bytes pick
// options, then each operation takes a name byte, an id byte and maybe more.
var modelSeeds = [][]byte{
	{},
	{0, 0, 0, 0, 0, 0},
	{0, 1, 2, 0, 0, 0, 4, 0, 1, 0, 0, 2, 0},
	[]byte("\x00\x05\x00\x01\x05\x01\x00\x03\x01\x04\x01\x00\x01"),
	[]byte("\x00\x00\x06\x00\x07\x01\x01\x03\x00\x01\x02\x04\x05"),
	[]byte("the quick brown fox jumps over the lazy dog"),
}

// cleanKeys deletes prefix+id for every id, so fuzzing leaves nothing behind.
func cleanKeys(t *testing.T, c rueidis.Client, prefix string, ids []string) {
	ctx := context.Background()
	cmds := make(rueidis.Commands, 0, len(ids))
	for _, id := range ids {
		cmds = append(cmds, c.B().Del().Key(prefix+id).Build())
	}
	for _, r := range c.DoMulti(ctx, cmds...) {
		if err := r.Error(); err != nil && !strings.Contains(err.Error(), "closing") {
			t.Errorf("clean up: %v", err)
		}
	}
}

// FuzzStoreIDs: any id, of any bytes and length, is refused by both
// implementations alike (ErrInvalidArgument, nothing sent) or stored by the
// Redis store under exactly the key prefix+id and nowhere else, and reads
// back the same from both.
func FuzzStoreIDs(f *testing.F) {
	for _, id := range []string{"a", "", "{a}", "a}{b", "\x00", "*", "[a-z]?", "ü", strings.Repeat("x", 1024), strings.Repeat("y", 1025), "_seq"} {
		f.Add(id)
	}
	c := harnessNewClient(f, harnessStandaloneURL(f))
	f.Fuzz(func(t *testing.T, id string) {
		ctx := context.Background()
		for _, m := range opModels {
			prefix := fmt.Sprintf("fuzz:ids:%d:", fuzzSeq.Add(1))
			rs, ms := m.newRedis(c, prefix), m.newMemory()
			renv, menv := newApplyEnv(), newApplyEnv()
			for _, o := range []op{m.write(id), m.read(id)} {
				want, got := m.apply(ctx, ms, o, menv), m.apply(ctx, rs, o, renv)
				if diff := cmp.Diff(want, got); diff != "" {
					t.Fatalf("%s %v: (-memory +redis):\n%s", m.name, o, diff)
				}
			}
			keys := scanPrefix(t, c, prefix)
			valid := m.apply(ctx, ms, m.write(id), menv).Err != "ErrInvalidArgument"
			switch {
			case valid && (len(keys) != 1 || keys[0] != prefix+id):
				t.Fatalf("%s: id %q is stored under %q, want exactly [%q]", m.name, id, keys, prefix+id)
			case !valid && len(keys) != 0:
				t.Fatalf("%s: refused id %q wrote %q", m.name, id, keys)
			}
			if valid {
				cleanKeys(t, c, prefix, []string{id})
			}
		}
	})
}

// scanPrefix returns every key that starts with prefix (which holds no glob
// characters).
func scanPrefix(t *testing.T, c rueidis.Client, prefix string) []string {
	t.Helper()
	var keys []string
	cursor := uint64(0)
	for {
		e, err := c.Do(context.Background(), c.B().Scan().Cursor(cursor).Match(prefix+"*").Count(1000).Build()).AsScanEntry()
		if err != nil {
			t.Fatalf("SCAN: %v", err)
		}
		keys = append(keys, e.Elements...)
		if cursor = e.Cursor; cursor == 0 {
			return keys
		}
	}
}
