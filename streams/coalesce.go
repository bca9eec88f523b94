package streams

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/redisonce/redisonce/store"
)

// WithCoalesce makes the Consumer coalesce entries by key(m) instead of
// running the handler once per claim id: each entry triggers its key on a
// store.Coalescer (on the Consumer's client, with o's modes and opts, e.g.
// store.WithPrefix), and the handler runs once per burst of a key's entries
// with the latest one, never while another run of the key goes on — a cache
// rebuild or a search-index update per key, not per event.
//
//	trigger outcome                        what happens to the entry   Event outcome
//	ran the handler, which returned nil    XACK                        acked
//	kept as the key's next (a run holds    XACK: a run that starts     coalesced
//	  the key, or debounce/throttle)         after it covers it
//	ran the handler, which failed          XACK: the Coalescer keeps   failed
//	                                         the entry and retries it
//	                                         after o.RetryDelay (not
//	                                         after a store.Permanent
//	                                         error)
//	a store error (the trigger may not     left pending (reclaimed     error
//	  be kept: ErrNotReplicated too)         after the min idle time)
//	key(m) is ""                           as a missing id field       invalid or
//	                                         (WithIDField)               dead_lettered
//
// The handler of a coalesced run gets the entry as it was triggered
// (Stream, ID, Values, Deliveries) with ClaimID set to the key; its context
// is the key's lease (store.LeaseFromContext), cancelled before another run
// of the key can start. The next of a key whose holder died runs once its
// lease passed: taken by the next trigger of the key, a watch timer of a
// Consumer that kept an entry of it, or the sweep every Run makes every
// lease. Entries are triggered by concurrent handlers: the latest payload
// is the entry whose trigger reached Redis last, which among entries read
// together need not be the newest id (a handler that rebuilds from the
// source of truth does not care; one that needs stream order runs with
// WithConcurrency(1)). The Claims store passed to New is still used for
// dead letters.
// Default: no coalescing.
func WithCoalesce(key func(Message) string, o store.CoalesceOptions, opts ...store.Option) Option {
	return func(c *config) {
		if key == nil {
			c.err = fmt.Errorf("streams: nil coalescing key func: %w", store.ErrInvalidArgument)
		}
		c.coalesceKey, c.coalesceOpts, c.coalesceStoreOpts = key, o, opts
	}
}

// OutcomeCoalesced: the entry's trigger was kept as its key's next (a run
// that starts later covers it) and the entry acked.
const OutcomeCoalesced store.Outcome = "coalesced"

// coalescedEntry is a Message as a Coalescer payload.
type coalescedEntry struct {
	Stream     string            `json:"s"`
	ID         string            `json:"i"`
	Values     map[string]string `json:"v"`
	Deliveries int64             `json:"d"`
}

// newCoalescer makes the Consumer's Coalescer: its fn decodes the entry and
// runs the handler (a panic is its error).
func (c *Consumer) newCoalescer() (err error) {
	if c.cfg.coalesceKey == nil {
		return nil
	}
	c.co, err = store.NewCoalescer(c.client, func(ctx context.Context, key string, payload []byte) (err error) {
		var e coalescedEntry
		if err := json.Unmarshal(payload, &e); err != nil {
			return store.Permanent(fmt.Errorf("redisonce: streams %q: %w: a coalesced payload that is not an entry: %v", key, store.ErrUnexpectedReply, err))
		}
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("redisonce: streams %q: handler panicked: %v", key, p)
			}
		}()
		return c.handle(ctx, Message{Stream: e.Stream, ID: e.ID, Values: e.Values, ClaimID: key, Deliveries: e.Deliveries})
	}, c.cfg.coalesceOpts, c.cfg.coalesceStoreOpts...)
	return err
}

// coalesce triggers m's key and acks or leaves m; m.ClaimID is the key.
func (r *run) coalesce(m *Message) (store.Outcome, error) {
	c := r.c
	m.ClaimID = c.cfg.coalesceKey(*m)
	if m.ClaimID == "" {
		m.ClaimID = c.stream + "/" + m.ID
		if c.cfg.deadLetter != "" {
			return r.deadLetter(m, "no coalescing key")
		}
		return store.Outcome("invalid"), fmt.Errorf("redisonce: streams %q: %w: no coalescing key", m.ClaimID, store.ErrInvalidArgument)
	}
	payload, err := json.Marshal(coalescedEntry{Stream: m.Stream, ID: m.ID, Values: m.Values, Deliveries: m.Deliveries})
	if err != nil {
		return store.Outcome("error"), err
	}
	ran, err := c.co.Trigger(r.hctx, m.ClaimID, payload)
	switch {
	case err == nil && ran:
		r.acks <- m.ID
		return store.Outcome("acked"), nil
	case err == nil:
		r.acks <- m.ID
		return OutcomeCoalesced, nil
	case ran:
		// The handler failed: the Coalescer keeps the entry as the key's
		// next and retries it; or the run's lease was lost (ErrLeaseLost),
		// and the run that took the key over covers the entry.
		r.acks <- m.ID
		return store.Outcome("failed"), err
	default:
		return store.Outcome("error"), err
	}
}

// sweep runs the Consumer's Coalescer's sweep every lease until ctx is done.
func (r *run) sweep(ctx context.Context) {
	if r.c.co == nil {
		return
	}
	for {
		sleep(ctx, r.c.cfg.lease)
		if ctx.Err() != nil {
			return
		}
		_, _ = r.c.co.Sweep(ctx)
	}
}
