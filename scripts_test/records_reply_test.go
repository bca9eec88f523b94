package scripts_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
)

// A real Redis never answers a records script with a reply of the wrong shape,
// so these tests put a tiny RESP2 server in its place that answers every
// EVALSHA with a canned reply: the store must return ErrUnexpectedReply (or
// the mapped error), never panic, and never report success.

// recFakeRedis answers EVALSHA / EVALSHA_RO / EVAL / EVAL_RO with reply (raw
// RESP2) and anything else (connection setup) with +OK.
type recFakeRedis struct {
	ln    net.Listener
	mu    sync.Mutex
	reply string
}

func newRecFakeRedis(t *testing.T) *recFakeRedis {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &recFakeRedis{ln: ln}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer conn.Close()
				f.serve(conn)
			}()
		}
	}()
	return f
}

func (f *recFakeRedis) set(reply string) {
	f.mu.Lock()
	f.reply = reply
	f.mu.Unlock()
}

func (f *recFakeRedis) serve(conn net.Conn) {
	r := bufio.NewReader(conn)
	for {
		args, err := recReadCommand(r)
		if err != nil {
			return
		}
		out := "+OK\r\n"
		switch strings.ToUpper(args[0]) {
		case "EVALSHA", "EVALSHA_RO", "EVAL", "EVAL_RO":
			f.mu.Lock()
			out = f.reply
			f.mu.Unlock()
		case "PING":
			out = "+PONG\r\n"
		}
		if _, err := io.WriteString(conn, out); err != nil {
			return
		}
	}
}

// recReadCommand reads one RESP array of bulk strings.
func recReadCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if !strings.HasPrefix(line, "*") {
		return nil, fmt.Errorf("want an array, got %q", line)
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil || n < 1 {
		return nil, fmt.Errorf("bad array header %q", line)
	}
	args := make([]string, n)
	for i := range args {
		h, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(h, "$")))
		if err != nil {
			return nil, fmt.Errorf("bad bulk header %q", h)
		}
		buf := make([]byte, size+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		args[i] = string(buf[:size])
	}
	return args, nil
}

// recResp renders a RESP2 array of the given elements: ints as integers,
// strings as bulk strings, nil as a null bulk string, []any as nested arrays.
func recResp(elems ...any) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(elems))
	for _, e := range elems {
		switch v := e.(type) {
		case int:
			fmt.Fprintf(&b, ":%d\r\n", v)
		case string:
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(v), v)
		case nil:
			b.WriteString("$-1\r\n")
		case []any:
			b.WriteString(recResp(v...))
		}
	}
	return b.String()
}

func TestRecordsUnexpectedReplies(t *testing.T) {
	ctx := context.Background()
	f := newRecFakeRedis(t)
	c, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:       []string{f.ln.Addr().String()},
		AlwaysRESP2:       true,
		DisableCache:      true,
		ForceSingleClient: true,
		DisableRetry:      true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	s := must.Store(store.NewRecords(c))

	// A well-formed record, in reply order.
	rec := []any{"completed", "res", "1000", "2000", "0", "0", "1", "fp", ""}
	with := func(i int, v any) []any {
		r := append([]any(nil), rec...)
		r[i] = v
		return r
	}
	acquired := func(flag any, r []any) string { return recResp(append([]any{flag}, r...)...) }

	type call struct {
		name string
		run  func() error
	}
	acquire := call{"acquire", func() error { _, _, err := s.Acquire(ctx, "k", 0); return err }}
	get := call{"get", func() error { _, _, err := s.Get(ctx, "k"); return err }}
	update := call{"update", func() error {
		st := store.StatusCompleted
		return s.Update(ctx, "k", store.Update{Status: &st})
	}}
	del := call{"delete", func() error { return s.DeleteFenced(ctx, "k", "tok") }}
	do := call{"do", func() error {
		_, _, err := s.Do(ctx, "k", store.AcquireOptions{Lease: time.Second}, func(context.Context) ([]byte, error) {
			t.Error("fn ran on an unexpected reply")
			return nil, nil
		})
		return err
	}}

	cases := []struct {
		name  string
		reply string
		calls []call
		want  error
	}{
		{"status reply", "+OK\r\n", []call{acquire, get, update, del, do}, store.ErrUnexpectedReply},
		{"integer for a record", ":1\r\n", []call{acquire, get, do}, store.ErrUnexpectedReply},
		{"update answers 0 or 1", ":2\r\n", []call{update}, store.ErrUnexpectedReply},
		{"a record for update", recResp(rec...), []call{update}, store.ErrUnexpectedReply},
		{"nil for update", "$-1\r\n", []call{update}, store.ErrUnexpectedReply},
		{"empty array", recResp(), []call{acquire, get, update, del, do}, store.ErrUnexpectedReply},
		{"record one short", recResp(rec[:8]...), []call{get, update}, store.ErrUnexpectedReply},
		{"record one long", recResp(append(rec, "x")...), []call{get, update}, store.ErrUnexpectedReply},
		{"acquire without the flag", recResp(rec...), []call{acquire, do}, store.ErrUnexpectedReply},
		{"flag is a string", acquired("1", rec), []call{acquire, do}, store.ErrUnexpectedReply},
		{"flag is 2", acquired(2, rec), []call{acquire, do}, store.ErrUnexpectedReply},
		{"acquired without a token", acquired(1, rec), []call{acquire, do}, store.ErrUnexpectedReply},
		{"not acquired with a token", acquired(0, with(8, "tok")), []call{acquire, do}, store.ErrUnexpectedReply},
		{"time not a number", acquired(0, with(2, "soon")), []call{acquire, do}, store.ErrUnexpectedReply},
		{"negative time", recResp(with(4, "-5")...), []call{get, update}, store.ErrUnexpectedReply},
		{"negative integer time", recResp(with(3, -5)...), []call{get, update}, store.ErrUnexpectedReply},
		{"fence negative", recResp(with(6, "-1")...), []call{get, update}, store.ErrUnexpectedReply},
		{"fence past uint64", recResp(with(6, "18446744073709551616")...), []call{get}, store.ErrUnexpectedReply},
		{"empty status", acquired(0, with(0, "")), []call{acquire, do}, store.ErrUnexpectedReply},
		{"nil element", recResp(with(1, nil)...), []call{get, update}, store.ErrUnexpectedReply},
		{"nested array", recResp(with(1, []any{"a"})...), []call{get, update}, store.ErrUnexpectedReply},
		{"string for delete", "$1\r\n1\r\n", []call{del}, store.ErrUnexpectedReply},
		{"CORRUPT", "-CORRUPT the key holds a string, not a record hash\r\n", []call{acquire, get, update, del, do}, store.ErrUnexpectedReply},
		{"BADARG", "-BADARG ttl_ms must be a decimal integer >= 0\r\n", []call{acquire, update, del}, store.ErrInvalidArgument},
		{"MISMATCH", "-MISMATCH the key was acquired with a different fingerprint\r\n", []call{acquire, do}, store.ErrFingerprintMismatch},
		{"NOT_FOUND", "-NOT_FOUND no such record\r\n", []call{update}, store.ErrNotFound},
		{"STALE_OWNER", "-STALE_OWNER the record has another owner\r\n", []call{update, del}, store.ErrStaleOwner},
	}
	for _, tc := range cases {
		f.set(tc.reply)
		for _, cl := range tc.calls {
			t.Run(tc.name+"/"+cl.name, func(t *testing.T) {
				var err error
				func() {
					defer func() {
						if p := recover(); p != nil {
							t.Fatalf("panic on reply %q: %v", tc.reply, p)
						}
					}()
					err = cl.run()
				}()
				if !errors.Is(err, tc.want) {
					t.Errorf("error = %v, want %v", err, tc.want)
				}
				if err != nil && !strings.HasPrefix(err.Error(), "redisonce: ") {
					t.Errorf("error %q is not wrapped with the operation", err)
				}
			})
		}
	}

	// A well-formed reply parses, so the cases above fail for their flaw alone.
	f.set(recResp(rec...))
	got, ok, err := s.Get(ctx, "k")
	if err != nil || !ok || got.Status != store.StatusCompleted || string(got.Payload) != "res" || got.Fence != 1 ||
		got.CreatedAt.UnixMilli() != 1000 || got.UpdatedAt.UnixMilli() != 2000 || got.Fingerprint != "fp" {
		t.Errorf("Get of a good reply = %+v, %v, %v", got, ok, err)
	}
	f.set("$-1\r\n")
	if got, ok, err := s.Get(ctx, "k"); err != nil || ok || got.Key != "" {
		t.Errorf("Get of nil = %+v, %v, %v; want not found", got, ok, err)
	}
	f.set(acquired(1, with(8, "tok")))
	if got, ok, err := s.Acquire(ctx, "k", 0); err != nil || !ok || got.Token != "tok" {
		t.Errorf("Acquire of a good reply = %+v, %v, %v", got, ok, err)
	}
	st := store.StatusCompleted
	for _, r := range []string{":1\r\n", ":0\r\n"} {
		f.set(r)
		if err := s.Update(ctx, "k", store.Update{Status: &st}); err != nil {
			t.Errorf("Update of the reply %q: %v", r, err)
		}
	}
}
