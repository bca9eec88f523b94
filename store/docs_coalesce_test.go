package store_test

import (
	"context"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/store"
)

func rebuildSearchIndex(context.Context, string, []byte) error { return nil }

// docCoalesce is the README's quick start for coalescing.
func docCoalesce(ctx context.Context, msg message) error {
	// snippet:coalesce
	client, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"localhost:6379"}, DisableCache: true})
	if err != nil {
		return err
	}
	defer client.Close()
	index, err := store.NewCoalescer(client, rebuildSearchIndex, store.CoalesceOptions{
		Lease:    10 * time.Second,
		Debounce: 200 * time.Millisecond, // wait for a quiet 200 ms; at most 2 s (MaxWait's default)
	})
	if err != nil {
		return err
	}
	defer index.Close()

	// In the consumer: every change of product 42 triggers its rebuild.
	ran, err := index.Trigger(ctx, "product-42", msg.Body)
	if err != nil && !ran { // not kept (a network error): redeliver
		msg.Nack()
	} else { // ran: rebuilt now (a failure is retried by the Coalescer); kept: a later rebuild covers it
		msg.Ack()
	}
	// snippet:end
	return nil
}
