package scripts_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce"
	"github.com/redisonce/redisonce/internal/recordlayout"
)

// The KEYS rule: every script refuses a wrong key count and a key
// outside 1..redisonce.MaxKeyLen bytes with BADARG before anything else (a
// single-item script takes exactly one key, a batch script
// 1..redisonce.MaxBatchKeys), by EVALSHA and by FCALL, and changes nothing.

// keysCase is a call of one script that, with a good key, reads or writes the
// seeded key: the refused calls below must then leave it as it was.
type keysCase struct {
	name string
	seed func(t *testing.T, c rueidis.Client, key string) // nil: the key stays absent
	args []string
}

// perKeyArgs are, for the batch scripts whose ARGV holds one argument per
// key, the ARGV of a call on n keys (their keysCase's args are unused).
var perKeyArgs = map[string]func(n int) []string{
	"lease_many":   eachKey("~tok", "100000"),
	"extend_many":  eachKey("tok", "50000"),
	"commit_many":  eachKey("tok", "100000"),
	"release_many": eachKey("tok"),
}

// argv is the case's ARGV for a call on n keys.
func (tc keysCase) argv(n int) []string {
	if f := perKeyArgs[tc.name]; f != nil {
		return f(n)
	}
	return tc.args
}

// eachKey is ARGV of first, then one arg per key.
func eachKey(arg string, first ...string) func(n int) []string {
	return func(n int) []string {
		out := append([]string(nil), first...)
		for range n {
			out = append(out, arg)
		}
		return out
	}
}

func seedCmd(args ...string) func(t *testing.T, c rueidis.Client, key string) {
	return func(t *testing.T, c rueidis.Client, key string) {
		do(t, c, append([]string{args[0], key}, args[1:]...)...)
	}
}

func seedRecord(t *testing.T, c rueidis.Client, key string) {
	now := time.Now().UnixMilli()
	do(t, c, "SET", key, string(recordlayout.Encode(recordlayout.Fields{Status: "pending", CreatedMS: now, UpdatedMS: now,
		LeaseMS: now + 100_000, Fence: "1", Token: "tok"})))
}

func seedOutbox(t *testing.T, c rueidis.Client, key string) {
	do(t, c, "HSET", key, "_seq", "1", "_gen", "0", "_epoch", "1700000000000000", "_rid", outboxRid(t, c), "m", "1:p")
}

var keysCases = []keysCase{
	{"claim", nil, []string{"100000", "1"}},
	{"seen", seedCmd("SET", "1"), nil},
	{"forget", seedCmd("SET", "1"), nil},
	{"commit", seedCmd("SET", "~tok", "PX", "100000"), []string{"tok", "100000"}},
	{"release", seedCmd("SET", "~tok", "PX", "100000"), []string{"tok"}},
	{"extend", seedCmd("SET", "~tok", "PX", "100000"), []string{"tok", "50000"}},
	{"lease_many", nil, nil},
	{"extend_many", seedCmd("SET", "~tok", "PX", "100000"), nil},
	{"commit_many", seedCmd("SET", "~tok", "PX", "100000"), nil},
	{"release_many", seedCmd("SET", "~tok", "PX", "100000"), nil},
	{"append", nil, []string{"m", "p", "0", "0"}},
	{"append_many", nil, []string{"0", "0", "m", "p"}},
	{"ack", seedOutbox, []string{"1", "m"}},
	{"advance", seedOutbox, []string{"5", "0"}},
	{"unacked", seedOutbox, nil},
	{"drop", seedOutbox, nil},
	{"acquire", nil, []string{"0", "tok", "", "0"}},
	{"get", seedRecord, nil},
	{"update", seedRecord, []string{"tok", "status", "completed"}},
	{"delete", seedRecord, []string{"tok"}},
	{"renew", seedRecord, []string{"tok", "50000"}},
	{"complete", seedRecord, []string{"tok", "completed", "r"}},
	{"watch", seedRecord, nil},
	{"claim_many", nil, []string{"100000", "1"}},
	{"seen_many", seedCmd("SET", "1"), nil},
	{"coalesce_trigger", nil, []string{"tok", "100000", "0", "0", "0", "p"}},
	{"coalesce_take", seedCmd("HSET", "next", "p", "due", "0", "first", "0"), []string{"tok", "100000"}},
	{"coalesce_extend", seedCmd("HSET", "tok", "tok", "lease", "1", "fence", "1", "run", "p"), []string{"tok", "100000"}},
	{"coalesce_finish", seedCmd("HSET", "tok", "tok", "lease", "1", "fence", "1", "run", "p"), []string{"tok", "1", "done", "0", "100000", "0"}},
}

// callKeys runs script s with keys and args by EVALSHA (EVALSHA_RO for a
// read-only script) or by FCALL (FCALL_RO).
func callKeys(c rueidis.Client, s redisonce.Script, fcall bool, keys []string, args ...string) (rueidis.RedisMessage, error) {
	var cmd []string
	switch {
	case fcall && s.ReadOnly:
		cmd = []string{"FCALL_RO", redisonce.FunctionName(s.Name)}
	case fcall:
		cmd = []string{"FCALL", redisonce.FunctionName(s.Name)}
	case s.ReadOnly:
		cmd = []string{"EVALSHA_RO", s.SHA1}
	default:
		cmd = []string{"EVALSHA", s.SHA1}
	}
	cmd = append(cmd, fmt.Sprint(len(keys)))
	cmd = append(append(cmd, keys...), args...)
	return c.Do(context.Background(), c.B().Arbitrary(cmd...).Build()).ToMessage()
}

// padKey returns key padded with 'x' to n bytes.
func padKey(t *testing.T, key string, n int) string {
	if len(key) > n {
		t.Fatalf("key %q is already longer than %d", key, n)
	}
	return key + strings.Repeat("x", n-len(key))
}

func loadFunctions(t *testing.T, c rueidis.Client) {
	t.Helper()
	_, code := redisonce.FunctionsLibrary()
	if err := c.Do(context.Background(), c.B().FunctionLoad().Replace().FunctionCode(code).Build()).Error(); err != nil {
		t.Fatalf("FUNCTION LOAD: %v", err)
	}
}

func TestScriptsKeysRule(t *testing.T) {
	if redisonce.MaxKeyLen != 2048 || redisonce.MaxBatchKeys != 500 {
		t.Fatalf("MaxKeyLen %d, MaxBatchKeys %d: docs/non-go.md and the headers say 2048 and 500", redisonce.MaxKeyLen, redisonce.MaxBatchKeys)
	}
	c := newClient(t, standaloneURL(t))
	loadScripts(t, c)
	loadFunctions(t, c)
	// The empty key: a script that took it would leave a key named "".
	do(t, c, "DEL", "")
	t.Cleanup(func() { c.Do(context.Background(), c.B().Del().Key("").Build()) })
	covered := map[string]bool{}
	for _, tc := range keysCases {
		covered[tc.name] = true
		s, ok := redisonce.Get(tc.name)
		if !ok {
			t.Fatalf("no script %q", tc.name)
		}
		for _, fcall := range []bool{false, true} {
			via := map[bool]string{false: "evalsha", true: "fcall"}[fcall]
			t.Run(tc.name+"/"+via, func(t *testing.T) {
				seed := func(key string) {
					if tc.seed != nil {
						tc.seed(t, c, key)
					}
				}
				refused := func(what string, keys ...string) {
					t.Helper()
					before := make([]rawKey, len(keys))
					for i, k := range keys {
						before[i] = raw(t, c, k)
					}
					m, err := callKeys(c, s, fcall, keys, tc.argv(len(keys))...)
					if errCode(err) != "BADARG" || !strings.Contains(err.Error(), "key") {
						t.Errorf("%s: reply %s, error %v; want BADARG about the keys", what, reply(m), err)
					}
					for i, k := range keys {
						if diff := cmp.Diff(before[i], raw(t, c, k), approxTTL); diff != "" {
							t.Errorf("%s changed key %d (-before +after):\n%s", what, i+1, diff)
						}
					}
				}
				base := keyFor(t, "keysrule:")
				good := base + ":good"
				seed(good)

				refused("no key")
				if !s.Batch {
					other := base + ":other"
					seed(other)
					refused("two keys", good, other)
				} else {
					many := make([]string, redisonce.MaxBatchKeys+1)
					for i := range many {
						many[i] = fmt.Sprintf("%s:%d", base, i)
					}
					refused(fmt.Sprintf("%d keys", len(many)), many...)
					m, err := callKeys(c, s, fcall, many[:redisonce.MaxBatchKeys], tc.argv(redisonce.MaxBatchKeys)...)
					if arr, aerr := m.ToArray(); err != nil || aerr != nil || len(arr) != redisonce.MaxBatchKeys {
						t.Errorf("%d keys: %s, %v; want an array of %d", redisonce.MaxBatchKeys, reply(m), err, redisonce.MaxBatchKeys)
					}
				}

				long := padKey(t, base+":long", redisonce.MaxKeyLen+1)
				seed(long)
				refused(fmt.Sprintf("a %d-byte key", len(long)), long)
				refused("an empty key", "")
				if s.Batch {
					refused("a good key and a long one", base+":fresh", long)
				}

				// A key of exactly MaxKeyLen bytes runs as any other.
				edge := padKey(t, base+":edge", redisonce.MaxKeyLen)
				seed(edge)
				if m, err := callKeys(c, s, fcall, []string{edge}, tc.argv(1)...); err != nil {
					t.Errorf("a %d-byte key: %s, %v; want it to run", len(edge), reply(m), err)
				}
			})
		}
	}
	for _, s := range redisonce.All() {
		if !covered[s.Name] {
			t.Errorf("script %s has no case in keysCases", s.Name)
		}
	}
}

// The order of checks docs/non-go.md states: the KEYS rule, then the arguments
// (BADARG), then the key (CORRUPT), then the verdicts. Seven "x" arguments
// are a bad argument list for every script; on a key of the wrong type
// (a list: no script reads one) each answers BADARG, not CORRUPT, and on a
// missing key BADARG, not NOT_FOUND or a reply.
func TestScriptsBadargBeforeTheKey(t *testing.T) {
	c := newClient(t, standaloneURL(t))
	loadScripts(t, c)
	bad := []string{"x", "x", "x", "x", "x", "x", "x"}
	for _, s := range redisonce.All() {
		for _, seeded := range []bool{false, true} {
			key := keyFor(t, "badargfirst:") + s.Name
			if seeded {
				do(t, c, "RPUSH", key, "v")
			}
			before := raw(t, c, key)
			m, err := callKeys(c, s, false, []string{key}, bad...)
			if errCode(err) != "BADARG" {
				t.Errorf("%s with 7 bad arguments on a %s key: %s, %v; want BADARG", s.Name, before.Type, reply(m), err)
			}
			if diff := cmp.Diff(before, raw(t, c, key), approxTTL); diff != "" {
				t.Errorf("%s changed the key (-before +after):\n%s", s.Name, diff)
			}
		}
	}
}
