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
	index := store.NewCoalescer(client, rebuildSearchIndex, store.CoalesceOptions{
		Lease:    10 * time.Second,
		Debounce: 200 * time.Millisecond, // wait for a quiet 200 ms; at most 2 s (MaxWait's default)
	})
	defer index.Close()

	// In the consumer: every change of product 42 triggers its rebuild.
	tr, err := index.Trigger(ctx, "product-42", msg.Body)
	switch {
	case err != nil && !tr.Ran: // not kept (a network error): redeliver
		msg.Nack()
	default: // tr.Ran: rebuilt now (a failure is retried by the Coalescer); tr.Kept: a later rebuild covers it
		msg.Ack()
	}
	// snippet:end
	return nil
}
