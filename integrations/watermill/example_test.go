package watermill_test

import (
	"context"
	"fmt"
	"log"
	"time"

	wm "github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	wmonce "github.com/redisonce/redisonce/integrations/watermill"
	"github.com/redisonce/redisonce/store"
)

// A router whose handler charges each order once, though the order is
// delivered twice. In production the claims are store.OpenClaims on Redis,
// shared by every instance; here a MemoryClaims.
func ExampleMiddleware() {
	claims, err := store.NewMemoryClaims(store.WithTTL(7 * 24 * time.Hour))
	if err != nil {
		log.Fatal(err)
	}
	pubsub := gochannel.NewGoChannel(gochannel.Config{}, wm.NopLogger{})

	router, err := message.NewRouter(message.RouterConfig{}, wm.NopLogger{})
	if err != nil {
		panic(err)
	}
	router.AddMiddleware(wmonce.Middleware(claims, wmonce.WithLease(10*time.Second)))

	charged := make(chan string, 2)
	router.AddConsumerHandler("charge", "orders", pubsub, func(msg *message.Message) error {
		charged <- string(msg.Payload) // the effect: once per message UUID
		return nil
	})
	go func() { _ = router.Run(context.Background()) }()
	<-router.Running()

	publish := func() {
		if err := pubsub.Publish("orders", message.NewMessage("order-17", []byte("charge order 17"))); err != nil {
			panic(err)
		}
	}
	publish()
	fmt.Println(<-charged)
	publish() // a redelivery: the same UUID again
	select {
	case c := <-charged:
		fmt.Println("charged twice:", c)
	case <-time.After(200 * time.Millisecond):
		fmt.Println("charged once")
	}
	_ = router.Close()
	// Output:
	// charge order 17
	// charged once
}

// watermill's own Deduplicator, with its keys in Redis (here a
// MemoryClaims) for one minute, shared by every instance of the service.
func ExampleNewExpiringKeyRepository() {
	claims, err := store.NewMemoryClaims(store.WithTTL(time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	dedup := &middleware.Deduplicator{
		KeyFactory: middleware.NewMessageHasherSHA256(1024),
		Repository: wmonce.NewExpiringKeyRepository(claims),
	}
	h := dedup.Middleware(func(msg *message.Message) ([]*message.Message, error) {
		fmt.Println("handled", msg.UUID)
		return nil, nil
	})
	for _, uuid := range []string{"a", "b"} { // one payload, two messages
		if _, err := h(message.NewMessage(uuid, []byte("same payload"))); err != nil {
			panic(err)
		}
	}
	// Output:
	// handled a
}

// The middleware inside watermill's Retry: a handler that fails is retried
// with a backoff (the id released between tries), and its effect happens
// once.
func ExampleMiddleware_retry() {
	claims, err := store.NewMemoryClaims(store.WithTTL(7 * 24 * time.Hour))
	if err != nil {
		log.Fatal(err)
	}
	retry := middleware.Retry{MaxRetries: 5, InitialInterval: time.Millisecond, Multiplier: 2}
	tries := 0
	h := retry.Middleware(wmonce.Middleware(claims)(func(msg *message.Message) ([]*message.Message, error) {
		tries++
		if tries < 3 {
			return nil, fmt.Errorf("try %d: the payment service is down", tries)
		}
		fmt.Println("charged", msg.UUID, "on try", tries)
		return nil, nil
	}))
	if _, err := h(message.NewMessage("order-18", nil)); err != nil {
		fmt.Println(err)
	}
	if _, err := h(message.NewMessage("order-18", nil)); err != nil { // a redelivery
		fmt.Println(err)
	}
	// Output:
	// charged order-18 on try 3
}
