package kafka

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redisonce/redisonce/store"
)

// OutcomeCoalesced: with WithCoalesce, the record's trigger was kept as its
// key's next (a run that starts later covers it), or its run failed and the
// Coalescer keeps it for a retry; the offset is marked.
const OutcomeCoalesced Outcome = "coalesced"

// WithCoalesce makes the Consumer coalesce records by key(r) instead of
// running fn once per record id: each record triggers its key on co with the
// record's value as the payload, in partition order, and co's fn
// (not fn, which may then be nil) runs once per burst of a key's records
// with the latest value, never while another run of the key goes on, in
// whatever process (see store.Coalescer). Records of one key on one
// partition trigger in offset order, so the latest is the highest offset
// among them.
//
//	trigger outcome                      what happens to the record     Outcome
//	ran co's fn, which returned nil      offset marked                  OutcomeDone
//	kept as the key's next               offset marked                  OutcomeCoalesced
//	ran co's fn, which failed            offset marked: co keeps the    OutcomeCoalesced
//	                                       value and retries it (not
//	                                       after a store.Permanent error)
//	a store error (the trigger may not   tried again, in order, after   OutcomeRetry
//	  be kept: ErrNotReplicated too)       a backoff
//	partition revoked                    not marked                     OutcomeRevoked
//
// Make co with CoalesceOptions.Background: a partition hands over one record
// at a time, so a run in its goroutine would hold the partition back and no
// record of the burst could arrive during it (the offset is marked once the
// run has started: its record's value stays in the key until the run
// finishes, and a process that dies mid-run leaves it to be run again).
// A key func error or an empty key is a failure like fn's: the failure
// policy decides. Default: no coalescing.
func WithCoalesce(co *store.Coalescer, key func(*kgo.Record) (string, error)) Option {
	return func(c *Consumer) { c.co, c.coKey = co, key }
}

// coalesce is one attempt at r with WithCoalesce: done (mark the offset), or
// the error that decides the next attempt.
func (c *Consumer) coalesce(ctx context.Context, r *kgo.Record) (Outcome, error, bool) {
	key, err := c.coKey(r)
	if err == nil && key == "" {
		err = errors.New("empty coalescing key")
	}
	if err != nil {
		return OutcomeRetry, err, true
	}
	ran, err := c.co.Trigger(ctx, key, r.Value)
	switch {
	case err == nil && ran:
		return OutcomeDone, nil, false
	case err == nil, ran:
		return OutcomeCoalesced, err, false
	}
	return OutcomeRetry, err, false
}
