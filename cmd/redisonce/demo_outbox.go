package main

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/redisonce/redisonce/store"
)

// The outbox section: gateway nodes push messages to clients over long-lived
// connections and keep each connection's unacknowledged tail in Outbox. One
// gateway stops answering (a crash, a pause or a partition: the fleet cannot
// tell); the next owner of its connections raises their generation, replays
// their tails, and the clients drop what they already had by (epoch, seq).
// The old owner then comes back and flushes the acks it had buffered: they are
// stale and rejected.
const (
	outboxGateways = 3
	outboxConns    = 6
	outboxBefore   = 12 // messages per connection before the failure
	outboxAfter    = 8  // messages per connection after it
	outboxAckBatch = 5  // a gateway sends the acks it gets in batches
	outboxFailing  = 1  // index of the gateway that stops answering (g2)
	outboxHeir     = 2  // index of the gateway that takes its connections (g3)
)

// gatewayNode is one gateway process.
type gatewayNode struct {
	name string
	ob   *store.Outbox
	mu   sync.Mutex
	gen  map[string]uint64   // connection -> the generation it owns it at
	acks map[string][]string // connection -> acks received, not yet sent
}

// device is the client at the far end of one connection; it applies each
// message once, deduping on (epoch, seq), and acks everything it receives.
type device struct {
	mu         sync.Mutex
	seen       map[[2]uint64]bool
	received   int
	duplicates int
	applied    []uint64 // seqs applied, in order
}

func (c *device) receive(epoch, seq uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.received++
	k := [2]uint64{epoch, seq}
	if c.seen[k] {
		c.duplicates++
		return
	}
	c.seen[k] = true
	c.applied = append(c.applied, seq)
}

func demoOutbox(ctx context.Context, d *demo) (tally, error) {
	opts := []store.Option{store.WithPrefix(d.prefix + "outbox:"), store.WithTTL(10 * time.Minute)}
	gws := make([]*gatewayNode, outboxGateways)
	for i := range gws {
		proc, err := d.newProcess()
		if err != nil {
			return tally{}, err
		}
		defer proc.client.Close()
		gws[i] = &gatewayNode{name: fmt.Sprintf("g%d", i+1), ob: store.NewOutbox(proc.client, opts...),
			gen: map[string]uint64{}, acks: map[string][]string{}}
	}
	conns := make([]string, outboxConns)
	devices := map[string]*device{}
	appended := map[string]int{}
	var mu sync.Mutex // guards appended and the counters below
	replays, stale := 0, 0
	for i := range conns {
		conns[i] = fmt.Sprintf("conn-%d", i+1)
		devices[conns[i]] = &device{seen: map[[2]uint64]bool{}}
		gws[i%outboxGateways].gen[conns[i]] = 1
	}
	d.say("outbox", "%d gateways, %d client connections (2 per gateway), acks sent in batches of %d",
		outboxGateways, outboxConns, outboxAckBatch)

	// deliver hands a message to the connection's device and takes its ack.
	deliver := func(ctx context.Context, g *gatewayNode, conn, id string, epoch, seq uint64) error {
		devices[conn].receive(epoch, seq)
		g.mu.Lock()
		g.acks[conn] = append(g.acks[conn], id)
		full := len(g.acks[conn]) >= outboxAckBatch
		g.mu.Unlock()
		if full {
			return g.flush(ctx, conn)
		}
		return nil
	}
	// send appends a message to the connection's tail, then delivers it
	// unless the gateway dies between the two.
	send := func(ctx context.Context, g *gatewayNode, conn string, k int, dieBeforeDelivery bool) error {
		id := fmt.Sprintf("%s-m%02d", conn, k)
		a, err := g.ob.AppendWithID(ctx, conn, id, fmt.Appendf(nil, "event %d for %s", k, conn))
		if err != nil {
			return err
		}
		mu.Lock()
		if a.Created {
			appended[conn]++
		}
		mu.Unlock()
		if dieBeforeDelivery {
			return nil
		}
		return deliver(ctx, g, conn, id, a.Epoch, a.Seq)
	}
	// each runs fn for every gateway and its connections, concurrently.
	each := func(fn func(g *gatewayNode, conns []string) error) error {
		errs := make(chan error, len(gws))
		for _, g := range gws {
			g.mu.Lock()
			var owned []string
			for conn := range g.gen {
				owned = append(owned, conn)
			}
			g.mu.Unlock()
			sort.Strings(owned)
			go func() { errs <- fn(g, owned) }()
		}
		var all []error
		for range gws {
			all = append(all, <-errs)
		}
		return errors.Join(all...)
	}

	// Phase 1: traffic; the failing gateway stops after appending its last
	// message, before delivering it, with acks still in its buffer.
	failing, heir := gws[outboxFailing], gws[outboxHeir]
	err := each(func(g *gatewayNode, owned []string) error {
		for k := 1; k <= outboxBefore; k++ {
			for _, conn := range owned {
				dies := g == failing && k == outboxBefore
				if err := send(ctx, g, conn, k, dies); err != nil {
					return fmt.Errorf("%s: %w", g.name, err)
				}
			}
		}
		return nil
	})
	if err != nil {
		return tally{}, err
	}
	var lost []string
	for conn := range failing.gen {
		lost = append(lost, conn)
	}
	sort.Strings(lost)
	d.say("outbox", "%s stopped answering after %d messages per connection, holding %s (unflushed acks, one message appended but never delivered)",
		failing.name, outboxBefore, strings.Join(lost, ", "))

	// Phase 2: the heir takes the connections over: a higher generation
	// fences the old owner out, then the unacked tail is replayed in order.
	for _, conn := range lost {
		gen := failing.gen[conn] + 1
		if err := heir.ob.AdvanceGeneration(ctx, conn, gen); err != nil {
			return tally{}, err
		}
		tail, err := heir.ob.Tail(ctx, conn)
		if err != nil {
			return tally{}, err
		}
		heir.mu.Lock()
		heir.gen[conn] = gen
		heir.mu.Unlock()
		dupsBefore := devices[conn].duplicates
		for _, m := range tail.Messages {
			if err := deliver(ctx, heir, conn, m.ID, tail.Epoch, m.Seq); err != nil {
				return tally{}, err
			}
		}
		mu.Lock()
		replays += len(tail.Messages)
		mu.Unlock()
		d.say("outbox", "%s took %s over at generation %d and replayed its %d unacked messages: the client already had %d",
			heir.name, conn, gen, len(tail.Messages), devices[conn].duplicates-dupsBefore)
	}

	// Phase 3: the old owner comes back and flushes its buffered acks before
	// the heir has sent its own: they are refused and the tail is untouched.
	for _, conn := range lost {
		before, err := heir.ob.Tail(ctx, conn)
		if err != nil {
			return tally{}, err
		}
		n := len(failing.acks[conn])
		err = failing.flush(ctx, conn)
		if !errors.Is(err, store.ErrStaleOwner) {
			return tally{}, fmt.Errorf("%s's ack at generation %d on %s after the takeover: %v, want ErrStaleOwner",
				failing.name, failing.gen[conn], conn, err)
		}
		after, err := heir.ob.Tail(ctx, conn)
		if err != nil {
			return tally{}, err
		}
		if !reflect.DeepEqual(before, after) {
			return tally{}, fmt.Errorf("%s: a rejected ack changed the tail: %+v, then %+v", conn, before, after)
		}
		stale++
		d.say("outbox", "%s came back and acked %s on %s at generation %d: rejected (stale owner), the tail of %d is untouched",
			failing.name, plural(n, "message", "messages"), conn, failing.gen[conn], len(after.Messages))
		delete(failing.gen, conn)
		delete(failing.acks, conn)
		if err := heir.flush(ctx, conn); err != nil {
			return tally{}, err
		}
	}

	// Phase 4: more traffic on every connection, then every ack is sent.
	err = each(func(g *gatewayNode, owned []string) error {
		for k := outboxBefore + 1; k <= outboxBefore+outboxAfter; k++ {
			for _, conn := range owned {
				if err := send(ctx, g, conn, k, false); err != nil {
					return fmt.Errorf("%s: %w", g.name, err)
				}
			}
		}
		for _, conn := range owned {
			if err := g.flush(ctx, conn); err != nil {
				return fmt.Errorf("%s: %w", g.name, err)
			}
		}
		return nil
	})
	if err != nil {
		return tally{}, err
	}

	// Check: every message applied once, in order, and every tail drained.
	t := tally{replays: replays, stale: stale}
	for _, conn := range conns {
		dev := devices[conn]
		for i, seq := range dev.applied {
			if seq != uint64(i+1) {
				return tally{}, fmt.Errorf("%s: the client applied seqs %v, want 1..%d in order", conn, dev.applied, appended[conn])
			}
		}
		tail, err := heir.ob.Tail(ctx, conn)
		if err != nil {
			return tally{}, err
		}
		if len(tail.Messages) != 0 {
			return tally{}, fmt.Errorf("%s: %d messages still unacked after every ack was sent", conn, len(tail.Messages))
		}
		t.delivered += dev.received
		t.duplicates += dev.duplicates
		t.effects += len(dev.applied)
		t.unique += appended[conn]
	}
	d.say("outbox", "drained: every tail is empty, every client applied seq 1..%d in order", outboxBefore+outboxAfter)
	t.notes = []string{
		fmt.Sprintf("%s taken over: %d unacked messages replayed by %s; clients dropped the ones they had by (epoch, seq)",
			plural(len(lost), "connection", "connections"), replays, heir.name),
		fmt.Sprintf("%s from %s after the takeover rejected with ErrStaleOwner", plural(stale, "stale ack batch", "stale ack batches"), failing.name),
	}
	return t, nil
}

// flush sends the acks buffered for conn, at the gateway's generation.
func (g *gatewayNode) flush(ctx context.Context, conn string) error {
	g.mu.Lock()
	ids, gen := g.acks[conn], g.gen[conn]
	g.mu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	if _, err := g.ob.AckMany(ctx, conn, ids, gen); err != nil {
		return err
	}
	g.mu.Lock()
	g.acks[conn] = g.acks[conn][len(ids):]
	g.mu.Unlock()
	return nil
}
