package store_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/redisonce/redisonce/store"
)

// A gateway connection that moves from one node to another. Node A owns the
// connection at generation 1 and sends three messages; the client acknowledges
// the first, then reconnects to node B, which takes the connection over at
// generation 2 and replays the rest in order. A's late ack is refused.
//
// With Redis, every node makes the store with
// store.OpenOutbox("redis://localhost:6379", store.WithTTL(time.Hour)); the
// memory twin here behaves the same.
func ExampleOutbox() {
	ctx := context.Background()
	outbox, err := store.NewMemoryOutbox(store.WithTTL(time.Hour))
	if err != nil {
		log.Fatal(err)
	}
	defer outbox.Close()

	// Node A, generation 1: send and remember.
	for _, text := range []string{"hello", "how are you?", "bye"} {
		id, seq, err := outbox.Append(ctx, "conn-42", []byte(text))
		if err != nil {
			panic(err)
		}
		_ = id // send {id, seq, text} to the client
		fmt.Printf("A sent #%d %s\n", seq, text)
	}
	tail, _ := outbox.Unacked(ctx, "conn-42")
	if err := outbox.Ack(ctx, "conn-42", tail[0].ID, 1); err != nil {
		panic(err)
	}

	// The client reconnects to node B, which fences A out, then replays.
	if err := outbox.AdvanceGeneration(ctx, "conn-42", 2); err != nil {
		panic(err)
	}
	replay, _ := outbox.Unacked(ctx, "conn-42")
	for _, m := range replay {
		fmt.Printf("B replays #%d %s\n", m.Seq, m.Payload)
	}
	if err := outbox.Ack(ctx, "conn-42", replay[0].ID, 2); err != nil {
		panic(err)
	}

	// A's ack arrives late, with the old generation: refused, nothing changed.
	err = outbox.Ack(ctx, "conn-42", replay[1].ID, 1)
	fmt.Println("A's late ack is stale:", errors.Is(err, store.ErrStaleOwner))
	left, _ := outbox.Unacked(ctx, "conn-42")
	fmt.Println("still unacked:", len(left))
	// Output:
	// A sent #1 hello
	// A sent #2 how are you?
	// A sent #3 bye
	// B replays #2 how are you?
	// B replays #3 bye
	// A's late ack is stale: true
	// still unacked: 1
}

// A retry after a timeout must not send a message twice: give the message an
// id of your own, and AppendWithID returns the first call's seq. Clients dedupe
// on (Epoch, Seq): Epoch changes whenever the connection's outbox is created
// anew (after DropConn or TTL expiry), when Seq starts again at 1.
func ExampleOutbox_AppendWithID() {
	ctx := context.Background()
	outbox, err := store.NewMemoryOutbox(store.WithMaxUnacked(100))
	if err != nil {
		log.Fatal(err)
	}

	first, _ := outbox.AppendWithID(ctx, "conn-7", "msg-1", []byte("hi"))
	retry, _ := outbox.AppendWithID(ctx, "conn-7", "msg-1", []byte("hi"))
	fmt.Println(first.Seq, first.Created, retry.Seq, retry.Created, first.Epoch == retry.Epoch)

	_ = outbox.DropConn(ctx, "conn-7")
	again, _ := outbox.AppendWithID(ctx, "conn-7", "msg-1", []byte("hi"))
	fmt.Println(again.Seq, again.Created, again.Epoch != first.Epoch)
	// Output:
	// 1 true 1 false true
	// 1 true true
}
