package main

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/redisonce/redisonce/cmd/redisonce/internal/inspect"
	"github.com/redisonce/redisonce/internal/recordlayout"
	"github.com/redisonce/redisonce/internal/redisproc"
)

// Every byte from Redis the CLI prints is escaped: escape
// sequences and invalid UTF-8 stored in ids, tokens, statuses, fingerprints,
// payloads, message ids, generations, library names and key names never
// reach the terminal raw.

// evil holds an OSC title change, a screen clear, BEL, DEL, a bidi override
// and bytes that are not UTF-8.
const evil = "x\x1b]0;pwned\a\x1b[2J\x7f\u202e\xff\xfe"

// terminalSafe reports the first rune of s a terminal could act on: anything
// but printable characters, newline and tab, or invalid UTF-8.
func terminalSafe(s string) error {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size <= 1 {
				return fmt.Errorf("invalid UTF-8 at byte %d: %q", i, s[max(0, i-10):min(len(s), i+10)])
			}
		}
		if r != '\n' && r != '\t' && !strconv.IsPrint(r) {
			return fmt.Errorf("%U at byte %d: %q", r, i, s[max(0, i-10):min(len(s), i+10)])
		}
	}
	return nil
}

func TestCLIEscapesStoredBytes(t *testing.T) {
	srv := startServer(t, redisproc.Options{})
	now := time.Now().UnixMilli()
	// claims: an in-flight lease whose token and id are evil, and a processed
	// one whose value is not "1"
	mustDo(t, srv, "SET", "bq:idemp:"+evil, "~tok"+evil, "PX", "600000")
	mustDo(t, srv, "SET", "bq:idemp:v"+evil, "done"+evil)
	// outbox: a connection whose message id and payload are evil
	mustDo(t, srv, "HSET", "gateway:outbox:"+evil, "_seq", "2", "_gen", "3", "_epoch", "1700000000000000",
		"m"+evil, "1:pay"+evil, "n", "2:"+evil)
	// records: status, fingerprint, token and payload evil; the lease passed
	mustDo(t, srv, "SET", "idempotency:"+evil, string(recordlayout.Encode(recordlayout.Fields{Status: "pending", Payload: "p" + evil,
		CreatedMS: now - 5000, UpdatedMS: now - 5000, LeaseMS: now - 1000, Fence: "1", FP: "fp" + evil, Token: "t" + evil})))
	mustDo(t, srv, "SET", "idempotency:s"+evil, string(recordlayout.Encode(recordlayout.Fields{Status: "st" + evil,
		CreatedMS: now, UpdatedMS: now, Fence: "1"})))
	// foreign keys under every prefix
	for _, p := range []string{"bq:idemp:", "gateway:outbox:", "idempotency:"} {
		mustDo(t, srv, "RPUSH", p+"f"+evil, "x")
	}
	u := srv.URL()
	for _, args := range [][]string{
		{"inspect", "claim", evil, "--url", u},
		{"inspect", "claim", "v" + evil, "--url", u},
		{"inspect", "claim", "f" + evil, "--url", u},
		{"inspect", "tail", evil, "--url", u},
		{"inspect", "tail", "f" + evil, "--url", u},
		{"inspect", "record", evil, "--url", u},
		{"inspect", "record", "s" + evil, "--url", u},
		{"inspect", "record", "f" + evil, "--url", u},
		{"inspect", "record", "nope" + evil, "--url", u},
		{"inspect", "claim", evil, "--json", "--url", u},
		{"inspect", "tail", evil, "--json", "--url", u},
		{"inspect", "record", evil, "--json", "--url", u},
		{"stats", "--url", u},
		{"stats", "--json", "--url", u},
		{"version", "--url", u},
		{"load", "--url", u},
		{"call", "get", "idempotency:" + evil, "--url", u},
		{"call", "unacked", "gateway:outbox:" + evil, "--url", u},
		{"call", "claim", "bq:idemp:" + evil, "1000", "1", "--url", u},
		// errors quote what they were given: a URL with escapes, nothing there
		{"inspect", "claim", evil, "--url", "redis://" + evil + "@127.0.0.1:1"},
		{"stats", "--url", "redis://127.0.0.1:1/" + evil},
		{"stats", "--url", "redis://127.0.0.1:1/0?x=\xff\u202e"},
		{"load", "--url", "redis://127.0.0.1:1/\xff\u202e"},
	} {
		t.Run(strings.Join(args[:2], " "), func(t *testing.T) {
			code, out, errs := cli(t, args...)
			if err := terminalSafe(out); err != nil {
				t.Errorf("%q: stdout holds %v:\n%s", args, err, strconv.Quote(out))
			}
			if err := terminalSafe(errs); err != nil {
				t.Errorf("%q: stderr holds %v:\n%s", args, err, strconv.Quote(errs))
			}
			if code != 0 && !strings.HasPrefix(args[2], "nope") && !strings.HasPrefix(args[2], "f") && !strings.Contains(strings.Join(args, " "), "127.0.0.1:1") {
				t.Errorf("%q: exit %d, stderr %s", args, code, errs)
			}
		})
	}
}

// inspect.Show is the one escaping function: a string of printable characters other
// than space, '"' and '\' is shown as it is; any other is Go-quoted.
func TestShowEscapes(t *testing.T) {
	for in, want := range map[string]string{
		"order-17":          "order-17",
		"bq:idemp:{o}:1":    "bq:idemp:{o}:1",
		"héllo":             "héllo",
		"":                  `""`,
		"a b":               `"a b"`,
		`say "hi"`:          `"say \"hi\""`,
		`back\slash`:        `"back\\slash"`,
		"msg\x1b]0;pwned\a": `"msg\x1b]0;pwned\a"`,
		"bad\xff":           `"bad\xff"`,
		"bidi\u202eevil":    `"bidi\u202eevil"`,
		"tab\tnewline\n":    `"tab\tnewline\n"`,
	} {
		if got := inspect.Show(in); got != want {
			t.Errorf("Show(%q) = %s, want %s", in, got, want)
		}
	}
}
