package scripts_test

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redisonce/redisonce/internal/redisproc"
	"github.com/redisonce/redisonce/store"
)

// TestMemoryPerKey measures what each store's keys cost in Redis with MEMORY
// USAGE (SAMPLES 0: every field counted), on a private server with the hash
// encoding thresholds set explicitly to Redis 7's defaults. The figures are
// logged (go test -v -run TestMemoryPerKey) and quoted in
// docs/operating.md ("Memory per key"); the bounds asserted here are about twice them, to catch a
// layout change that blows a key up (a hash leaving its listpack encoding,
// say), not allocator noise.
//
// MEMORY USAGE counts the key, its value and the main dictionary's entry; not
// the entry in the expires dictionary that a key with a TTL has too (about 24
// bytes more on 64-bit builds, jemalloc's smallest class being 8).
func TestMemoryPerKey(t *testing.T) {
	srv := newServer(t, redisproc.Options{Args: []string{
		"--hash-max-listpack-entries", "128", "--hash-max-listpack-value", "64",
	}})
	c := newClient(t, srv.URL())
	ctx := context.Background()
	info, err := c.Do(ctx, c.B().Info().Section("server").Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	version := ""
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "redis_version:"); ok {
			version = v
		}
	}
	t.Logf("redis-server %s, hash-max-listpack-entries 128, hash-max-listpack-value 64", version)

	usage := func(key string) int64 {
		t.Helper()
		n, err := c.Do(ctx, c.B().MemoryUsage().Key(key).Samples(0).Build()).AsInt64()
		if err != nil {
			t.Fatalf("MEMORY USAGE %s: %v", key, err)
		}
		return n
	}
	encoding := func(key string) string {
		t.Helper()
		s, err := c.Do(ctx, c.B().ObjectEncoding().Key(key).Build()).ToString()
		if err != nil {
			t.Fatalf("OBJECT ENCODING %s: %v", key, err)
		}
		return s
	}
	check := func(what string, got, max int64) {
		t.Helper()
		t.Logf("%-58s %6d bytes", what, got)
		if got <= 0 || got > max {
			t.Errorf("%s: %d bytes, want 1..%d", what, got, max)
		}
	}
	id := func(i int) string { return fmt.Sprintf("9f1c6a2e-4b7d-4c1a-8e3f-%012d", i) } // a UUID's 36 bytes

	// Claims: one string key per id, default prefix "bq:idemp:".
	claims := mustStore(store.NewClaims(c, store.WithTTL(24*time.Hour)))
	if _, err := claims.Claim(ctx, id(1)); err != nil {
		t.Fatal(err)
	}
	check("claim, processed (value 1), 36-byte id, TTL", usage(store.DefaultClaimsPrefix+id(1)), 208)
	var inFlight int64
	if _, err := claims.Do(ctx, id(2), time.Minute, func(context.Context) error {
		inFlight = usage(store.DefaultClaimsPrefix + id(2))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	check("claim, in flight (value ~token), 36-byte id, lease", inFlight, 304)

	// Outbox: one hash per connection. A message is a field (its 32-hex id)
	// and a value "<seq>:<payload>".
	ob := mustStore(store.NewOutbox(c))
	tail := func(conn string, n, size int) string {
		t.Helper()
		key := "gateway:outbox:" + conn
		for i := 0; i < n; i++ {
			if _, _, err := ob.Append(ctx, conn, bytes.Repeat([]byte{'x'}, size)); err != nil {
				t.Fatal(err)
			}
		}
		return key
	}
	perMessage := func(what, conn string, n, size int, wantEnc string, max int64) {
		t.Helper()
		one := tail(conn, 1, size)
		u1 := usage(one)
		tail(conn, n-1, size)
		if e := encoding(one); e != wantEnc {
			t.Fatalf("%s: encoding %s, want %s", what, e, wantEnc)
		}
		check(what+", per message", (usage(one)-u1)/int64(n-1), max)
	}
	empty := tail("empty", 1, 0)
	msgs, err := ob.Unacked(ctx, "empty")
	if err != nil || len(msgs) != 1 {
		t.Fatalf("Unacked = %v, %v", msgs, err)
	}
	if err := ob.Ack(ctx, "empty", msgs[0].ID, 0); err != nil {
		t.Fatal(err)
	}
	check("outbox tail, drained (_seq, _gen, _epoch, _rid)", usage(empty), 240)
	perMessage("outbox, listpack tail (100 msgs, 32 B payload)", "small", 100, 32, "listpack", 144)
	perMessage("outbox, hashtable tail (1000 msgs, 32 B payload)", "large", 1000, 32, "hashtable", 256)
	perMessage("outbox, hashtable tail (100 msgs, 256 B payload)", "wide", 100, 256, "hashtable", 800)

	// Records: one string per key (layout 1), default prefix "idempotency:".
	recs := mustStore(store.NewRecords(c))
	record := func(key string, payload int, want string) {
		t.Helper()
		if _, _, err := recs.Do(ctx, key, store.AcquireOptions{TTL: 24 * time.Hour, Lease: time.Minute, Fingerprint: "sha256:0123456789abcdef"},
			func(context.Context) ([]byte, error) { return bytes.Repeat([]byte{'r'}, payload), nil }); err != nil {
			t.Fatal(err)
		}
		k := "idempotency:" + key
		if e := encoding(k); e != want {
			t.Fatalf("record with a %d-byte payload: encoding %s, want %s", payload, e, want)
		}
		// The key, its value (the header with its 19-digit fence, token,
		// fingerprint and payload, about 125 bytes besides the payload) and
		// jemalloc's rounding up to its size class (classes 128 bytes apart
		// between 512 and 1024: a 512-byte payload lands at 872): at most
		// 384 bytes besides the payload.
		max := int64(payload + 384)
		check("record, completed, "+strconv.Itoa(payload)+" B payload ("+want+")", usage(k), max)
	}
	record(id(3), 48, "raw")
	record(id(4), 512, "raw")
	if _, _, err := recs.AcquireWith(ctx, id(5), store.AcquireOptions{TTL: 24 * time.Hour, Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	check("record, pending (leased, no payload)", usage("idempotency:"+id(5)), 256)

}
