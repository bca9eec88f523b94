package scripts_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/store"
)

// FuzzReplies: whatever a script answers, the stores' reply parsing returns a
// value or an error that wraps a store sentinel (ErrUnexpectedReply for a
// wrong shape) or the Redis error it got — never a panic, never a bare
// parsing error. The replies are real: an impostor client runs, in place of
// each script the stores send, a Lua script built from the fuzz input on the
// real server, in RESP2 or RESP3 conversion (maps, doubles, booleans, nested
// arrays, status and error replies, nil).
func FuzzReplies(f *testing.F) {
	for _, seed := range []string{
		"", "\x00\x01", "\x01\x02\x05abcde", "\x04\x03\x00\x05\x00\x07\x00\x09",
		"\x06\x05STALE", "\x09\x00\x04\x02\x02\x01", "\x81\x09\x01\x03", "\x81\x09\x02", "\x04\x0a\x02\x02pending\x02\x00",
		"\x04\x09\x03\x01\x00\x02\x06status\x02\x07pending\x00\x01\x00\x02\x00\x03",
	} {
		f.Add([]byte(seed))
	}
	real := harnessNewClient(f, harnessStandaloneURL(f))
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, data []byte) {
		r := &opReader{b: data}
		resp3 := r.byte()&0x80 != 0
		src := "return " + luaReply(r, 0, resp3)
		if resp3 {
			src = "redis.setresp(3); " + src
		}
		c := replyImpostor{Client: real, src: src}
		prefix := fmt.Sprintf("fuzz:replies:%d:", fuzzSeq.Add(1))
		for _, k := range reliabilityStores {
			for _, p := range k.probes(c, prefix) {
				_, err := p.run(ctx, "k")
				if err != nil && !wellFormedError(err) {
					t.Fatalf("%s %s, script %q: error %v (%T) wraps neither a store sentinel nor a Redis error",
						k.name, p.name, src, err, errors.Unwrap(err))
				}
			}
		}
		cleanKeys(t, real, prefix, []string{"k"})
	})
}

// replyImpostor sends, in place of every EVALSHA/EVAL (and their _RO forms),
// EVAL of its own script with the same key and arguments, to a real server.
type replyImpostor struct {
	rueidis.Client
	src string
}

func (c replyImpostor) swap(cmd rueidis.Completed) rueidis.Completed {
	cs := cmd.Commands()
	if len(cs) >= 4 && strings.HasPrefix(cs[0], "EVAL") {
		return c.Client.B().Eval().Script(c.src).Numkeys(1).Key(cs[3]).Arg(cs[4:]...).Build()
	}
	return cmd
}

func (c replyImpostor) Do(ctx context.Context, cmd rueidis.Completed) rueidis.RedisResult {
	return c.Client.Do(ctx, c.swap(cmd))
}

func (c replyImpostor) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	swapped := make([]rueidis.Completed, len(cmds))
	for i, cmd := range cmds {
		swapped[i] = c.swap(cmd)
	}
	return c.Client.DoMulti(ctx, swapped...)
}

// wellFormedError reports whether err wraps one of the stores' sentinels or
// a Redis error reply (an unknown code is passed on as it is).
func wellFormedError(err error) bool {
	for _, s := range []error{store.ErrInvalidArgument, store.ErrNotFound, store.ErrStaleOwner, store.ErrInFlight,
		store.ErrLeaseLost, store.ErrOutboxFull, store.ErrFingerprintMismatch, store.ErrUnexpectedReply, store.ErrFailed} {
		if errors.Is(err, s) {
			return true
		}
	}
	var re *rueidis.RedisError
	return errors.As(err, &re)
}

// luaReply builds a Lua expression for a script's reply from the input:
// integers, strings (decimal ones too), nil, nested arrays, status and error
// replies, floats (Redis truncates them) and, in RESP3 mode, maps, doubles
// and booleans.
func luaReply(r *opReader, depth int, resp3 bool) string {
	kinds := 9
	if resp3 {
		kinds = 12
	}
	if depth >= 3 {
		kinds = 4 // leaves only
	}
	switch int(r.byte()) % kinds {
	case 0:
		return strconv.Itoa(int(int8(r.byte())))
	case 1:
		return luaString(r.bytes(12))
	case 2:
		return luaString(strconv.Itoa(int(r.byte()) * int(r.byte()) * 1000003))
	case 3:
		return strconv.FormatInt(int64(r.byte())<<40|int64(r.byte())<<20, 10)
	case 4:
		return "false" // nil
	case 5, 6:
		n := int(r.byte() % 11)
		parts := make([]string, n)
		for i := range parts {
			parts[i] = luaReply(r, depth+1, resp3)
			if parts[i] == "false" { // a nil ends a Lua array: keep the length
				parts[i] = "0"
			}
		}
		return "{" + strings.Join(parts, ", ") + "}"
	case 7:
		codes := []string{"BADARG", "STALE_OWNER", "NOT_FOUND", "FULL", "MISMATCH", "CORRUPT", "WRONGTYPE", "ERR", "WHAT"}
		return fmt.Sprintf("{err=%s}", luaString(pick(r, codes)+" "+r.bytes(6)))
	case 8:
		return fmt.Sprintf("{ok=%s}", luaString(r.bytes(6)))
	case 9:
		return fmt.Sprintf("{map={a=%s, b=%s}}", luaReply(r, depth+1, resp3), luaReply(r, depth+1, resp3))
	case 10:
		return fmt.Sprintf("{double=%d.5}", int(r.byte()))
	default:
		return pick(r, []string{"true", "{1.5}", "{-0.5, 2.25}"})
	}
}

// luaString quotes any bytes as a Lua string literal.
func luaString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		fmt.Fprintf(&b, "\\%d", s[i])
	}
	b.WriteByte('"')
	return b.String()
}
