package watermill_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	wm "github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	wmonce "github.com/redisonce/redisonce/integrations/watermill"
	"github.com/redisonce/redisonce/store"
)

// watermill's TestDeduplicatorMiddleware (message/router/middleware,
// v1.5.1) with the repository on Redis: six messages with one payload and two
// with another run the handler twice.
func TestDeduplicatorMiddlewareOnRedis(t *testing.T) {
	count := 0
	d := &middleware.Deduplicator{
		KeyFactory: middleware.NewMessageHasherAdler32(1024),
		Repository: wmonce.NewExpiringKeyRepository(openClaims(t, store.WithTTL(time.Minute))),
		Timeout:    time.Second,
	}
	h := d.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		count++
		return nil, nil
	})
	for i := 0; i < 6; i++ {
		if _, err := h(message.NewMessage(fmt.Sprintf("first%d", i), []byte("1"))); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 2; i++ {
		if _, err := h(message.NewMessage(fmt.Sprintf("second%d", i), []byte("2"))); err != nil {
			t.Fatal(err)
		}
	}
	if count != 2 {
		t.Errorf("handler ran %d times, want 2", count)
	}
}

// watermill's TestDeduplicatorPublisherDecorator with the repository on
// Redis: of eight published messages with two payloads, two are delivered.
func TestDeduplicatorPublisherDecoratorOnRedis(t *testing.T) {
	ps := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 100, Persistent: true}, wm.NopLogger{})
	defer ps.Close()
	d := &middleware.Deduplicator{
		KeyFactory: middleware.NewMessageHasherSHA256(1024),
		Repository: wmonce.NewExpiringKeyRepository(openClaims(t, store.WithTTL(time.Minute))),
		Timeout:    time.Second,
	}
	pub, err := d.PublisherDecorator()(ps)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 6; i++ {
		if err := pub.Publish("dedupe", message.NewMessage(fmt.Sprintf("first%d", i), []byte("1"))); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 2; i++ {
		if err := pub.Publish("dedupe", message.NewMessage(fmt.Sprintf("second%d", i), []byte("2"))); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	got, err := ps.Subscribe(ctx, "dedupe")
	if err != nil {
		t.Fatal(err)
	}
	var uuids []string
	for m := range got {
		uuids = append(uuids, m.UUID)
		m.Ack()
	}
	slices.Sort(uuids) // GoChannel delivers in no set order
	if len(uuids) != 2 || uuids[0] != "first0" || uuids[1] != "second0" {
		t.Errorf("delivered %v, want [first0 second0]", uuids)
	}
}

// The point of a repository on Redis: two instances (two clients) share
// what they have seen.
func TestExpiringKeyRepositorySharedByInstances(t *testing.T) {
	a := wmonce.NewExpiringKeyRepository(openClaims(t, store.WithTTL(time.Minute)))
	b := wmonce.NewExpiringKeyRepository(openClaims(t, store.WithTTL(time.Minute)))
	ctx := context.Background()
	for i, step := range []struct {
		r    *wmonce.ExpiringKeyRepository
		want bool
	}{{a, false}, {b, true}, {a, true}} {
		dup, err := step.r.IsDuplicate(ctx, "k")
		if err != nil || dup != step.want {
			t.Errorf("step %d: IsDuplicate = %v, %v; want %v", i, dup, err, step.want)
		}
	}
}

// The window is the store's TTL: a key is a duplicate until its TTL has
// passed since it was first seen, and not after (Redis expires it).
func TestExpiringKeyRepositoryWindowIsTTL(t *testing.T) {
	const ttl = 1500 * time.Millisecond
	r := wmonce.NewExpiringKeyRepository(openClaims(t, store.WithTTL(ttl)))
	ctx := context.Background()
	first := time.Now()
	if dup, err := r.IsDuplicate(ctx, "w"); dup || err != nil {
		t.Fatalf("first IsDuplicate = %v, %v; want false", dup, err)
	}
	var lastDup time.Time
	for {
		now := time.Now()
		dup, err := r.IsDuplicate(ctx, "w")
		if err != nil {
			t.Fatal(err)
		}
		if !dup {
			if now.Sub(first) < ttl {
				t.Fatalf("not a duplicate %v after it was first seen, inside the %v window", now.Sub(first), ttl)
			}
			t.Logf("a duplicate until %v, new again at %v (ttl %v)", lastDup.Sub(first), now.Sub(first), ttl)
			return
		}
		lastDup = now
		if now.Sub(first) > ttl+10*time.Second {
			t.Fatalf("still a duplicate %v after it was first seen, with a %v TTL", now.Sub(first), ttl)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
