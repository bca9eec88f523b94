package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/redisonce/redisonce/integrations/postgres"
	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
	"github.com/redisonce/redisonce/streams"
)

// TestWithTxUnderStreams: the Streams runner, with a WithTx handler,
// applies each payment once in Postgres: payments XADDed
// twice, and every payment XADDed again after FLUSHALL of the claims (the
// stream itself re-created), run once.
func TestWithTxUnderStreams(t *testing.T) {
	e := newInboxEnv(t)
	rc := newRedis(t, e.rurl)
	credit := func(ctx context.Context, tx pgx.Tx, m streams.Message) error {
		amount, err := strconv.Atoi(m.Values["amount"])
		if err != nil {
			return store.Permanent(err)
		}
		return pay(m.ClaimID, amount)(ctx, tx)
	}
	const n = 30
	var last string // the last entry's id
	consumed := func() bool {
		pending, err := rc.Do(e.ctx, rc.B().Xpending().Key("payments").Group("ledger").Build()).ToArray()
		if err != nil || len(pending) == 0 {
			return false
		}
		if p, _ := pending[0].AsInt64(); p != 0 {
			return false
		}
		groups, err := rc.Do(e.ctx, rc.B().XinfoGroups().Key("payments").Build()).ToArray()
		if err != nil || len(groups) != 1 {
			return false
		}
		g, _ := groups[0].AsMap()
		v := g["last-delivered-id"]
		id, _ := v.ToString()
		return id == last
	}
	publish := func() {
		for i := range n {
			for range 1 + i%2 { // odd payments published twice
				id, err := rc.Do(e.ctx, rc.B().Xadd().Key("payments").Id("*").FieldValue().
					FieldValue("payment_id", fmt.Sprintf("pay-%d", i)).FieldValue("amount", strconv.Itoa(i)).Build()).ToString()
				if err != nil {
					t.Fatal(err)
				}
				last = id
			}
		}
	}
	run := func(round int) {
		ctx, cancel := context.WithCancel(e.ctx)
		defer cancel()
		c, err := streams.New(rc, must.Store(store.NewClaims(rc, store.WithPrefix("runner:"))), "payments", "ledger", fmt.Sprintf("w%d", round),
			postgres.WithTx(e.inbox, credit),
			streams.WithIDField("payment_id"), streams.WithLease(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- c.Run(ctx) }()
		// Until every entry of the stream is delivered and acknowledged.
		for deadline := time.Now().Add(60 * time.Second); !consumed(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the stream is not consumed after 60 s", round)
			}
		}
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
	}
	publish()
	run(1)
	if err := rc.Do(e.ctx, rc.B().Flushall().Build()).Error(); err != nil {
		t.Fatal(err)
	}
	publish()
	run(2)
	got := e.ledger(t)
	want := 0
	for i := range n {
		want += i
		if got[fmt.Sprintf("pay-%d", i)] != 1 {
			t.Fatalf("pay-%d in the ledger %d times (ledger %v)", i, got[fmt.Sprintf("pay-%d", i)], got)
		}
	}
	if sum := e.count(t, `SELECT sum(amount) FROM ledger`); sum != want {
		t.Fatalf("ledger sum %d, want %d", sum, want)
	}
	st := e.inbox.Stats()
	t.Logf("inbox stats: %+v", st)
	// Round 1: n committed, the copies answered by Redis (the runner's
	// claims). Round 2, Redis flushed: each payment's first copy found its
	// row processed, its second copy answered by Redis again.
	if st.Committed != n || st.AlreadyProcessed != n {
		t.Fatalf("stats %+v: want %d committed, and the second round's %d found processed in Postgres", st, n, n)
	}
}

// TestApplyOutsideAClaim: without a claim in the context, Apply and WithTx
// refuse, permanently, before any statement.
func TestApplyOutsideAClaim(t *testing.T) {
	e := newInboxEnv(t)
	called := false
	h := postgres.WithTx(e.inbox, func(context.Context, pgx.Tx, string) error { called = true; return nil })
	before := e.stmts.Load()
	err := h(context.Background(), "m")
	if !errors.Is(err, store.ErrInvalidArgument) || !store.IsPermanent(err) || called {
		t.Fatalf("WithTx outside a claim: %v (permanent %v, h called: %v)", err, store.IsPermanent(err), called)
	}
	if err := postgres.WithTx[string](nil, nil)(e.ctx, "m"); !errors.Is(err, store.ErrInvalidArgument) {
		t.Fatalf("WithTx(nil, nil): %v", err)
	}
	// A claim whose id the text key cannot hold.
	_, err = must.Store(store.NewMemoryClaims()).Do(e.ctx, "a\xffb", time.Second, func(ctx context.Context) error {
		return e.inbox.Apply(ctx, pay("a\xffb", 1))
	})
	if !errors.Is(err, store.ErrInvalidArgument) || !store.IsPermanent(err) {
		t.Fatalf("Apply with a non-UTF-8 id: %v", err)
	}
	if d := e.stmts.Load() - before; d != 0 {
		t.Fatalf("refused calls sent %d statements", d)
	}
}
