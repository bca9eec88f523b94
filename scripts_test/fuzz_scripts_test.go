package scripts_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce"
	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/internal/recordlayout"
	"github.com/redisonce/redisonce/store"
)

// FuzzScriptArgs sends every script arbitrary ARGV, as a non-Go caller could,
// on keys in every state the stores write and in states they never write.
// Whatever the input, a script answers with a value or with an error whose
// code is one of the closed list — never Redis's WRONGTYPE (a key of the wrong
// type is CORRUPT), never a Lua runtime error — and an error leaves the key exactly as
// it was, as does every run of a read-only script.
func FuzzScriptArgs(f *testing.F) {
	scripts := redisonce.All()
	slices.SortFunc(scripts, func(a, b redisonce.Script) int { return strings.Compare(a.Name, b.Name) })
	for i := range scripts {
		for state := range scriptStates {
			f.Add(uint8(i), uint8(state), []byte("0\xff1"))
		}
	}
	// Durations with leading zeros: Redis refuses "01000" as PX or PEXPIRE,
	// so the scripts must read it as 1000 (append.lua and advance.lua used
	// to fail after their first write).
	zeros := map[string]string{"claim": "01000\xff~tok", "commit": "tok\xff01000", "append": "m9\xffp\xff01000\xff0", "advance": "9\xff01000",
		"claim_many": "01000\xff1", "append_many": "01000\xff2\xffm9\xffp\xffm9\xffq"}
	for i, s := range scripts {
		if argv, ok := zeros[s.Name]; ok {
			for state := range scriptStates {
				f.Add(uint8(i), uint8(state), []byte(argv))
			}
		}
	}
	for _, seed := range [][]byte{
		[]byte("1000\xff~tok"), []byte("tok\xff0"), []byte("m1\xffpayload\xff0\xff0"), []byte("5\xffm1\xffm2"),
		[]byte("0\xfftok\xff\xff60000"), []byte("tok\xffstatus\xffcompleted\xffpayload\xffx"), []byte(""),
		[]byte("18446744073709551616\xffm1"), []byte("-1\xff1"), []byte("1e3\xff1"), []byte("\xff\xff\xff"),
		[]byte("\xfflease_ms\xff99999999999999999"), []byte("0\xff\x00\xff0\xff0"),
		[]byte("0\xff1\xffm1\xffp\xffm2\xffq\xffm1\xffr"), []byte("60000\xff~tok"),
		// The argument forms: update's durations (signed, 15 digits),
		// the absolute names it refuses, extra arguments.
		[]byte("\xffexpires_in_ms\xff-1"), []byte("tok\xfflease_in_ms\xff-999999999999999\xffexpires_in_ms\xff999999999999999"),
		[]byte("\xffexpires_in_ms\xff-0"), []byte("\xfflease_in_ms\xff1000000000000000"), []byte("\xffexpires_ms\xff86400000"),
		[]byte("m1\xffp\xff0\xff0\xffextra"), []byte("7\xff0\xffextra"), []byte("extra"),
	} {
		f.Add(uint8(0), uint8(0), seed)
	}
	c := harnessNewClient(f, harnessStandaloneURL(f))
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, script, state uint8, argv []byte) {
		s := scripts[int(script)%len(scripts)]
		st := scriptStates[int(state)%len(scriptStates)]
		prefix := fmt.Sprintf("fuzz:argv:%d:", fuzzSeq.Add(1))
		key := prefix + "k"
		ids := []string{"k"}
		keys := []string{key}
		if s.Batch {
			// A batch script gets a second key of the same slot in the next
			// state, and the first key twice: {k, k2, k}.
			ids = append(ids, "k2")
			keys = append(keys, prefix+"k2", key)
			st2 := scriptStates[(int(state)+1)%len(scriptStates)]
			if err := st2.seed(ctx, c, prefix, "k2"); err != nil {
				t.Fatalf("seed %s: %v", st2.name, err)
			}
		}
		defer cleanKeys(t, c, prefix, ids)
		if err := st.seed(ctx, c, prefix, "k"); err != nil {
			t.Fatalf("seed %s: %v", st.name, err)
		}
		args := []string{}
		if len(argv) > 0 {
			for _, a := range bytes.SplitN(argv, []byte{0xff}, 12) {
				args = append(args, string(a))
			}
		}
		rawAll := func() []rawKey {
			out := make([]rawKey, len(ids))
			for i, id := range ids {
				out[i] = raw(t, c, prefix+id)
			}
			return out
		}
		before := rawAll()
		nk := int64(len(keys))
		cmd := c.B().Eval().Script(s.Source).Numkeys(nk).Key(keys...).Arg(args...).Build()
		if s.ReadOnly {
			cmd = c.B().EvalRo().Script(s.Source).Numkeys(nk).Key(keys...).Arg(args...).Build()
		}
		res := c.Do(ctx, cmd)
		err := res.Error()
		after := rawAll()
		codes := []string{"BADARG", "STALE_OWNER", "NOT_FOUND", "FULL", "MISMATCH", "CORRUPT"}
		if err != nil && !rueidis.IsRedisNil(err) {
			if diff := cmp.Diff(before, after, approxTTL); diff != "" {
				t.Fatalf("%s on %s with %q failed (%v) after writing (-before +after):\n%s", s.Name, st.name, args, err, diff)
			}
			code := errCode(err)
			if !slices.Contains(codes, code) {
				t.Fatalf("%s on %s with %q: error %v is not one of the scripts' codes", s.Name, st.name, args, err)
			}
		}
		if s.Batch && err == nil {
			// A batch reply: one element per key, an error element only from
			// the closed list.
			arr, aerr := res.ToArray()
			if aerr != nil || len(arr) != len(keys) {
				t.Fatalf("%s on %s with %q: reply %v (%v), want %d elements", s.Name, st.name, args, arr, aerr, len(keys))
			}
			for _, e := range arr {
				if eerr := e.Error(); eerr != nil && !slices.Contains(codes, errCode(eerr)) {
					t.Fatalf("%s on %s with %q: element error %v is not one of the scripts' codes", s.Name, st.name, args, eerr)
				}
			}
		}
		if s.ReadOnly {
			if diff := cmp.Diff(before, after, approxTTL); diff != "" {
				t.Fatalf("read-only %s on %s with %q wrote (-before +after):\n%s", s.Name, st.name, args, diff)
			}
		}
	})
}

// scriptState is a state FuzzScriptArgs puts a key in before a script runs.
type scriptState struct {
	name string
	seed func(ctx context.Context, c rueidis.Client, prefix, id string) error
}

// rawSeed is a state made of raw commands on the key.
func rawSeed(cmds ...[]string) func(ctx context.Context, c rueidis.Client, prefix, id string) error {
	return func(ctx context.Context, c rueidis.Client, prefix, id string) error {
		for _, cmd := range cmds {
			args := make([]string, len(cmd))
			for i, a := range cmd {
				args[i] = strings.ReplaceAll(a, "$K", prefix+id)
			}
			if err := c.Do(ctx, c.B().Arbitrary(args...).Build()).Error(); err != nil {
				return err
			}
		}
		return nil
	}
}

var scriptStates = []scriptState{
	{"absent", rawSeed()},
	{"claim done", rawSeed([]string{"SET", "$K", "1"})},
	{"claim leased", rawSeed([]string{"SET", "$K", "~tok", "PX", "60000"})},
	{"outbox tail", outboxSeedTail},
	{"outbox drained", func(ctx context.Context, c rueidis.Client, prefix, id string) error {
		if err := outboxSeedTail(ctx, c, prefix, id); err != nil {
			return err
		}
		_, err := must.Store(store.NewOutbox(c, store.WithPrefix(prefix))).AckMany(ctx, id, []string{"m1", "m2"}, 5)
		return err
	}},
	{"record pending", recordsSeed},
	{"record completed", func(ctx context.Context, c rueidis.Client, prefix, id string) error {
		s := must.Store(store.NewRecords(c, store.WithPrefix(prefix), store.WithTTL(60e9)))
		_, _, err := s.Do(ctx, id, store.AcquireOptions{Lease: 60e9, Fingerprint: "fp"}, func(context.Context) ([]byte, error) {
			return []byte("result"), nil
		})
		return err
	}},
	{"foreign string", rawSeed([]string{"SET", "$K", "{\"status\":\"done\"}"})},
	{"foreign hash", rawSeed([]string{"HSET", "$K", "f", "v"})},
	{"list", rawSeed([]string{"RPUSH", "$K", "a", "b"})},
	{"corrupt outbox", rawSeed([]string{"HSET", "$K", "_seq", "x", "_gen", "0", "_epoch", "1", "m1", "nocolon"})},
	{"corrupt outbox gen", rawSeed([]string{"HSET", "$K", "_seq", "1", "_gen", "99999999999999999999", "_epoch", "1", "m1", "1:p"})},
	{"corrupt record", rawSeed([]string{"HSET", "$K", "status", "pending", "fence", "abc", "token", "tok", "lease_ms", "x"})},
	// The edges: seqs near and at the end of the exact range, a fence-only
	// incarnation, loose numbers that are not canonical, fences at their limit.
	{"outbox seq 10^14", rawSeed([]string{"HSET", "$K", "_seq", "99999999999998", "_gen", "3", "_epoch", "1700000000000000", "m1", "99999999999998:p"})},
	{"outbox seq 2^53-1", rawSeed([]string{"HSET", "$K", "_seq", "9007199254740991", "_gen", "3", "_epoch", "1700000000000000", "m1", "9007199254740991:p"})},
	{"outbox fence only", rawSeed([]string{"HSET", "$K", "_seq", "0", "_gen", "7", "_epoch", "1700000000000000"})},
	{"outbox seq 00005", rawSeed([]string{"HSET", "$K", "_seq", "00005", "_gen", "0", "_epoch", "1700000000000000", "m1", "1:p"})},
	{"outbox no _seq", rawSeed([]string{"HSET", "$K", "_gen", "0", "_epoch", "1700000000000000", "m1", "1:p"})},
	{"record fence max", rawSeed([]string{"HSET", "$K", "status", "pending", "payload", "", "created_ms", "1", "updated_ms", "1", "expires_ms", "0", "lease_ms", "1", "fence", "9999999999999999999", "fp", "", "token", "tok"})},
	{"record fence 0100", rawSeed([]string{"HSET", "$K", "status", "pending", "payload", "", "created_ms", "1", "updated_ms", "1", "expires_ms", "0", "lease_ms", "1", "fence", "0100", "fp", "", "token", "tok"})},
	// Layout 1, at its edges and past them.
	{"record layout 1 fence max", rawSeed([]string{"SET", "$K", string(recordlayout.Encode(recordlayout.Fields{Status: "pending", CreatedMS: 1, UpdatedMS: 1, LeaseMS: 1, Fence: "9999999999999999999", Token: "tok"}))})},
	{"record layout 1 lease passed", rawSeed([]string{"SET", "$K", string(recordlayout.Encode(recordlayout.Fields{Status: "pending", Payload: "p\x00", CreatedMS: 1, UpdatedMS: 1, LeaseMS: 1, Fence: "9007199254740993", FP: "fp", Token: "tok"}))})},
	{"record layout 1 truncated", rawSeed([]string{"SET", "$K", string(recordlayout.Encode(recordlayout.Fields{Status: "pending", Fence: "1", Token: "tok"}))[:40]})},
	{"record layout 1 NaN", rawSeed([]string{"SET", "$K", "ro1 \x7f\xf8\x00\x00\x00\x00\x00\x01" + string(recordlayout.Encode(recordlayout.Fields{Status: "pending", Fence: "1", Token: "tok"}))[12:]})},
}

// FuzzRecordValue stores arbitrary bytes as a record's value and runs get.lua
// and acquire.lua on it: the Lua parser and its Go twin (recordlayout.Decode)
// must agree. A value Decode refuses is CORRUPT for both scripts and stays
// exactly as it was; a value it reads is the record get answers (without the
// token), field for field — never a Lua error, never another record.
func FuzzRecordValue(f *testing.F) {
	good := recordlayout.Fields{Status: "completed", Payload: "res\x00ult", CreatedMS: 1796151897773, UpdatedMS: 1796151897876,
		ExpiresMS: 0, LeaseMS: 0, Fence: "42", FP: "fp", Token: "tok"}
	v := recordlayout.Encode(good)
	f.Add(v)
	f.Add(v[:len(v)-3])
	f.Add(recordlayout.Encode(recordlayout.Fields{Status: "pending", LeaseMS: 1, Fence: "9999999999999999999", Token: "t"}))
	f.Add([]byte("ro1 "))
	f.Add(recordlayout.Encode(recordlayout.Fields{Status: "pending", LeaseMS: 1, Fence: "7", Token: "t", Watched: true}))
	f.Add([]byte(`{"status":"completed"}`))
	c := harnessNewClient(f, harnessStandaloneURL(f))
	ctx := context.Background()
	get, _ := redisonce.Get("get")
	acquire, _ := redisonce.Get("acquire")
	for _, s := range []redisonce.Script{get, acquire} {
		if err := c.Do(ctx, c.B().ScriptLoad().Script(s.Source).Build()).Error(); err != nil {
			f.Fatal(err)
		}
	}
	f.Fuzz(func(t *testing.T, v []byte) {
		key := fmt.Sprintf("fuzzrec:%d", time.Now().UnixNano())
		defer c.Do(ctx, c.B().Del().Key(key).Build())
		if err := c.Do(ctx, c.B().Set().Key(key).Value(rueidis.BinaryString(v)).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		want, derr := recordlayout.Decode(v)
		m, err := c.Do(ctx, c.B().EvalshaRo().Sha1(get.SHA1).Numkeys(1).Key(key).Build()).ToMessage()
		if derr != nil {
			if code := errCode(err); code != "CORRUPT" {
				t.Fatalf("get.lua on %q (Decode: %v) = %v, %v; want CORRUPT", v, derr, reply(m), err)
			}
			// acquire refuses it too, and leaves the bytes alone.
			_, err := c.Do(ctx, c.B().Evalsha().Sha1(acquire.SHA1).Numkeys(1).Key(key).Arg("0", "tokZ", "", "1000").Build()).ToMessage()
			if code := errCode(err); code != "CORRUPT" {
				t.Fatalf("acquire.lua on %q = %v; want CORRUPT", v, err)
			}
			if got, _ := c.Do(ctx, c.B().Get().Key(key).Build()).AsBytes(); !bytes.Equal(got, v) {
				t.Fatalf("a refused acquire changed %q to %q", v, got)
			}
			return
		}
		if err != nil {
			t.Fatalf("get.lua on a record Decode reads (%+v): %v", want, err)
		}
		got := recReply(m)
		w := fieldsMap(want)
		exp := []string{w["status"], w["payload"], w["created_ms"], w["updated_ms"], w["expires_ms"], w["lease_ms"], w["fence"], w["fp"], ""}
		if diff := cmp.Diff(exp, got); diff != "" {
			t.Fatalf("get.lua and recordlayout.Decode disagree on %q (-Decode +get):\n%s", v, diff)
		}
	})
}
