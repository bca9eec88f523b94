package scripts_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce"
	"github.com/redisonce/redisonce/store"
)

// Non-Go callers: every script is driven through the redis-cli binary, twice —
// EVALSHA after `redis-cli -x SCRIPT LOAD < scripts/<name>.lua`, and FCALL after
// `redis-cli -x FUNCTION LOAD REPLACE` of the generated Functions library — with
// exactly the KEYS and ARGV its header documents, and the Go store must see the
// result (claim through redis-cli, then Claims.Seen says true).
//
// redisCLICases holds the calls, per script. A script without cases fails the
// tests: every new script must document how a non-Go caller uses it here.

// cliEnv is what a case gets: the Go stores, all on prefix, and a raw client.
// A new store adds its field here and in newCLIEnv.
type cliEnv struct {
	ctx    context.Context
	raw    rueidis.Client
	prefix string // every store's key prefix: the key of id is prefix + id
	out    string // redis-cli's output of the case's call, for check
	token  string // set by a seed; "$TOKEN" in a case's argv stands for it
	claims *store.Claims
	outbox *store.Outbox
	recs   *store.Records
}

func newCLIEnv(t *testing.T, url, prefix string) *cliEnv {
	c := newClient(t, url)
	return &cliEnv{
		ctx:    context.Background(),
		raw:    c,
		prefix: prefix,
		claims: mustStore(store.NewClaims(c, store.WithPrefix(prefix))),
		outbox: mustStore(store.NewOutbox(c, store.WithPrefix(prefix))),
		recs:   mustStore(store.NewRecords(c, store.WithPrefix(prefix))),
	}
}

// cliCase is one call of a script through redis-cli.
type cliCase struct {
	name string
	// seed prepares id's state before the call (nil: nothing there).
	seed func(t *testing.T, e *cliEnv, id string)
	// argv is the script's ARGV, exactly as its header documents; KEYS[1] is
	// always e.prefix + id.
	argv []string
	// want is redis-cli's output (raw mode: an integer as digits, a string as
	// is, an array one element per line); for an error, its first word.
	want    string
	wantErr bool
	// like, when set instead of want, is a regexp the whole output must match
	// (for replies that hold a server time).
	like string
	// check asserts the Go store's view of id afterwards.
	check func(t *testing.T, e *cliEnv, id string)
	// keys, for a batch script: KEYS are e.prefix + id + k for each k (all of
	// one slot: the ids carry a {hash tag}).
	keys []string
}

var redisCLICases = map[string][]cliCase{
	// Claims: KEYS[1] is prefix + message_id.
	"claim": {
		{name: "first delivery wins", argv: []string{"60000", "1"}, want: "1", check: claimsSeen(true, "processed")},
		{name: "a lease", argv: []string{"60000", "~tok"}, like: `\d{19}`, check: claimsInFlight},
		{name: "after a Go claim", seed: goClaim, argv: []string{"0", "1"}, want: "0", check: claimsSeen(true, "processed")},
		{name: "bad ttl", argv: []string{"soon", "1"}, want: "BADARG", wantErr: true, check: claimsSeen(false, "")},
	},
	// Batch scripts: the case's keys share the hash tag {id}.
	"claim_many": {
		{name: "a batch with a duplicate", keys: []string{"{t}a", "{t}b", "{t}a"}, argv: []string{"60000", "1"}, want: "1\n1\n0",
			check: claimsSeenMany([]string{"{t}a", "{t}b", "{t}c"}, []bool{true, true, false})},
		{name: "after a Go claim", seed: func(t *testing.T, e *cliEnv, id string) { goClaim(t, e, id+"{t}b") },
			keys: []string{"{t}a", "{t}b"}, argv: []string{"0", "1"}, want: "1\n0",
			check: claimsSeenMany([]string{"{t}a", "{t}b"}, []bool{true, true})},
		{name: "bad ttl", keys: []string{"{t}a", "{t}b"}, argv: []string{"soon", "1"}, want: "BADARG", wantErr: true,
			check: claimsSeenMany([]string{"{t}a", "{t}b"}, []bool{false, false})},
	},
	// The lease engine's batch scripts: one token (or value) per key.
	"lease_many": {
		{name: "two leases and a processed id", seed: func(t *testing.T, e *cliEnv, id string) { goClaim(t, e, id+"{t}c") },
			keys: []string{"{t}a", "{t}b", "{t}c"}, argv: []string{"60000", "~t1", "~t2", "~t3"}, like: `\d{19}\n\d{19}\n0`,
			check: func(t *testing.T, e *cliEnv, id string) {
				claimsInFlight(t, e, id+"{t}a")
				claimsInFlight(t, e, id+"{t}b")
			}},
		{name: "a value per key", keys: []string{"{t}a", "{t}b"}, argv: []string{"60000", "~t1"}, want: "BADARG", wantErr: true,
			check: claimsSeenMany([]string{"{t}a", "{t}b"}, []bool{false, false})},
	},
	"extend_many": {
		{name: "own lease and another's", seed: func(t *testing.T, e *cliEnv, id string) {
			lease("t1")(t, e, id+"{t}a")
			lease("other")(t, e, id+"{t}b")
		},
			keys: []string{"{t}a", "{t}b"}, argv: []string{"60000", "t1", "t2"}, want: "1\n0",
			check: func(t *testing.T, e *cliEnv, id string) {
				claimsInFlight(t, e, id+"{t}a")
				claimsInFlight(t, e, id+"{t}b")
			}},
	},
	"commit_many": {
		{name: "own lease, another's, expired", seed: func(t *testing.T, e *cliEnv, id string) {
			lease("t1")(t, e, id+"{t}a")
			lease("other")(t, e, id+"{t}b")
		},
			keys: []string{"{t}a", "{t}b", "{t}c"}, argv: []string{"0", "t1", "t2", "t3"}, want: "1\n-1\n2",
			check: func(t *testing.T, e *cliEnv, id string) {
				claimsSeen(true, "processed")(t, e, id+"{t}a")
				claimsInFlight(t, e, id+"{t}b")
				claimsSeen(true, "processed")(t, e, id+"{t}c")
			}},
	},
	"release_many": {
		{name: "own lease and another's", seed: func(t *testing.T, e *cliEnv, id string) {
			lease("t1")(t, e, id+"{t}a")
			lease("other")(t, e, id+"{t}b")
		},
			keys: []string{"{t}a", "{t}b"}, argv: []string{"t1", "t2"}, want: "1\n0",
			check: func(t *testing.T, e *cliEnv, id string) {
				claimsSeen(false, "")(t, e, id+"{t}a")
				claimsInFlight(t, e, id+"{t}b")
			}},
	},
	"seen_many": {
		{name: "after a Go claim", seed: func(t *testing.T, e *cliEnv, id string) { goClaim(t, e, id+"{t}b") },
			keys: []string{"{t}a", "{t}b"}, want: "0\n1", check: claimsSeenMany([]string{"{t}a", "{t}b"}, []bool{false, true})},
	},
	"seen": {
		{name: "after a Go claim", seed: goClaim, want: "1", check: claimsSeen(true, "processed")},
		{name: "nothing there", want: "0", check: claimsSeen(false, "")},
	},
	"forget": {
		{name: "after a Go claim", seed: goClaim, want: "1", check: claimsSeen(false, "")},
		{name: "nothing there", want: "0", check: claimsSeen(false, "")},
	},
	"commit": {
		{name: "own lease", seed: lease("tok"), argv: []string{"tok", "0"}, want: "1", check: claimsSeen(true, "processed")},
		{name: "another's lease", seed: lease("other"), argv: []string{"tok", "0"}, want: "-1", check: claimsInFlight},
		{name: "lease expired, nobody took it", argv: []string{"tok", "0"}, want: "2", check: claimsSeen(true, "processed")},
		{name: "already processed", seed: goClaim, argv: []string{"tok", "0"}, want: "0", check: claimsSeen(true, "processed")},
	},
	"extend": {
		{name: "own lease", seed: lease("tok"), argv: []string{"tok", "60000"}, want: "1", check: claimsInFlight},
		{name: "another's lease", seed: lease("other"), argv: []string{"tok", "60000"}, want: "0", check: claimsInFlight},
		{name: "nothing there", argv: []string{"tok", "60000"}, want: "0", check: claimsSeen(false, "")},
	},
	"release": {
		{name: "own lease", seed: lease("tok"), argv: []string{"tok"}, want: "1", check: claimsSeen(false, "")},
		{name: "another's lease", seed: lease("other"), argv: []string{"tok"}, want: "0", check: claimsInFlight},
	},
	// Outbox: KEYS[1] is prefix + conn_id; the Go side reads what redis-cli wrote.
	"append": {
		{name: "new connection", argv: []string{"m1", "hello", "60000", "0"}, like: `1\n\d{16}\n1`,
			check: outboxTail([]store.Message{{ID: "m1", Seq: 1, Payload: []byte("hello")}}, 0)},
		{name: "retry of a Go append", seed: goAppend("m1", "hello"), argv: []string{"m1", "other", "0", "0"}, like: `1\n\d{16}\n0`,
			check: outboxTail([]store.Message{{ID: "m1", Seq: 1, Payload: []byte("hello")}}, 0)},
		{name: "full", seed: goAppend("m1", "hello"), argv: []string{"m2", "x", "0", "1"}, want: "FULL", wantErr: true,
			check: outboxTail([]store.Message{{ID: "m1", Seq: 1, Payload: []byte("hello")}}, 0)},
	},
	"append_many": {
		{name: "a burst after a Go append", seed: goAppend("m1", "hello"), argv: []string{"60000", "0", "m2", "b", "m1", "x", "m3", "c"},
			like:  `\d{16}\n2\n1\n1\n0\n3\n1`,
			check: outboxTail([]store.Message{{ID: "m1", Seq: 1, Payload: []byte("hello")}, {ID: "m2", Seq: 2, Payload: []byte("b")}, {ID: "m3", Seq: 3, Payload: []byte("c")}}, 0)},
		{name: "all or nothing", seed: goAppend("m1", "hello"), argv: []string{"0", "2", "m2", "b", "m3", "c"}, want: "FULL", wantErr: true,
			check: outboxTail([]store.Message{{ID: "m1", Seq: 1, Payload: []byte("hello")}}, 0)},
	},
	"ack": {
		{name: "owner acks", seed: goAppend("m1", "a", "m2", "b"), argv: []string{"3", "m1"}, want: "1",
			check: func(t *testing.T, e *cliEnv, id string) {
				outboxTail([]store.Message{{ID: "m2", Seq: 2, Payload: []byte("b")}}, 3)(t, e, id)
				if err := e.outbox.Ack(e.ctx, id, "m2", 2); !errors.Is(err, store.ErrStaleOwner) {
					t.Errorf("Outbox.Ack at generation 2 after redis-cli acked at 3: %v, want ErrStaleOwner", err)
				}
			}},
		{name: "stale owner", seed: seeds(goAppend("m1", "a"), goAdvance(5)), argv: []string{"4", "m1"}, want: "STALE_OWNER", wantErr: true,
			check: outboxTail([]store.Message{{ID: "m1", Seq: 1, Payload: []byte("a")}}, 5)},
	},
	"advance": {
		{name: "new owner", seed: goAppend("m1", "a"), argv: []string{"7", "0"}, want: "1",
			check: func(t *testing.T, e *cliEnv, id string) {
				outboxTail([]store.Message{{ID: "m1", Seq: 1, Payload: []byte("a")}}, 7)(t, e, id)
				if err := e.outbox.Ack(e.ctx, id, "m1", 6); !errors.Is(err, store.ErrStaleOwner) {
					t.Errorf("Outbox.Ack at generation 6 after redis-cli advanced to 7: %v, want ErrStaleOwner", err)
				}
			}},
		// A raised fence is never lost: an advance creates the connection's hash.
		{name: "no connection", argv: []string{"7", "0"}, want: "1", check: outboxTail(nil, 7)},
		{name: "no connection, generation 0", argv: []string{"0", "0"}, want: "0", check: outboxTail(nil, 0)},
	},
	"unacked": {
		{name: "tail of a Go connection", seed: goAppend("m1", "a", "m2", "b:c"),
			like: `\d{16}\n0\n(m1\n1:a\nm2\n2:b:c|m2\n2:b:c\nm1\n1:a)`,
			check: func(t *testing.T, e *cliEnv, id string) {
				tail, err := e.outbox.Tail(e.ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				if epoch, _, _ := strings.Cut(e.out, "\n"); epoch != strconv.FormatUint(tail.Epoch, 10) {
					t.Errorf("redis-cli epoch %s, Outbox.Tail epoch %d", epoch, tail.Epoch)
				}
			}},
		{name: "no connection", want: "", check: outboxTail(nil, 0)},
	},
	"drop": {
		{name: "Go connection", seed: goAppend("m1", "a"), want: "1",
			check: func(t *testing.T, e *cliEnv, id string) {
				outboxTail(nil, 0)(t, e, id)
				if _, seq, err := e.outbox.Append(e.ctx, id, []byte("x")); err != nil || seq != 1 {
					t.Errorf("Outbox.Append after the drop: seq %d, %v; want a new incarnation at seq 1", seq, err)
				}
			}},
		{name: "no connection", want: "0", check: outboxTail(nil, 0)},
	},
	// Records: KEYS[1] is prefix + idempotency key. Times are ms since the
	// epoch (13 digits); a reply's empty trailing fields (fp, token '') are
	// trimmed with the output's trailing newlines.
	"acquire": {
		{name: "new record", argv: []string{"60000", "tok1", "fp1", "30000"},
			like: `1\npending\n\n\d{13}\n\d{13}\n\d{13}\n\d{13}\n\d{19}\nfp1\ntok1`,
			check: func(t *testing.T, e *cliEnv, key string) {
				r := recordIs(t, e, key, store.StatusPending, "")
				if r.Fingerprint != "fp1" || r.LeaseUntil.IsZero() || r.ExpiresAt.IsZero() {
					t.Errorf("Records.Get: fingerprint %q, lease %v, expires %v; want fp1 with a lease and an expiry", r.Fingerprint, r.LeaseUntil, r.ExpiresAt)
				}
				// (fn must not run; a nil fn is ErrInvalidArgument)
				ran := false
				fn := func(context.Context) ([]byte, error) { ran = true; return nil, nil }
				if _, _, err := e.recs.Do(e.ctx, key, store.AcquireOptions{Lease: time.Minute}, fn); !errors.Is(err, store.ErrInFlight) || ran {
					t.Errorf("Records.Do while redis-cli's lease runs: %v, fn ran %v; want ErrInFlight, fn not run", err, ran)
				}
			}},
		{name: "completed by Go", seed: goDo("receipt-1"), argv: []string{"0", "tok2", "", "0"},
			like:  `0\ncompleted\nreceipt-1\n\d{13}\n\d{13}\n\d{13}\n0\n\d{19}`,
			check: recordDone("receipt-1")},
		{name: "fingerprint mismatch", seed: goAcquire("fpA"), argv: []string{"0", "tok", "fpB", "0"}, want: "MISMATCH", wantErr: true,
			check: func(t *testing.T, e *cliEnv, key string) {
				if r := recordIs(t, e, key, store.StatusPending, ""); r.Fingerprint != "fpA" {
					t.Errorf("Records.Get fingerprint %q, want fpA", r.Fingerprint)
				}
			}},
	},
	"get": {
		{name: "completed by Go", seed: goDo("receipt-1"), like: `completed\nreceipt-1\n\d{13}\n\d{13}\n\d{13}\n0\n\d{19}`,
			check: func(t *testing.T, e *cliEnv, key string) {
				r := recordIs(t, e, key, store.StatusCompleted, "receipt-1")
				if f := strings.Split(e.out, "\n"); len(f) < 3 || f[2] != strconv.FormatInt(r.CreatedAt.UnixMilli(), 10) {
					t.Errorf("redis-cli created_ms %q, Records.Get CreatedAt %d", f, r.CreatedAt.UnixMilli())
				}
			}},
		{name: "nothing there", want: "", check: recordAbsent},
	},
	"update": {
		{name: "owner completes", seed: goAcquire(""), argv: []string{"$TOKEN", "status", "completed", "payload", "receipt-1"},
			want: "1", check: recordDone("receipt-1")},
		{name: "stale owner", seed: goAcquire(""), argv: []string{"not-the-owner", "status", "completed"}, want: "STALE_OWNER", wantErr: true,
			check: func(t *testing.T, e *cliEnv, key string) { recordIs(t, e, key, store.StatusPending, "") }},
		{name: "nothing there", argv: []string{"", "status", "completed"}, want: "NOT_FOUND", wantErr: true, check: recordAbsent},
		// Durations from the server's TIME: 30000 is a lease 30 s from now, 86400000 an expiry in a day.
		{name: "lease and expiry are durations", seed: goAcquire(""), argv: []string{"$TOKEN", "lease_in_ms", "30000", "expires_in_ms", "86400000"},
			want: "1",
			check: func(t *testing.T, e *cliEnv, key string) {
				r := recordIs(t, e, key, store.StatusPending, "")
				if d := time.Until(r.LeaseUntil); d < 25*time.Second || d > 31*time.Second {
					t.Errorf("LeaseUntil %v is %v from now, want about 30s", r.LeaseUntil, d)
				}
				if d := time.Until(r.ExpiresAt); d < 23*time.Hour || d > 25*time.Hour {
					t.Errorf("ExpiresAt %v is %v from now, want about 24h", r.ExpiresAt, d)
				}
			}},
		{name: "a negative expiry deletes", seed: goAcquire(""), argv: []string{"$TOKEN", "expires_in_ms", "-1"}, want: "0", check: recordAbsent},
		{name: "absolute lease_ms is refused", seed: goAcquire(""), argv: []string{"$TOKEN", "lease_ms", "30000"}, want: "BADARG", wantErr: true,
			check: func(t *testing.T, e *cliEnv, key string) { recordIs(t, e, key, store.StatusPending, "") }},
	},
	"complete": {
		{name: "owner completes", seed: goAcquire(""), argv: []string{"$TOKEN", "completed", "receipt-1"},
			want: "1", check: recordDone("receipt-1")},
		{name: "stale owner", seed: goAcquire(""), argv: []string{"not-the-owner", "completed", "x"}, want: "STALE_OWNER", wantErr: true,
			check: func(t *testing.T, e *cliEnv, key string) { recordIs(t, e, key, store.StatusPending, "") }},
		{name: "nothing there", argv: []string{"tok", "completed", ""}, want: "NOT_FOUND", wantErr: true, check: recordAbsent},
		{name: "pending is refused", seed: goAcquire(""), argv: []string{"$TOKEN", "pending", ""}, want: "BADARG", wantErr: true,
			check: func(t *testing.T, e *cliEnv, key string) { recordIs(t, e, key, store.StatusPending, "") }},
	},
	"renew": {
		{name: "owner renews", seed: goAcquire(""), argv: []string{"$TOKEN", "60000"}, want: "1",
			check: func(t *testing.T, e *cliEnv, key string) {
				r := recordIs(t, e, key, store.StatusPending, "")
				if left := time.Until(r.LeaseUntil); left < 50*time.Second || left > 61*time.Second {
					t.Errorf("LeaseUntil is %v from now, want about 60s", left)
				}
			}},
		{name: "stale owner", seed: goAcquire(""), argv: []string{"not-the-owner", "60000"}, want: "-1",
			check: func(t *testing.T, e *cliEnv, key string) { recordIs(t, e, key, store.StatusPending, "") }},
		{name: "nothing there", argv: []string{"tok", "60000"}, want: "0", check: recordAbsent},
	},
	"watch": {
		{name: "a pending record is marked", seed: goAcquire(""), want: "1",
			check: func(t *testing.T, e *cliEnv, key string) { recordIs(t, e, key, store.StatusPending, "") }},
		{name: "nothing there", want: "0", check: recordAbsent},
	},
	"delete": {
		{name: "owner deletes", seed: goAcquire(""), argv: []string{"$TOKEN"}, want: "1", check: recordAbsent},
		{name: "stale owner", seed: goAcquire(""), argv: []string{"not-the-owner"}, want: "STALE_OWNER", wantErr: true,
			check: func(t *testing.T, e *cliEnv, key string) { recordIs(t, e, key, store.StatusPending, "") }},
		{name: "unconditional", seed: goDo("receipt-1"), argv: []string{""}, want: "1", check: recordAbsent},
	},
}

// goAcquire acquires key through the Go store with a lease, and keeps the
// owner token for "$TOKEN".
func goAcquire(fingerprint string) func(*testing.T, *cliEnv, string) {
	return func(t *testing.T, e *cliEnv, key string) {
		t.Helper()
		r, ok, err := e.recs.AcquireWith(e.ctx, key, store.AcquireOptions{Lease: time.Minute, Fingerprint: fingerprint})
		if !ok || err != nil {
			t.Fatalf("Records.AcquireWith(%q) = %v, %v", key, ok, err)
		}
		e.token = r.Token
	}
}

// goDo completes key through Records.Do with result.
func goDo(result string) func(*testing.T, *cliEnv, string) {
	return func(t *testing.T, e *cliEnv, key string) {
		t.Helper()
		_, replayed, err := e.recs.Do(e.ctx, key, store.AcquireOptions{Lease: time.Minute},
			func(context.Context) ([]byte, error) { return []byte(result), nil })
		if replayed || err != nil {
			t.Fatalf("Records.Do(%q) = replayed %v, %v", key, replayed, err)
		}
	}
}

// recordIs checks Records.Get's view of key and returns the record.
func recordIs(t *testing.T, e *cliEnv, key string, status store.Status, payload string) store.Record {
	t.Helper()
	r, ok, err := e.recs.Get(e.ctx, key)
	if !ok || err != nil {
		t.Fatalf("Records.Get(%q) = found %v, %v", key, ok, err)
	}
	// The fence: the clock's when the record was created, 19 digits.
	if r.Status != status || string(r.Payload) != payload || r.Fence < 1e18 || r.Token != "" {
		t.Errorf("Records.Get(%q) = status %q, payload %q, fence %d, token %q; want %q, %q, a clock fence and no token",
			key, r.Status, r.Payload, r.Fence, r.Token, status, payload)
	}
	return r
}

// recordDone checks that Go sees key completed with result and that Do
// replays it without running anything.
func recordDone(result string) func(*testing.T, *cliEnv, string) {
	return func(t *testing.T, e *cliEnv, key string) {
		t.Helper()
		recordIs(t, e, key, store.StatusCompleted, result)
		got, replayed, err := e.recs.Do(e.ctx, key, store.AcquireOptions{Lease: time.Minute},
			func(context.Context) ([]byte, error) { t.Error("Do ran fn for a completed record"); return nil, nil })
		if string(got) != result || !replayed || err != nil {
			t.Errorf("Records.Do(%q) = %q, replayed %v, %v; want the stored %q replayed", key, got, replayed, err, result)
		}
	}
}

// recordAbsent checks that Go sees no record, and that Do runs fn.
func recordAbsent(t *testing.T, e *cliEnv, key string) {
	t.Helper()
	if _, ok, err := e.recs.Get(e.ctx, key); ok || err != nil {
		t.Fatalf("Records.Get(%q) = found %v, %v; want no record", key, ok, err)
	}
	if _, replayed, err := e.recs.Do(e.ctx, key, store.AcquireOptions{Lease: time.Minute},
		func(context.Context) ([]byte, error) { return []byte("new"), nil }); replayed || err != nil {
		t.Errorf("Records.Do(%q) = replayed %v, %v; want fn to run", key, replayed, err)
	}
}

// seeds runs several seeds in order.
func seeds(all ...func(*testing.T, *cliEnv, string)) func(*testing.T, *cliEnv, string) {
	return func(t *testing.T, e *cliEnv, id string) {
		for _, s := range all {
			s(t, e, id)
		}
	}
}

// goAppend appends messages (id, payload pairs) to connection id through the
// Go store.
func goAppend(pairs ...string) func(*testing.T, *cliEnv, string) {
	return func(t *testing.T, e *cliEnv, conn string) {
		t.Helper()
		for i := 0; i < len(pairs); i += 2 {
			if _, err := e.outbox.AppendWithID(e.ctx, conn, pairs[i], []byte(pairs[i+1])); err != nil {
				t.Fatalf("Outbox.AppendWithID(%q, %q): %v", conn, pairs[i], err)
			}
		}
	}
}

// goAdvance raises connection id's floor through the Go store.
func goAdvance(gen uint64) func(*testing.T, *cliEnv, string) {
	return func(t *testing.T, e *cliEnv, conn string) {
		t.Helper()
		if err := e.outbox.AdvanceGeneration(e.ctx, conn, gen); err != nil {
			t.Fatalf("Outbox.AdvanceGeneration(%q, %d): %v", conn, gen, err)
		}
	}
}

// outboxTail checks the Go store's view of connection id: its messages and
// generation floor.
func outboxTail(want []store.Message, gen uint64) func(*testing.T, *cliEnv, string) {
	return func(t *testing.T, e *cliEnv, conn string) {
		t.Helper()
		tail, err := e.outbox.Tail(e.ctx, conn)
		if err != nil {
			t.Fatalf("Outbox.Tail(%q): %v", conn, err)
		}
		if diff := cmp.Diff(want, tail.Messages, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("Outbox.Tail(%q).Messages (-want +got):\n%s", conn, diff)
		}
		if tail.Generation != gen {
			t.Errorf("Outbox.Tail(%q).Generation = %d, want %d", conn, tail.Generation, gen)
		}
	}
}

// goClaim marks id processed through the Go store.
func goClaim(t *testing.T, e *cliEnv, id string) {
	t.Helper()
	if ok, err := e.claims.Claim(e.ctx, id); !ok || err != nil {
		t.Fatalf("Claims.Claim(%q) = %v, %v", id, ok, err)
	}
}

// lease writes what Claims.Do writes while a consumer holds id.
func lease(token string) func(*testing.T, *cliEnv, string) {
	return func(t *testing.T, e *cliEnv, id string) {
		t.Helper()
		do(t, e.raw, "SET", e.prefix+id, "~"+token, "PX", "60000")
	}
}

// claimsSeen checks Claims.Seen, and for a processed id that Claims.Claim and
// Claims.Do treat it as a duplicate; for an absent one, that Do runs.
// claimsSeenMany wants Claims.SeenMany of id+suffix to be want.
func claimsSeenMany(suffixes []string, want []bool) func(*testing.T, *cliEnv, string) {
	return func(t *testing.T, e *cliEnv, id string) {
		t.Helper()
		ids := make([]string, len(suffixes))
		for i, s := range suffixes {
			ids[i] = id + s
		}
		got, err := e.claims.SeenMany(e.ctx, ids)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("Claims.SeenMany(%q) = %v, %v; want %v", ids, got, err, want)
		}
	}
}

func claimsSeen(want bool, state string) func(*testing.T, *cliEnv, string) {
	return func(t *testing.T, e *cliEnv, id string) {
		t.Helper()
		seen, err := e.claims.Seen(e.ctx, id)
		if err != nil || seen != want {
			t.Fatalf("Claims.Seen(%q) = %v, %v; want %v", id, seen, err, want)
		}
		ran, err := e.claims.Do(e.ctx, id, time.Minute, func(context.Context) error { return nil })
		switch {
		case state == "processed" && (ran || err != nil):
			t.Errorf("Claims.Do(%q) = %v, %v; want a duplicate (false, nil)", id, ran, err)
		case state == "" && (!ran || err != nil):
			t.Errorf("Claims.Do(%q) = %v, %v; want it to run (true, nil)", id, ran, err)
		}
	}
}

// claimsInFlight checks that the Go store sees id held by a lease.
func claimsInFlight(t *testing.T, e *cliEnv, id string) {
	t.Helper()
	if seen, err := e.claims.Seen(e.ctx, id); !seen || err != nil {
		t.Fatalf("Claims.Seen(%q) = %v, %v; want true", id, seen, err)
	}
	ran, err := e.claims.Do(e.ctx, id, time.Minute, func(context.Context) error { return nil })
	if ran || !errors.Is(err, store.ErrInFlight) {
		t.Errorf("Claims.Do(%q) = %v, %v; want ErrInFlight", id, ran, err)
	}
}

// redisCLI finds the redis-cli binary; without one the test is skipped (failed
// under CI=true).
func redisCLI(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("redis-cli"); err == nil {
		return p
	}
	for _, dir := range []string{"/usr/bin", "/usr/local/bin", "/opt/homebrew/bin"} {
		if p := filepath.Join(dir, "redis-cli"); isFile(p) {
			return p
		}
	}
	msg := "no redis-cli binary: install it with `sudo apt-get install redis-tools` (Debian/Ubuntu) or `brew install redis` (macOS)"
	if os.Getenv("CI") == "true" {
		t.Fatal("CI=true: " + msg)
	}
	t.Skip(msg)
	return ""
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// runRedisCLI runs redis-cli -e -u url args..., with stdin when not nil, and
// returns its output without the trailing newlines and whether the command
// failed (-e: exit status 1 on an error reply).
func runRedisCLI(t *testing.T, url string, stdin []byte, args ...string) (string, bool) {
	t.Helper()
	cmd := exec.Command(redisCLI(t), append([]string{"-e", "-u", url}, args...)...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("redis-cli %s: %v", strings.Join(args, " "), err)
	}
	return strings.TrimRight(out.String(), "\n"), err != nil
}

// argvRE reads the header's ARGV count: "ARGV (n=2)" or "ARGV (n>=2)".
var argvRE = regexp.MustCompile(`ARGV \(n(>=|=)(\d+)\)`)

// checkArgvCount fails when a case's ARGV does not fit the header.
func checkArgvCount(t *testing.T, s redisonce.Script, tc cliCase) {
	t.Helper()
	m := argvRE.FindStringSubmatch(s.Doc)
	if m == nil {
		t.Fatalf("%s: header has no ARGV (n=...) line", s.Name)
	}
	n, _ := strconv.Atoi(m[2])
	if (m[1] == "=" && len(tc.argv) != n) || (m[1] == ">=" && len(tc.argv) < n) {
		t.Fatalf("case %q passes %d ARGV, the header of %s.lua says n%s%d: call it as documented",
			tc.name, len(tc.argv), s.Name, m[1], n)
	}
}

// runCLICases runs every script's cases through redis-cli; call builds the
// command for one script (EVALSHA or FCALL).
func runCLICases(t *testing.T, url, mode string, call func(s redisonce.Script, keys []string, argv []string) []string) {
	t.Helper()
	e := newCLIEnv(t, url, "cli:"+mode+":"+strconv.FormatInt(time.Now().UnixNano(), 36)+":")
	all := map[string]bool{}
	for _, s := range redisonce.All() {
		all[s.Name] = true
		t.Run(s.Name, func(t *testing.T) {
			cases := redisCLICases[s.Name]
			if len(cases) == 0 {
				t.Fatalf("script %q has no redis-cli case: add its calls to redisCLICases in scripts_test/noncgo_callers_test.go "+
					"(exactly the KEYS and ARGV its header documents, and a check of the Go store's view)", s.Name)
			}
			for i, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					checkArgvCount(t, s, tc)
					id := s.Name + "-" + strconv.Itoa(i)
					e.token = ""
					if tc.seed != nil {
						tc.seed(t, e, id)
					}
					argv := make([]string, len(tc.argv))
					for j, a := range tc.argv {
						if a == "$TOKEN" {
							a = e.token
						}
						argv[j] = a
					}
					keys := []string{e.prefix + id}
					if s.Batch {
						if len(tc.keys) == 0 {
							t.Fatal("a batch script's case names its keys")
						}
						keys = keys[:0]
						for _, k := range tc.keys {
							keys = append(keys, e.prefix+id+k)
						}
					}
					args := call(s, keys, argv)
					out, failed := runRedisCLI(t, url, nil, args...)
					if tc.wantErr {
						if code, _, _ := strings.Cut(out, " "); !failed || code != tc.want {
							t.Fatalf("redis-cli %s: %q (failed %v), want an error %s", strings.Join(args, " "), out, failed, tc.want)
						}
					} else if tc.like != "" {
						if re := regexp.MustCompile(`^(?:` + tc.like + `)$`); failed || !re.MatchString(out) {
							t.Fatalf("redis-cli %s: %q (failed %v), want it to match %s", strings.Join(args, " "), out, failed, re)
						}
					} else if failed || out != tc.want {
						t.Fatalf("redis-cli %s: %q (failed %v), want %q", strings.Join(args, " "), out, failed, tc.want)
					}
					e.out = out
					if tc.check == nil {
						t.Fatal("the case has no check of the Go store's view")
					}
					tc.check(t, e, id)
				})
			}
		})
	}
	for name := range redisCLICases {
		if !all[name] {
			t.Errorf("redisCLICases has cases for %q, which is not a script", name)
		}
	}
}

func TestNonGoCallersEVALSHA(t *testing.T) {
	url := standaloneURL(t)
	// Load byte for byte from the file: `$(cat file)` would strip the trailing
	// newline and change the SHA1.
	for _, s := range redisonce.All() {
		src, err := os.ReadFile(filepath.Join("..", "scripts", s.Name+".lua"))
		if err != nil {
			t.Fatal(err)
		}
		if out, failed := runRedisCLI(t, url, src, "-x", "SCRIPT", "LOAD"); failed || out != s.SHA1 {
			t.Fatalf("redis-cli -x SCRIPT LOAD < scripts/%s.lua: %q (failed %v), want %s", s.Name, out, failed, s.SHA1)
		}
	}
	runCLICases(t, url, "evalsha", func(s redisonce.Script, keys []string, argv []string) []string {
		cmd := "EVALSHA"
		if s.ReadOnly {
			cmd = "EVALSHA_RO"
		}
		return append(append([]string{cmd, s.SHA1, strconv.Itoa(len(keys))}, keys...), argv...)
	})
}

func TestNonGoCallersFCALL(t *testing.T) {
	url := standaloneURL(t)
	name, code := redisonce.FunctionsLibrary()
	dropOlderLibraries(t, newClient(t, url), name)
	if out, failed := runRedisCLI(t, url, []byte(code), "-x", "FUNCTION", "LOAD", "REPLACE"); failed || out != name {
		t.Fatalf("redis-cli -x FUNCTION LOAD REPLACE: %q (failed %v), want %s", out, failed, name)
	}
	runCLICases(t, url, "fcall", func(s redisonce.Script, keys []string, argv []string) []string {
		cmd := "FCALL"
		if s.ReadOnly {
			cmd = "FCALL_RO"
		}
		return append(append([]string{cmd, redisonce.FunctionName(s.Name), strconv.Itoa(len(keys))}, keys...), argv...)
	})
	// A write function refused by FCALL_RO shows the flags are right.
	for _, s := range redisonce.All() {
		if s.ReadOnly {
			continue
		}
		out, failed := runRedisCLI(t, url, nil, "FCALL_RO", redisonce.FunctionName(s.Name), "1", "cli:ro-probe")
		if !failed || !strings.Contains(out, "write flag") {
			t.Errorf("FCALL_RO %s: %q (failed %v), want it refused as a write function", redisonce.FunctionName(s.Name), out, failed)
		}
	}
}

// dropOlderLibraries deletes redisonce_* libraries other than keep, left by a
// run of another version on a shared server: they hold the function names.
func dropOlderLibraries(t *testing.T, c rueidis.Client, keep string) {
	t.Helper()
	ctx := context.Background()
	for _, n := range c.Nodes() {
		libs, err := n.Do(ctx, n.B().FunctionList().Libraryname(redisonce.FunctionPrefix+"*").Build()).ToArray()
		if err != nil {
			t.Fatalf("FUNCTION LIST: %v", err)
		}
		for _, l := range libs {
			m, err := l.AsMap()
			if err != nil {
				t.Fatalf("FUNCTION LIST entry: %v", err)
			}
			v := m["library_name"]
			lib, _ := v.ToString()
			if lib != keep {
				if err := n.Do(ctx, n.B().FunctionDelete().LibraryName(lib).Build()).Error(); err != nil {
					t.Fatalf("FUNCTION DELETE %s: %v", lib, err)
				}
			}
		}
	}
}
