package streams_test

import (
	"context"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/internal/redact"
	"github.com/redisonce/redisonce/store"
	"github.com/redisonce/redisonce/streams"
)

// The streams runner takes a client, not a URL, and
// nothing it returns or reports holds the client's password. The client's
// password (holding / # ? @ : %) stops working while the runner reads: its
// reconnections are refused (WRONGPASS), every read fails and is reported,
// and a new Run fails to create its group. No error text, in full or as an
// observer shows it, holds the password, raw or escaped.
func TestNoPasswordInStreamsOutput(t *testing.T) {
	srv, admin := newServer(t)
	ctx := context.Background()
	const pw = "s3cr/t#p?ss@x:y%z"
	if err := admin.Do(ctx, admin.B().AclSetuser().Username("edges2app").Rule("on", ">"+pw, "~*", "&*", "+@all").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	u := url.URL{Scheme: "redis", Host: strings.TrimPrefix(srv.URL(), "redis://"), User: url.UserPassword("edges2app", pw)}
	opt, err := store.ClientOptions(u.String())
	if err != nil {
		t.Fatal(redact.URL(err.Error()))
	}
	app, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(app.Close)

	var rec recorder
	h := func(context.Context, streams.Message) error { return nil }
	c, err := streams.New(app, must.Store(store.NewClaims(app, store.WithPrefix("pw:"))), "pw", "g", "c1", h,
		streams.WithObserver(&rec), streams.WithBlock(50*time.Millisecond), streams.WithLease(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	runConsumer(t, c)
	xadd(t, admin, "pw", "k", "v")
	waitFor(t, 10*time.Second, "the entry handled", func() bool {
		for _, e := range rec.all() {
			if e.Op == "handle" && e.Outcome == store.Outcome("acked") {
				return true
			}
		}
		return false
	})

	// The password stops working; every connection of the user is cut.
	if err := admin.Do(ctx, admin.B().AclSetuser().Username("edges2app").Rule("resetpass", ">another").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, admin.B().ClientKill().User("edges2app").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "a failed read reported", func() bool {
		for _, e := range rec.all() {
			if e.Op == "read" && e.Err != nil {
				return true
			}
		}
		return false
	})
	c2, err := streams.New(app, must.Store(store.NewClaims(app)), "pw2", "g", "c1", h)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	runErr := c2.Run(rctx)
	if runErr == nil {
		t.Fatal("Run with a refused password = nil, want the group creation's error")
	}

	forms := []string{pw, url.QueryEscape(pw), url.PathEscape(pw), strconv.Quote(pw), "s3cr", "p?ss"}
	texts := []string{runErr.Error()}
	for _, e := range rec.all() {
		if e.Err != nil {
			texts = append(texts, e.Err.Error(), e.ErrorText(true), e.ErrorText(false))
		}
	}
	for _, text := range texts {
		for _, f := range forms {
			if strings.Contains(text, f) {
				t.Errorf("%q holds the password (as %q)", text, f)
			}
		}
	}
	t.Logf("%d texts checked; Run: %v", len(texts), runErr)
}
