package scripts_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/internal/redisproc"
	"github.com/redisonce/redisonce/store"
)

// TestFaultMaxMemory: with maxmemory reached under noeviction, every write
// operation of every store that can grow memory is refused whole — the
// scripts' #!lua shebang makes Redis answer OOM before the script starts — on
// an id in use and on a fresh one; callbacks do not run; reads still work; not
// one key changes. The operations that only remove data (flags=allow-oom:
// Forget, Ack, AckMany, DropConn, Delete, DeleteFenced) run and free memory, so
// an application can drain its keys; Records.Do answers a key that holds a
// record from a read (ErrInFlight for the seeded pending one). Once memory is
// available again every operation succeeds.
func TestFaultMaxMemory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := newServer(t, redisproc.Options{MaxMemory: "8mb", MaxMemoryPolicy: "noeviction"})
	c := newClient(t, srv.URL())
	prefix := func(k storeKind) string { return "oom:" + k.name + ":" }
	for _, k := range reliabilityStores {
		if err := k.seed(ctx, c, prefix(k), "seeded"); err != nil {
			t.Fatalf("%s: seed: %v", k.name, err)
		}
		// Cache every script now: SCRIPT LOAD of a write script is refused
		// under OOM too, and EVAL is what this test is about.
		for _, p := range k.probes(c, prefix(k)) {
			_, _ = p.run(ctx, "warmup")
		}
	}
	filled := fillMemory(t, c)
	// Filling stops just past the limit, where a shrinking buffer could make
	// room again; set the limit well below what is used, so it stays full.
	full := usedMemory(t, c)
	do(t, c, "CONFIG", "SET", "maxmemory", fmt.Sprint(full/2))
	t.Logf("memory full after %d filler keys (%d bytes used, maxmemory now %d)", filled, full, full/2)

	for _, k := range reliabilityStores {
		t.Run(k.name, func(t *testing.T) {
			for _, p := range k.probes(c, prefix(k)) {
				for _, id := range []string{"seeded", "fresh-" + p.name} {
					key := prefix(k) + id
					before := raw(t, c, key)
					called, err := p.run(ctx, id)
					after := raw(t, c, key)
					switch {
					case called:
						t.Errorf("%s(%q) under OOM: the callback ran", p.name, id)
					case p.frees:
						if err != nil && !isContractError(err) {
							t.Errorf("%s(%q) under OOM: %v; a removal must run when memory is full", p.name, id, err)
						}
						if !onlyRemoved(before, after) {
							t.Errorf("%s(%q) under OOM added data: before %+v, after %+v", p.name, id, before, after)
						}
						continue
					case p.readsWhenFull && id == "seeded":
						if !errors.Is(err, store.ErrInFlight) {
							t.Errorf("%s(%q) under OOM: %v; want the seeded pending record answered from a read, ErrInFlight", p.name, id, err)
						}
					case p.write && (err == nil || !strings.Contains(err.Error(), "OOM")):
						t.Errorf("%s(%q) under OOM: error %v, want Redis's OOM refusal", p.name, id, err)
					case p.write && !strings.Contains(err.Error(), fmt.Sprintf("%q", id)):
						t.Errorf("%s(%q) under OOM: error %q does not name the id", p.name, id, err)
					case !p.write && err != nil:
						t.Errorf("read %s(%q) under OOM: %v", p.name, id, err)
					}
					if diff := cmp.Diff(before, after, approxTTL); diff != "" {
						t.Errorf("%s(%q) under OOM changed the key (-before +after):\n%s", p.name, id, diff)
					}
				}
			}
			// The removals really ran: the seeded key is gone.
			if got := raw(t, c, prefix(k)+"seeded"); got.Type != "none" {
				t.Errorf("the seeded key survived the store's removals under OOM: %+v", got)
			}
			if used := usedMemory(t, c); used <= full/2 {
				t.Fatalf("memory is no longer full (%d used, maxmemory %d): the test checks nothing more", used, full/2)
			}
		})
	}

	// Room again: every operation runs (and may fail only as the store's
	// contract says, e.g. ErrNotFound for an Update of a fresh key).
	do(t, c, "CONFIG", "SET", "maxmemory", "0")
	for _, k := range reliabilityStores {
		for _, p := range k.probes(c, prefix(k)) {
			if _, err := p.run(ctx, "after-"+p.name); err != nil && !isContractError(err) {
				t.Errorf("%s %s after memory was freed: %v", k.name, p.name, err)
			}
		}
	}
}

// onlyRemoved reports whether after is before with data removed: the key gone,
// or a hash holding a subset of its fields (an outbox ack may also raise the
// _gen floor in place), or a string unchanged.
func onlyRemoved(before, after rawKey) bool {
	switch {
	case after.Type == "none":
		return true
	case after.Type != before.Type:
		return false
	case after.Type == "string":
		return after.Str == before.Str
	case after.Type == "hash":
		for f, v := range after.Hash {
			old, ok := before.Hash[f]
			if !ok || (v != old && f != "_gen") {
				return false
			}
		}
		return true
	}
	return cmp.Equal(before, after)
}

// usedMemory is the server's used_memory (INFO memory).
func usedMemory(t *testing.T, c rueidis.Client) int64 {
	t.Helper()
	info, err := c.Do(context.Background(), c.B().Info().Section("memory").Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			var n int64
			if _, err := fmt.Sscan(v, &n); err == nil {
				return n
			}
		}
	}
	t.Fatal("no used_memory in INFO memory")
	return 0
}

// isContractError reports whether err is one of the stores' sentinels for an
// outcome of the contract (not found, stale owner...), as opposed to a
// failure.
func isContractError(err error) bool {
	for _, s := range []error{store.ErrNotFound, store.ErrStaleOwner, store.ErrInFlight, store.ErrLeaseLost,
		store.ErrOutboxFull, store.ErrFingerprintMismatch, store.ErrFailed} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// fillMemory writes filler keys until the server refuses a write with OOM
// and returns how many it wrote. It fails the test if memory never fills.
func fillMemory(t *testing.T, c rueidis.Client) int {
	t.Helper()
	ctx := context.Background()
	v := strings.Repeat("x", 64<<10)
	for i := range 10_000 {
		err := c.Do(ctx, c.B().Set().Key(fmt.Sprint("filler:", i)).Value(v).Build()).Error()
		if err == nil {
			continue
		}
		if re, ok := rueidis.IsRedisErr(err); ok && strings.HasPrefix(re.Error(), "OOM") {
			return i
		}
		t.Fatalf("fill memory: %v", err)
	}
	t.Fatal("memory never filled up")
	return 0
}

// TestFaultWrongType: a key of a type the store never writes, under the
// store's prefix (another program's data, a typo in a prefix). Every
// operation that must read the value fails with ErrUnexpectedReply, naming the
// id, and leaves the key as it was; only existence checks and deletes may
// succeed.
func TestFaultWrongType(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, standaloneURL(t))
	for _, k := range reliabilityStores {
		t.Run(k.name, func(t *testing.T) {
			prefix := uniquePrefix(t)
			for _, p := range k.probes(c, prefix) {
				id := "wrong-" + p.name
				key := prefix + id
				do(t, c, k.wrongType(key)...)
				before := raw(t, c, key)
				called, err := p.run(ctx, id)
				if p.wrongTypeOK {
					if err != nil {
						t.Errorf("%s on a key of the wrong type: %v, want success", p.name, err)
					}
					continue
				}
				switch {
				case err == nil:
					t.Errorf("%s on a key of the wrong type (%s) succeeded", p.name, before.Type)
				case called:
					t.Errorf("%s on a key of the wrong type: the callback ran", p.name)
				case !errors.Is(err, store.ErrUnexpectedReply):
					t.Errorf("%s on a key of the wrong type: %v, want ErrUnexpectedReply", p.name, err)
				case !strings.Contains(err.Error(), fmt.Sprintf("%q", id)):
					t.Errorf("%s on a key of the wrong type: error %q does not name the id", p.name, err)
				}
				if diff := cmp.Diff(before, raw(t, c, key), approxTTL); diff != "" {
					t.Errorf("%s changed a key of the wrong type (-before +after):\n%s", p.name, diff)
				}
			}
		})
	}
}
