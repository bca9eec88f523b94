package scripts_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/redisonce/redisonce/store"
)

// Benchmarks of the Outbox against the harness's standalone redis-server, one
// call at a time (so ns/op is a round trip plus the script). Run them with
// `make bench` or:
//
//	cd scripts_test && go test -run '^$' -bench Outbox -benchmem .

// outboxBenchPayload is a typical small gateway frame.
var outboxBenchPayload = make([]byte, 128)

// outboxBench returns an Outbox on a fresh prefix of the shared server.
func outboxBench(b *testing.B) *store.Outbox {
	b.Helper()
	c := newClientTB(b, benchURL(b))
	return store.NewOutbox(c, store.WithPrefix(fmt.Sprintf("outbox-bench:%s:%d:", b.Name(), outboxPrefixes.Add(1))))
}

// outboxBenchFill appends n messages to conn and returns their ids.
func outboxBenchFill(b *testing.B, ob *store.Outbox, conn string, n int) []string {
	b.Helper()
	ctx := context.Background()
	ids := make([]string, n)
	for i := range ids {
		id, _, err := ob.Append(ctx, conn, outboxBenchPayload)
		if err != nil {
			b.Fatal(err)
		}
		ids[i] = id
	}
	return ids
}

// BenchmarkOutboxAppend appends 128-byte payloads; every 1000 appends go to a
// new connection, so the tail stays the size of a busy connection's.
func BenchmarkOutboxAppend(b *testing.B) {
	ob := outboxBench(b)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if _, _, err := ob.Append(ctx, fmt.Sprintf("conn-%d", i/1000), outboxBenchPayload); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOutboxAck acks messages one by one (the floor is equal, so nothing
// but the HDEL is written).
func BenchmarkOutboxAck(b *testing.B) {
	ob := outboxBench(b)
	ctx := context.Background()
	ids := outboxBenchFill(b, ob, "conn", b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if err := ob.Ack(ctx, "conn", ids[i], 1); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOutboxUnacked reads (and sorts) tails of 10, 1000 and 10000
// messages of 128 bytes.
func BenchmarkOutboxUnacked(b *testing.B) {
	for _, n := range []int{10, 1000, 10000} {
		b.Run(fmt.Sprintf("tail=%d", n), func(b *testing.B) {
			ob := outboxBench(b)
			ctx := context.Background()
			outboxBenchFill(b, ob, "conn", n)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				msgs, err := ob.Unacked(ctx, "conn")
				if err != nil {
					b.Fatal(err)
				}
				if len(msgs) != n {
					b.Fatalf("Unacked returned %d messages, want %d", len(msgs), n)
				}
			}
		})
	}
}
