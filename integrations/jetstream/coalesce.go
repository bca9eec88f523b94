package jetstream

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/redisonce/redisonce/store"
)

// OutcomeCoalesced: with WithCoalesce, the message's trigger was kept as its
// key's next (a run that starts later covers it), or its run failed and the
// Coalescer keeps it for a retry; the message is double-acked.
const OutcomeCoalesced Outcome = "coalesced"

// WithCoalesce makes the Handler coalesce messages by key(msg) instead of
// running fn once per message id: each delivery triggers its key on co with
// the message's data as the payload, and co's fn (not the Handler's fn, which
// may then be nil) runs once per burst of a key's messages with the latest
// data, never while another run of the key goes on, in whatever process
// (see store.Coalescer).
//
//	trigger outcome                       what happens to the message   Outcome
//	ran co's fn, which returned nil       DoubleAck                     OutcomeDone
//	kept as the key's next                DoubleAck                     OutcomeCoalesced
//	ran co's fn, which failed             DoubleAck: co keeps the data  OutcomeCoalesced
//	                                        and retries it (not after
//	                                        a store.Permanent error)
//	a store error (the trigger may not    NakWithDelay(lease)           OutcomeError
//	  be kept: ErrNotReplicated too)
//	context cancelled                     Nak                           OutcomeError
//
// While a trigger runs co's fn, every lease extension sends InProgress, as
// Do's do. consumer.Consume calls the handler with one message at a time:
// make co with CoalesceOptions.Background (or Debounce) so that a run does
// not hold the next messages back until it ends, which would leave nothing
// to coalesce. Default: no coalescing.
func WithCoalesce(co *store.Coalescer, key func(jetstream.Msg) (string, error)) Option {
	return func(h *Handler) { h.co, h.coKey = co, key }
}

// coalesce triggers msg's key and acks or naks msg.
func (h *Handler) coalesce(ctx context.Context, msg jetstream.Msg) (Outcome, error) {
	key, err := h.coKey(msg)
	if err == nil && key == "" {
		err = errors.New("empty coalescing key")
	}
	if err != nil {
		return OutcomeError, errors.Join(err, msg.NakWithDelay(h.lease))
	}
	tctx := store.OnExtend(ctx, func(store.Lease) { _ = msg.InProgress() })
	ran, err := h.co.Trigger(tctx, key, msg.Data())
	o := OutcomeCoalesced
	switch {
	case err == nil && ran:
		o = OutcomeDone
	case err == nil, ran:
	case ctx.Err() != nil:
		return OutcomeError, errors.Join(err, msg.Nak())
	default:
		return OutcomeError, errors.Join(err, msg.NakWithDelay(h.lease))
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.ackTimeout)
	defer cancel()
	return o, errors.Join(err, msg.DoubleAck(actx))
}
