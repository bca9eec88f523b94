package scripts_test

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goliatone/go-job/queue/idempotency"
	gojobredis "github.com/goliatone/go-job/queue/idempotency/redis"
	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/internal/redisproc"
	"github.com/redisonce/redisonce/store"
)

// TestMemoryAgainstAlternatives measures, with MEMORY USAGE (SAMPLES 0), what
// one item costs in each store next to what a user would otherwise keep in
// Redis for it: a plain `SET key 1 NX PX` dedupe key, a Redis Stream entry for
// an outbox message (XADD with the id and payload as fields), go-job's
// JSON-string record (its own Redis store). It runs twice, with Redis 7's
// default hash thresholds and with hash-max-listpack-value raised to 512, and
// logs one table (go test -v -run TestMemoryAgainstAlternatives) quoted in
// BENCHMARKS.md. Asserted: the facts the page states (which encoding a tail
// or record gets; a processed claim costs exactly a plain SET NX key; raising
// hash-max-listpack-value keeps a 256-byte tail in listpack and makes it
// smaller), not the byte counts.
func TestMemoryAgainstAlternatives(t *testing.T) {
	type row struct {
		what  string
		bytes float64
		enc   string
	}
	measure := func(t *testing.T, args ...string) map[string]row {
		srv := newServer(t, redisproc.Options{Args: args})
		c := newClient(t, srv.URL())
		ctx := context.Background()
		rows := map[string]row{}
		usage := func(key string) float64 {
			t.Helper()
			n, err := c.Do(ctx, c.B().MemoryUsage().Key(key).Samples(0).Build()).AsInt64()
			if err != nil {
				t.Fatalf("MEMORY USAGE %s: %v", key, err)
			}
			return float64(n)
		}
		enc := func(key string) string {
			s, _ := c.Do(ctx, c.B().ObjectEncoding().Key(key).Build()).ToString()
			return s
		}
		add := func(name, what string, b float64, key string) {
			rows[name] = row{what: what, bytes: b, enc: enc(key)}
		}
		id := func(i int) string { return fmt.Sprintf("9f1c6a2e-4b7d-4c1a-8e3f-%012d", i) } // 36 bytes

		// Claims against a plain SET NX key.
		claims := mustStore(store.NewClaims(c, store.WithTTL(24*time.Hour)))
		if _, err := claims.Claim(ctx, id(1)); err != nil {
			t.Fatal(err)
		}
		add("claim", "claim, processed (36-byte id, TTL)", usage(store.DefaultClaimsPrefix+id(1)), store.DefaultClaimsPrefix+id(1))
		if _, err := claims.Do(ctx, id(2), time.Minute, func(context.Context) error {
			add("inflight", "claim, in flight (~token, lease)", usage(store.DefaultClaimsPrefix+id(2)), store.DefaultClaimsPrefix+id(2))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		// Same key length as the claim's ("bq:plain:" and "bq:idemp:" are 9 bytes).
		do(t, c, "SET", "bq:plain:"+id(1), "1", "NX", "PX", "86400000")
		add("setnx", "plain SET key 1 NX PX (same key length)", usage("bq:plain:"+id(1)), "bq:plain:"+id(1))

		// Outbox messages against Stream entries, per message.
		ob := mustStore(store.NewOutbox(c))
		perMessage := func(name, what, conn string, n, size int) {
			t.Helper()
			msgs := make([]store.Outgoing, n)
			for i := range msgs {
				msgs[i] = store.Outgoing{Payload: bytes.Repeat([]byte{'x'}, size)}
			}
			if _, err := ob.AppendMany(ctx, conn, msgs[:1]); err != nil {
				t.Fatal(err)
			}
			key := "gateway:outbox:" + conn
			one := usage(key)
			if _, err := ob.AppendMany(ctx, conn, msgs[1:]); err != nil {
				t.Fatal(err)
			}
			add(name, what, (usage(key)-one)/float64(n-1), key)
			// The Stream: XADD * id <32 hex> payload <bytes>.
			skey := "stream:" + conn
			do(t, c, "XADD", skey, "*", "id", strings.Repeat("f", 32), "payload", strings.Repeat("x", size))
			sone := usage(skey)
			for i := 1; i < n; i++ {
				do(t, c, "XADD", skey, "*", "id", fmt.Sprintf("%032x", i), "payload", strings.Repeat("x", size))
			}
			add(name+"-stream", "  Stream entry, same id and payload", (usage(skey)-sone)/float64(n-1), skey)
		}
		perMessage("ob-small", "outbox message, 100-message tail, 32 B payload", "small", 100, 32)
		perMessage("ob-wide", "outbox message, 100-message tail, 256 B payload", "wide", 100, 256)
		perMessage("ob-large", "outbox message, 1000-message tail, 32 B payload", "large", 1000, 32)

		// A record against go-job's JSON string, both completed with the same
		// 48-byte and 256-byte results.
		recs := mustStore(store.NewRecords(c))
		gj := gojobredis.NewStore(gojobRueidis{c})
		done := idempotency.StatusCompleted
		for _, size := range []int{48, 256} {
			key := id(10 + size)
			p := bytes.Repeat([]byte{'r'}, size)
			if _, _, err := recs.AcquireWith(ctx, key, store.AcquireOptions{TTL: 24 * time.Hour}); err != nil {
				t.Fatal(err)
			}
			st := store.StatusCompleted
			if err := recs.Update(ctx, key, store.Update{Status: &st, Payload: &p}); err != nil {
				t.Fatal(err)
			}
			rk := "idempotency:" + key
			add("rec-"+strconv.Itoa(size), "record, completed, "+strconv.Itoa(size)+" B result", usage(rk), rk)
			if _, _, err := gj.Acquire(ctx, key, 24*time.Hour); err != nil {
				t.Fatal(err)
			}
			if err := gj.Update(ctx, key, idempotency.Update{Status: &done, Payload: &p}); err != nil {
				t.Fatal(err)
			}
			// go-job would write "idempotency:<key>", redisonce's own key: its
			// client here writes under "idempotency:gojob:" instead.
			gk := "idempotency:gojob:" + key
			add("gojob-"+strconv.Itoa(size), "  go-job JSON-string record, same result", usage(gk), gk)
		}
		return rows
	}
	defaults := measure(t, "--hash-max-listpack-entries", "128", "--hash-max-listpack-value", "64")
	raised := measure(t, "--hash-max-listpack-entries", "128", "--hash-max-listpack-value", "512")
	entries := measure(t, "--hash-max-listpack-entries", "1024", "--hash-max-listpack-value", "64")

	order := []string{"claim", "inflight", "setnx", "ob-small", "ob-small-stream", "ob-wide", "ob-wide-stream",
		"ob-large", "ob-large-stream", "rec-48", "gojob-48", "rec-256", "gojob-256"}
	var b strings.Builder
	fmt.Fprintf(&b, "\n| item | bytes (encoding), Redis defaults (entries 128, value 64) | hash-max-listpack-value 512 | hash-max-listpack-entries 1024 |\n|---|---:|---:|---:|\n")
	for _, k := range order {
		d, r, e := defaults[k], raised[k], entries[k]
		fmt.Fprintf(&b, "| %s | %.0f (%s) | %.0f (%s) | %.0f (%s) |\n", d.what, d.bytes, d.enc, r.bytes, r.enc, e.bytes, e.enc)
	}
	t.Log(b.String())

	if defaults["claim"].bytes != defaults["setnx"].bytes {
		t.Errorf("a processed claim takes %.0f bytes, a plain SET NX key of the same length %.0f: want the same layout",
			defaults["claim"].bytes, defaults["setnx"].bytes)
	}
	for k, want := range map[string]string{"ob-small": "listpack", "ob-wide": "hashtable", "ob-large": "hashtable", "rec-48": "raw", "rec-256": "raw"} {
		if got := defaults[k].enc; got != want {
			t.Errorf("%s with the default thresholds: encoding %s, want %s", k, got, want)
		}
	}
	// The goal: a completed record takes no more memory than go-job's
	// JSON string of the same result.
	for _, size := range []string{"48", "256"} {
		if r, g := defaults["rec-"+size], defaults["gojob-"+size]; r.bytes > g.bytes {
			t.Errorf("a completed record with a %s B result takes %.0f bytes, go-job's JSON string %.0f: want at most as many", size, r.bytes, g.bytes)
		}
	}
	if raised["ob-wide"].enc != "listpack" || raised["ob-wide"].bytes >= defaults["ob-wide"].bytes {
		t.Errorf("hash-max-listpack-value 512: a 256 B tail is %s, %.0f bytes per message (defaults: %.0f); want listpack and smaller",
			raised["ob-wide"].enc, raised["ob-wide"].bytes, defaults["ob-wide"].bytes)
	}
	if entries["ob-large"].enc != "listpack" || entries["ob-large"].bytes >= defaults["ob-large"].bytes {
		t.Errorf("hash-max-listpack-entries 1024: a 1000-message tail is %s, %.0f bytes per message (defaults: %.0f); want listpack and smaller",
			entries["ob-large"].enc, entries["ob-large"].bytes, defaults["ob-large"].bytes)
	}
}

// gojobRueidis is go-job's redis.Client over rueidis, writing under
// "idempotency:gojob:" so that its JSON strings and redisonce's records
// (default prefix "idempotency:") do not share keys.
type gojobRueidis struct{ c rueidis.Client }

func (g gojobRueidis) k(key string) string {
	return "idempotency:gojob:" + strings.TrimPrefix(key, "idempotency:")
}

func (g gojobRueidis) Get(ctx context.Context, key string) (string, error) {
	v, err := g.c.Do(ctx, g.c.B().Get().Key(g.k(key)).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return "", nil
	}
	return v, err
}

func (g gojobRueidis) Set(ctx context.Context, key, value string, ttl time.Duration) error {
	return g.c.Do(ctx, g.c.B().Set().Key(g.k(key)).Value(value).PxMilliseconds(max(ttl.Milliseconds(), 1)).Build()).Error()
}

func (g gojobRueidis) SetNX(ctx context.Context, key, value string, ttl time.Duration) (bool, error) {
	err := g.c.Do(ctx, g.c.B().Set().Key(g.k(key)).Value(value).Nx().PxMilliseconds(max(ttl.Milliseconds(), 1)).Build()).Error()
	if rueidis.IsRedisNil(err) {
		return false, nil
	}
	return err == nil, err
}

func (g gojobRueidis) Del(ctx context.Context, key string) error {
	return g.c.Do(ctx, g.c.B().Del().Key(g.k(key)).Build()).Error()
}
