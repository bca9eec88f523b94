package scripts_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
)

// benchPayload is a typical small gateway frame.
var benchPayload = make([]byte, 128)

// benchConns returns n connection ids, built before the timer starts.
func benchConns(n int) []string {
	conns := make([]string, n)
	for i := range conns {
		conns[i] = "conn-" + strconv.Itoa(i)
	}
	return conns
}

// benchFill appends n messages spread over conns (message i on conns[i/per %
// len(conns)]) with AppendWithID and ids from benchIDs, in batches that run
// concurrently, and returns the ids.
func benchFill(b *testing.B, ob *store.Outbox, conns []string, per, n int) []string {
	b.Helper()
	ids := benchIDs(n)
	ctx := context.Background()
	benchSetup(b, n, func(i int) error {
		_, err := ob.AppendWithID(ctx, conns[(i/per)%len(conns)], ids[i], benchPayload)
		return err
	})
	return ids
}

// BenchmarkAppend appends 128-byte payloads (Append mints the id) over 1024
// connections, TTL 1h.
func BenchmarkAppend(b *testing.B) {
	benchEach(b, func(b *testing.B, g int) {
		ob := must.Store(store.NewOutbox(benchClient(b), store.WithPrefix(benchPrefix(b)), store.WithTTL(time.Hour)))
		conns := benchConns(1024)
		ctx := context.Background()
		benchParallel(b, g, func(i int) error {
			_, _, err := ob.Append(ctx, conns[i%len(conns)], benchPayload)
			return err
		})
	})
}

// BenchmarkAppendWithID appends under caller-given ids.
func BenchmarkAppendWithID(b *testing.B) {
	benchEach(b, func(b *testing.B, g int) {
		ob := must.Store(store.NewOutbox(benchClient(b), store.WithPrefix(benchPrefix(b)), store.WithTTL(time.Hour)))
		conns := benchConns(1024)
		ids := benchIDs(b.N)
		ctx := context.Background()
		benchParallel(b, g, func(i int) error {
			_, err := ob.AppendWithID(ctx, conns[i%len(conns)], ids[i], benchPayload)
			return err
		})
	})
}

// BenchmarkAck acks one message per op (generation equal to the floor, so only
// the HDEL writes).
func BenchmarkAck(b *testing.B) {
	benchEach(b, func(b *testing.B, g int) {
		ob := must.Store(store.NewOutbox(benchClient(b), store.WithPrefix(benchPrefix(b))))
		conns := benchConns(256)
		ids := benchFill(b, ob, conns, 100, b.N)
		ctx := context.Background()
		benchParallel(b, g, func(i int) error {
			return ob.Ack(ctx, conns[(i/100)%len(conns)], ids[i], 0)
		})
	})
}

// BenchmarkAckMany acks 100 messages of one connection per op.
func BenchmarkAckMany(b *testing.B) {
	benchEach(b, func(b *testing.B, g int) {
		ob := must.Store(store.NewOutbox(benchClient(b), store.WithPrefix(benchPrefix(b))))
		conns := benchConns(256)
		ids := benchFill(b, ob, conns, 100, b.N*100)
		ctx := context.Background()
		benchParallel(b, g, func(i int) error {
			n, err := ob.AckMany(ctx, conns[i%len(conns)], ids[i*100:i*100+100], 0)
			if err == nil && n != 100 {
				err = fmt.Errorf("acked %d of 100", n)
			}
			return err
		})
	})
}

// BenchmarkUnacked reads (and sorts) tails of 10, 1000 and 10000 messages of
// 128 bytes.
func BenchmarkUnacked(b *testing.B) {
	for _, n := range []int{10, 1000, 10000} {
		b.Run("tail="+strconv.Itoa(n), func(b *testing.B) {
			benchEach(b, func(b *testing.B, g int) {
				ob := must.Store(store.NewOutbox(benchClient(b), store.WithPrefix(benchPrefix(b))))
				benchFill(b, ob, []string{"conn"}, n, n)
				ctx := context.Background()
				benchParallel(b, g, func(int) error {
					msgs, err := ob.Unacked(ctx, "conn")
					if err == nil && len(msgs) != n {
						err = fmt.Errorf("Unacked returned %d messages, want %d", len(msgs), n)
					}
					return err
				})
			})
		})
	}
}

// BenchmarkAdvanceGeneration raises the floor of one of 256 connections per op.
func BenchmarkAdvanceGeneration(b *testing.B) {
	benchEach(b, func(b *testing.B, g int) {
		ob := must.Store(store.NewOutbox(benchClient(b), store.WithPrefix(benchPrefix(b)), store.WithTTL(time.Hour)))
		conns := benchConns(256)
		benchFill(b, ob, conns, 1, len(conns))
		ctx := context.Background()
		benchParallel(b, g, func(i int) error {
			return ob.AdvanceGeneration(ctx, conns[i%len(conns)], uint64(i+1))
		})
	})
}

// BenchmarkDropConn drops a connection of one message per op.
func BenchmarkDropConn(b *testing.B) {
	benchEach(b, func(b *testing.B, g int) {
		ob := must.Store(store.NewOutbox(benchClient(b), store.WithPrefix(benchPrefix(b))))
		conns := benchConns(b.N)
		benchFill(b, ob, conns, 1, b.N)
		ctx := context.Background()
		benchParallel(b, g, func(i int) error { return ob.DropConn(ctx, conns[i]) })
	})
}

// BenchmarkAppendMany appends bursts of 100 messages (ids from a pool, the
// benchmark's payload) to one of 1024 connections.
func BenchmarkAppendMany(b *testing.B) {
	benchEach(b, func(b *testing.B, g int) {
		ob := must.Store(store.NewOutbox(benchClient(b), store.WithPrefix(benchPrefix(b)), store.WithTTL(time.Hour)))
		ctx := context.Background()
		conns := benchConns(1024)
		ids := benchIDs(b.N * 100)
		msgs := make([]store.Outgoing, len(ids))
		for i, id := range ids {
			msgs[i] = store.Outgoing{ID: id, Payload: benchPayload}
		}
		benchParallel(b, g, func(i int) error {
			out, err := ob.AppendMany(ctx, conns[i%len(conns)], msgs[i*100:i*100+100])
			if err == nil && !out[99].Created {
				err = errBenchUnexpected
			}
			return err
		})
	})
}
