package storetest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redisonce/redisonce/store"
)

// The key rule every observer follows (store.SlogObserver, the OpenTelemetry
// and Prometheus adapters, and yours): the key, and any error text that
// quotes it, appear in what it records only with the option that says so.
// Store errors quote the id (`redisonce: ack "c1": stale owner`):
// store.Event.ErrorText(false) is the text without it.

// SecretKey is in every id the operations below use.
const SecretKey = "S3CRET-k3y"

// FailingOps runs, on memory stores observed by obs, operations that end in
// every kind of failure, each on an id holding SecretKey: a cancelled
// context (error), an oversize id (invalid), a missing record (not_found), a
// stale owner, a fn error that quotes the key (released) and a permanent one
// (failed), a read on a cancelled context. It returns how many operations it
// ran (each reports at least one event).
func FailingOps(t *testing.T, obs store.Observer) int {
	t.Helper()
	ctx := context.Background()
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	claims, err := store.NewMemoryClaims(store.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	records, err := store.NewMemoryRecords(store.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	outbox, err := store.NewMemoryOutbox(store.WithObserver(obs))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	mustFail := func(what string, err error) {
		t.Helper()
		n++
		if err == nil {
			t.Fatalf("%s did not fail", what)
		}
	}
	_, err = claims.Claim(cancelled, SecretKey)
	mustFail("Claim on a cancelled context", err)
	_, err = claims.Claim(ctx, SecretKey+strings.Repeat("x", store.MaxIDLen))
	mustFail("Claim of an oversize id", err)
	_, err = claims.Do(ctx, SecretKey, time.Second, func(context.Context) error {
		return fmt.Errorf("charging %s failed", SecretKey) // an fn error that names the key
	})
	mustFail("Do whose fn fails", err)
	mustFail("Update of a missing record", records.Update(ctx, SecretKey+"-missing", store.Update{}))
	_, _, err = records.Do(ctx, SecretKey, store.AcquireOptions{}, func(context.Context) ([]byte, error) {
		return nil, store.Permanent(fmt.Errorf("refund %s refused", SecretKey))
	})
	mustFail("Records.Do with a permanent error", err)
	if err := outbox.AdvanceGeneration(ctx, SecretKey, 5); err != nil {
		t.Fatal(err)
	}
	n++
	mustFail("Ack by a stale owner", outbox.Ack(ctx, SecretKey, "m", 1))
	_, err = outbox.Unacked(cancelled, SecretKey)
	mustFail("Unacked on a cancelled context", err)
	return n
}

// TestObserverKeys checks an observer against the key rule: newObserver
// returns an observer (with its key option when withKey is true) and a
// function that returns everything it recorded as text (log lines, span
// names, attributes, statuses and events, metric labels...). FailingOps runs
// on it; without the option the text must not hold SecretKey, with it
// (keyOption: the observer has one) it must.
func TestObserverKeys(t *testing.T, keyOption bool, newObserver func(withKey bool) (obs store.Observer, recorded func() string)) {
	for _, withKey := range []bool{false, true} {
		if withKey && !keyOption {
			continue
		}
		obs, recorded := newObserver(withKey)
		n := FailingOps(t, obs)
		got := recorded()
		if strings.TrimSpace(got) == "" {
			t.Fatalf("the observer recorded nothing for %d failing operations", n)
		}
		if c := strings.Count(got, SecretKey); !withKey && c > 0 {
			t.Errorf("without the key option the observer recorded the key %d times:\n%s", c, got)
		} else if withKey && c == 0 {
			t.Errorf("with the key option the observer recorded no key:\n%s", got)
		}
	}
}
