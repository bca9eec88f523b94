package store_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redisonce/redisonce/store"
)

// A search index rebuilt per product: every change of a product triggers
// its rebuild, a rebuild takes a while, and changes keep coming. Coalescing
// runs one rebuild at a time per product, never loses a change that arrives
// during a rebuild, and folds a burst of changes into one more rebuild with
// the latest. With Redis (several processes), make it with
// store.NewCoalescer(client, rebuild, o); the memory twin here behaves the
// same in one process.
func ExampleCoalescer() {
	ctx := context.Background()
	var mu sync.Mutex
	rebuilding := make(chan struct{})
	rebuild := func(ctx context.Context, product string, change []byte) error {
		mu.Lock()
		fmt.Printf("rebuild %s from %s\n", product, change)
		mu.Unlock()
		if string(change) == "v1" {
			close(rebuilding)
			time.Sleep(50 * time.Millisecond) // changes v2..v4 arrive meanwhile
		}
		return nil
	}
	co, err := store.NewMemoryCoalescer(rebuild, store.CoalesceOptions{Lease: 10 * time.Second})
	if err != nil {
		panic(err)
	}
	defer co.Close()

	first := make(chan bool)
	go func() {
		ran, _ := co.Trigger(ctx, "sku-42", []byte("v1"))
		first <- ran
	}()
	<-rebuilding
	for _, v := range []string{"v2", "v3", "v4"} {
		ran, _ := co.Trigger(ctx, "sku-42", []byte(v))
		mu.Lock()
		fmt.Println(v, "kept for the next rebuild:", !ran)
		mu.Unlock()
	}
	ran := <-first
	time.Sleep(100 * time.Millisecond) // the next rebuild runs in the background
	fmt.Println("v1 ran:", ran)
	// Output:
	// rebuild sku-42 from v1
	// v2 kept for the next rebuild: true
	// v3 kept for the next rebuild: true
	// v4 kept for the next rebuild: true
	// rebuild sku-42 from v4
	// v1 ran: true
}
