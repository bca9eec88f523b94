package demo

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

func runOutbox(ctx context.Context, d *Env) (Tally, error) {
	r, err := newOutboxRun(d)
	defer r.close()
	if err != nil {
		return Tally{}, err
	}
	d.say("outbox", "%d gateways, %d client connections (2 per gateway), acks sent in batches of %d",
		outboxGateways, outboxConns, outboxAckBatch)
	steps := []func(context.Context) error{r.firstTraffic, r.takeOver, r.rejectStaleAcks, r.moreTraffic}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			return Tally{}, err
		}
	}
	return r.check(ctx)
}

// outboxRun is the outbox section's state: the gateways, the devices at the
// far end of each connection, and what happened.
type outboxRun struct {
	d             *Env
	gws           []*gatewayNode
	procs         []*process
	failing, heir *gatewayNode
	conns         []string
	devices       map[string]*device
	lost          []string // the failing gateway's connections

	mu             sync.Mutex // guards appended and the counters
	appended       map[string]int
	replays, stale int
}

// newOutboxRun opens one process per gateway and deals the connections out.
func newOutboxRun(d *Env) (*outboxRun, error) {
	r := &outboxRun{d: d, devices: map[string]*device{}, appended: map[string]int{}}
	opts := []store.Option{store.WithPrefix(d.prefix + "outbox:"), store.WithTTL(10 * time.Minute)}
	for i := range outboxGateways {
		proc, err := d.newProcess()
		if err != nil {
			return r, err
		}
		r.procs = append(r.procs, proc)
		ob, err := store.NewOutbox(proc.client, opts...)
		if err != nil {
			return r, err
		}
		r.gws = append(r.gws, &gatewayNode{name: fmt.Sprintf("g%d", i+1), ob: ob,
			gen: map[string]uint64{}, acks: map[string][]string{}})
	}
	r.failing, r.heir = r.gws[outboxFailing], r.gws[outboxHeir]
	for i := range outboxConns {
		conn := fmt.Sprintf("conn-%d", i+1)
		r.conns = append(r.conns, conn)
		r.devices[conn] = &device{seen: map[[2]uint64]bool{}}
		r.gws[i%outboxGateways].gen[conn] = 1
	}
	return r, nil
}

func (r *outboxRun) close() {
	for _, p := range r.procs {
		p.client.Close()
	}
}

// deliver hands a message to the connection's device and takes its ack.
func (r *outboxRun) deliver(ctx context.Context, g *gatewayNode, conn, id string, epoch, seq uint64) error {
	r.devices[conn].receive(epoch, seq)
	g.mu.Lock()
	g.acks[conn] = append(g.acks[conn], id)
	full := len(g.acks[conn]) >= outboxAckBatch
	g.mu.Unlock()
	if full {
		return g.flush(ctx, conn)
	}
	return nil
}

// send appends a message to the connection's tail, then delivers it unless
// the gateway dies between the two.
func (r *outboxRun) send(ctx context.Context, g *gatewayNode, conn string, k int, dieBeforeDelivery bool) error {
	id := fmt.Sprintf("%s-m%02d", conn, k)
	a, err := g.ob.AppendWithID(ctx, conn, id, fmt.Appendf(nil, "event %d for %s", k, conn))
	if err != nil {
		return err
	}
	if a.Created {
		r.mu.Lock()
		r.appended[conn]++
		r.mu.Unlock()
	}
	if dieBeforeDelivery {
		return nil
	}
	return r.deliver(ctx, g, conn, id, a.Epoch, a.Seq)
}

// each runs fn for every gateway and its connections, concurrently.
func (r *outboxRun) each(fn func(g *gatewayNode, conns []string) error) error {
	errs := make(chan error, len(r.gws))
	for _, g := range r.gws {
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
	for range r.gws {
		all = append(all, <-errs)
	}
	return errors.Join(all...)
}

// firstTraffic is phase 1: traffic; the failing gateway stops after
// appending its last message, before delivering it, with acks still in its
// buffer.
func (r *outboxRun) firstTraffic(ctx context.Context) error {
	err := r.each(func(g *gatewayNode, owned []string) error {
		for k := 1; k <= outboxBefore; k++ {
			for _, conn := range owned {
				dies := g == r.failing && k == outboxBefore
				if err := r.send(ctx, g, conn, k, dies); err != nil {
					return fmt.Errorf("%s: %w", g.name, err)
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for conn := range r.failing.gen {
		r.lost = append(r.lost, conn)
	}
	sort.Strings(r.lost)
	r.d.say("outbox", "%s stopped answering after %d messages per connection, holding %s (unflushed acks, one message appended but never delivered)",
		r.failing.name, outboxBefore, strings.Join(r.lost, ", "))
	return nil
}

// takeOver is phase 2: the heir takes the connections over: a higher
// generation fences the old owner out, then the unacked tail is replayed in
// order.
func (r *outboxRun) takeOver(ctx context.Context) error {
	heir := r.heir
	for _, conn := range r.lost {
		gen := r.failing.gen[conn] + 1
		if err := heir.ob.AdvanceGeneration(ctx, conn, gen); err != nil {
			return err
		}
		tail, err := heir.ob.Tail(ctx, conn)
		if err != nil {
			return err
		}
		heir.mu.Lock()
		heir.gen[conn] = gen
		heir.mu.Unlock()
		dupsBefore := r.devices[conn].duplicates
		for _, m := range tail.Messages {
			if err := r.deliver(ctx, heir, conn, m.ID, tail.Epoch, m.Seq); err != nil {
				return err
			}
		}
		r.mu.Lock()
		r.replays += len(tail.Messages)
		r.mu.Unlock()
		r.d.say("outbox", "%s took %s over at generation %d and replayed its %d unacked messages: the client already had %d",
			heir.name, conn, gen, len(tail.Messages), r.devices[conn].duplicates-dupsBefore)
	}
	return nil
}

// rejectStaleAcks is phase 3: the old owner comes back and flushes its
// buffered acks before the heir has sent its own: they are refused and the
// tail is untouched.
func (r *outboxRun) rejectStaleAcks(ctx context.Context) error {
	failing, heir := r.failing, r.heir
	for _, conn := range r.lost {
		before, err := heir.ob.Tail(ctx, conn)
		if err != nil {
			return err
		}
		n := len(failing.acks[conn])
		err = failing.flush(ctx, conn)
		if !errors.Is(err, store.ErrStaleOwner) {
			return fmt.Errorf("%s's ack at generation %d on %s after the takeover: %v, want ErrStaleOwner",
				failing.name, failing.gen[conn], conn, err)
		}
		after, err := heir.ob.Tail(ctx, conn)
		if err != nil {
			return err
		}
		if !reflect.DeepEqual(before, after) {
			return fmt.Errorf("%s: a rejected ack changed the tail: %+v, then %+v", conn, before, after)
		}
		r.stale++
		r.d.say("outbox", "%s came back and acked %s on %s at generation %d: rejected (stale owner), the tail of %d is untouched",
			failing.name, plural(n, "message", "messages"), conn, failing.gen[conn], len(after.Messages))
		delete(failing.gen, conn)
		delete(failing.acks, conn)
		if err := heir.flush(ctx, conn); err != nil {
			return err
		}
	}
	return nil
}

// moreTraffic is phase 4: more traffic on every connection, then every ack
// is sent.
func (r *outboxRun) moreTraffic(ctx context.Context) error {
	return r.each(func(g *gatewayNode, owned []string) error {
		for k := outboxBefore + 1; k <= outboxBefore+outboxAfter; k++ {
			for _, conn := range owned {
				if err := r.send(ctx, g, conn, k, false); err != nil {
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
}

// check verifies that every message was applied once, in order, and that
// every tail is drained, and returns the tally.
func (r *outboxRun) check(ctx context.Context) (Tally, error) {
	t := Tally{Replays: r.replays, Stale: r.stale}
	for _, conn := range r.conns {
		dev := r.devices[conn]
		for i, seq := range dev.applied {
			if seq != uint64(i+1) {
				return Tally{}, fmt.Errorf("%s: the client applied seqs %v, want 1..%d in order", conn, dev.applied, r.appended[conn])
			}
		}
		tail, err := r.heir.ob.Tail(ctx, conn)
		if err != nil {
			return Tally{}, err
		}
		if len(tail.Messages) != 0 {
			return Tally{}, fmt.Errorf("%s: %d messages still unacked after every ack was sent", conn, len(tail.Messages))
		}
		t.Delivered += dev.received
		t.Duplicates += dev.duplicates
		t.Effects += len(dev.applied)
		t.Unique += r.appended[conn]
	}
	r.d.say("outbox", "drained: every tail is empty, every client applied seq 1..%d in order", outboxBefore+outboxAfter)
	t.Notes = []string{
		fmt.Sprintf("%s taken over: %d unacked messages replayed by %s; clients dropped the ones they had by (epoch, seq)",
			plural(len(r.lost), "connection", "connections"), r.replays, r.heir.name),
		fmt.Sprintf("%s from %s after the takeover rejected with ErrStaleOwner", plural(r.stale, "stale ack batch", "stale ack batches"), r.failing.name),
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
