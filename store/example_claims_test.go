package store_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/redisonce/redisonce/store"
)

// A consumer that receives every message at least once, and applies each
// message's effect once. With Redis, make the store with
// store.OpenClaims("redis://localhost:6379", store.WithTTL(24*time.Hour));
// the memory twin here behaves the same.
func ExampleClaims_Do() {
	ctx := context.Background()
	claims, err := store.NewMemoryClaims(store.WithTTL(24 * time.Hour))
	if err != nil {
		log.Fatal(err)
	}
	defer claims.Close()

	deliveries := []string{"order-1", "order-2", "order-1", "order-3", "order-2"}
	for _, id := range deliveries {
		ran, err := claims.Do(ctx, id, 30*time.Second, func(ctx context.Context) error {
			fmt.Println("charging", id)
			return nil
		})
		switch {
		case errors.Is(err, store.ErrInFlight):
			fmt.Println(id, "is being processed elsewhere: redeliver later")
		case err != nil:
			fmt.Println(id, "failed:", err)
		case !ran:
			fmt.Println(id, "is a duplicate: ack it")
		}
	}
	// Output:
	// charging order-1
	// charging order-2
	// order-1 is a duplicate: ack it
	// charging order-3
	// order-2 is a duplicate: ack it
}

func ExampleClaims_ClaimMany() {
	ctx := context.Background()
	claims, err := store.NewMemoryClaims()
	if err != nil {
		log.Fatal(err)
	}
	first, err := claims.ClaimMany(ctx, []string{"a", "b", "a"})
	fmt.Println(first, err)
	again, err := claims.ClaimMany(ctx, []string{"b", "c"})
	fmt.Println(again, err)
	// Output:
	// [true true false] <nil>
	// [false true] <nil>
}
