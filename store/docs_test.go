package store_test

// The code of the Go snippets in README.md and docs/*.md: each block there is
// a region (// snippet:NAME ... // snippet:end) of a function below, and
// TestDocSnippets (root module) fails when a block and its region differ. The
// functions are compiled by every `go test` of this package, not run: they
// need a Redis at localhost:6379 and a broker's message. The runnable
// Examples, on the memory twins, are in example_*_test.go.

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/store"
)

// message is a broker's delivery, as the snippets use it.
type message struct {
	ID   string
	Body []byte
}

func (message) Ack()                        {}
func (message) Nack()                       {}
func (message) NackWithDelay(time.Duration) {}

func chargeCard(context.Context, message) error { return nil }

// docConsumer is the README's quick start for a message consumer.
func docConsumer(ctx context.Context, msg message) error {
	// snippet:consumer
	claims, err := store.OpenClaims("redis://localhost:6379", store.WithTTL(7*24*time.Hour))
	if err != nil {
		return err
	}
	defer claims.Close()

	// In the consumer: run the effect once per message id, across every consumer.
	ran, err := claims.Do(ctx, msg.ID, 10*time.Second, func(ctx context.Context) error {
		return chargeCard(ctx, msg)
	})
	switch {
	case errors.Is(err, store.ErrInFlight): // another consumer holds it: redeliver when its lease can have ended
		d, _ := store.RetryAfter(err) // the time left on the holder's lease
		msg.NackWithDelay(d)
	case err != nil: // the effect failed; the claim was released, so a redelivery retries
		msg.Nack()
	default: // ran == true: done now; ran == false: a duplicate of a done message
		msg.Ack()
	}
	// snippet:end
	_ = ran
	return nil
}

// docGateway is the README's quick start for a gateway.
func docGateway(ctx context.Context, payload []byte) error {
	// snippet:gateway
	ob, err := store.OpenOutbox("redis://localhost:6379", store.WithTTL(time.Hour), store.WithMaxUnacked(1000))
	if err != nil {
		return err
	}
	defer ob.Close()

	// Node A owns conn-42 at generation 1: it sends, the client acks.
	id, _, err := ob.Append(ctx, "conn-42", payload) // the message's id and its server-side seq
	if err != nil {
		return err
	}
	err = ob.Ack(ctx, "conn-42", id, 1)

	// The client reconnects to node B, generation 2: fence A out, replay the tail in order.
	err = ob.AdvanceGeneration(ctx, "conn-42", 2)
	msgs, err := ob.Unacked(ctx, "conn-42") // ascending Seq: send these again
	// snippet:end
	_ = msgs
	return err
}

// docOutbox is docs/stores.md's Outbox tour.
func docOutbox(ctx context.Context, payload []byte) error {
	// snippet:outbox
	ob, err := store.OpenOutbox("redis://localhost:6379", store.WithTTL(time.Hour), store.WithMaxUnacked(1000))
	// node A, generation 1
	id, seq, err := ob.Append(ctx, "conn-42", payload)          // id: 32 hex chars; seq from the server
	a, err := ob.AppendWithID(ctx, "conn-42", "msg-7", payload) // idempotent: a retry returns the same Seq, Created=false
	err = ob.Ack(ctx, "conn-42", id, 1)
	// the client reconnects to node B, generation 2
	err = ob.AdvanceGeneration(ctx, "conn-42", 2)                             // fence A out
	msgs, err := ob.Unacked(ctx, "conn-42")                                   // ascending Seq: replay these
	n, err := ob.AckMany(ctx, "conn-42", []string{msgs[0].ID, msgs[1].ID}, 2) // (int, error): how many were removed; one script call
	err = ob.Ack(ctx, "conn-42", msgs[2].ID, 1)                               // A, late: errors.Is(err, store.ErrStaleOwner)
	tail, err := ob.Tail(ctx, "conn-42")                                      // Tail{Epoch, Generation, Messages}
	err = ob.DropConn(ctx, "conn-42")                                         // connection closed for good
	// snippet:end
	_, _, _, _ = seq, a, n, tail
	return err
}

// docSentinel is docs/failover.md's Sentinel URL.
func docSentinel() error {
	// snippet:sentinel
	claims, err := store.OpenClaims(
		"redis://:secret@sentinel-1:26379?addr=sentinel-2:26379&addr=sentinel-3:26379&master_set=mymaster",
		store.WithWaitReplicas(1, 500*time.Millisecond))
	// snippet:end
	if err == nil {
		claims.Close()
	}
	return err
}

// docSlog is docs/operating.md's observer.
func docSlog(client rueidis.Client) error {
	// snippet:slog
	obs := store.SlogObserver(slog.Default()) // Debug for routine outcomes, Warn for the ones worth a look, Error for errors
	claims, err := store.NewClaims(client, store.WithObserver(obs))
	// snippet:end
	_ = claims
	return err
}
