package streams_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
)

// fencedCredit is the fenced pattern of docs/integrations.md: the handler's two writes (a
// ledger update and a log line) in ONE script, so a kill leaves both or
// neither; fenced by the lease token (the claim key must still hold
// "~<token>", so a holder whose lease was taken over writes nothing); and
// idempotent for the message id (SADD in the same step, so a run whose
// commit a kill prevented does not apply twice when the message comes back).
// KEYS: the claim key, the applied set, the ledger hash, the log list (one
// slot: a standalone server, or keys sharing a {hash tag} on a cluster).
// ARGV: "~" + token, the message id, the amount.
//
// docs/integrations.md shows it (the region below) with the handler of
// streams/docs_test.go that runs it.
//
// snippet:fencedScript
var fencedCredit = rueidis.NewLuaScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end      -- our lease is gone: write nothing
if redis.call('SADD', KEYS[2], ARGV[2]) == 0 then return 0 end  -- applied before (killed before its commit)
redis.call('HINCRBY', KEYS[3], 'total', ARGV[3])
redis.call('RPUSH', KEYS[4], ARGV[2])
return 1`)

// snippet:end

func credit(ctx context.Context, rc rueidis.Client, prefix, id, amount string) (int64, error) {
	l, _ := store.LeaseFromContext(ctx)
	return fencedCredit.Exec(ctx, rc, []string{prefix + l.ID, "applied", "ledger", "log"},
		[]string{"~" + l.Token, l.ID, amount}).AsInt64()
}

func ledgerState(t *testing.T, rc rueidis.Client) (int64, []string) {
	t.Helper()
	ctx := context.Background()
	total, err := rc.Do(ctx, rc.B().Hget().Key("ledger").Field("total").Build()).AsInt64()
	if err != nil && !rueidis.IsRedisNil(err) {
		t.Fatal(err)
	}
	log, err := rc.Do(ctx, rc.B().Lrange().Key("log").Start(0).Stop(-1).Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	return total, log
}

// TestFencedPattern: the faults that break a two-write handler, against
// the fenced one.
func TestFencedPattern(t *testing.T) {
	ctx := context.Background()

	t.Run("two writes, killed between them: the first runs twice", func(t *testing.T) {
		_, rc := newServer(t)
		claims := must.Store(store.NewClaims(rc, store.WithPrefix("c:")))
		// The kill: the first delivery stops after its first write (a panic
		// here; a SIGKILL in TestProcesses-like runs), the redelivery runs
		// the whole handler.
		twoWrites := func(ctx context.Context, die bool) error {
			if err := rc.Do(ctx, rc.B().Hincrby().Key("ledger").Field("total").Increment(5).Build()).Error(); err != nil {
				return err
			}
			if die {
				panic("killed between the writes")
			}
			return rc.Do(ctx, rc.B().Rpush().Key("log").Element("m1").Build()).Error()
		}
		func() {
			defer func() { _ = recover() }()
			_, _ = claims.Do(ctx, "m1", time.Second, func(ctx context.Context) error { return twoWrites(ctx, true) })
		}()
		if _, err := claims.Do(ctx, "m1", time.Second, func(ctx context.Context) error { return twoWrites(ctx, false) }); err != nil {
			t.Fatal(err)
		}
		if total, log := ledgerState(t, rc); total != 10 || len(log) != 1 {
			t.Fatalf("ledger %d, log %v: the unfenced handler was expected to apply its first write twice", total, log)
		}
	})

	t.Run("fenced: killed before the script, the redelivery applies once", func(t *testing.T) {
		_, rc := newServer(t)
		claims := must.Store(store.NewClaims(rc, store.WithPrefix("c:")))
		func() {
			defer func() { _ = recover() }()
			_, _ = claims.Do(ctx, "m1", time.Second, func(ctx context.Context) error { panic("killed before the write") })
		}()
		if _, err := claims.Do(ctx, "m1", time.Second, func(ctx context.Context) error {
			_, err := credit(ctx, rc, "c:", "m1", "5")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if total, log := ledgerState(t, rc); total != 5 || len(log) != 1 {
			t.Errorf("ledger %d, log %v; want 5, [m1]", total, log)
		}
	})

	t.Run("fenced: killed after the script, before the commit", func(t *testing.T) {
		_, rc := newServer(t)
		claims := must.Store(store.NewClaims(rc, store.WithPrefix("c:")))
		// The first holder applies the effect, then dies: its lease
		// expires (here: the key is deleted, as expiry would) before the
		// commit.
		errKilled := errors.New("killed")
		_, err := claims.Do(ctx, "m1", time.Second, func(ctx context.Context) error {
			if n, err := credit(ctx, rc, "c:", "m1", "5"); n != 1 || err != nil {
				t.Errorf("first run: %d, %v; want 1 (applied)", n, err)
			}
			rc.Do(ctx, rc.B().Del().Key("c:m1").Build())
			return errKilled // no commit happens; the release finds the key gone
		})
		if !errors.Is(err, errKilled) {
			t.Fatal(err)
		}
		var second int64
		if _, err := claims.Do(ctx, "m1", time.Second, func(ctx context.Context) error {
			second, err = credit(ctx, rc, "c:", "m1", "5")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if total, log := ledgerState(t, rc); second != 0 || total != 5 || len(log) != 1 {
			t.Errorf("redelivery wrote %d; ledger %d, log %v; want 0, 5, [m1]", second, total, log)
		}
	})

	t.Run("fenced: a holder whose lease was taken over writes nothing", func(t *testing.T) {
		_, rc := newServer(t)
		claims := must.Store(store.NewClaims(rc, store.WithPrefix("c:")))
		var stale int64
		_, _ = claims.Do(ctx, "m1", time.Second, func(ctx context.Context) error {
			// Frozen past its lease: another consumer took the id over.
			rc.Do(ctx, rc.B().Set().Key("c:m1").Value("~another-token").Build())
			var err error
			stale, err = credit(ctx, rc, "c:", "m1", "5")
			return err
		})
		if total, log := ledgerState(t, rc); stale != 0 || total != 0 || len(log) != 0 {
			t.Errorf("the stale holder wrote %d; ledger %d, log %v; want 0, 0, []", stale, total, log)
		}
	})
}
