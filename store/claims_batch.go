package store

import (
	"context"
	"errors"
	"time"

	"github.com/redis/rueidis"
)

// ClaimMany claims every id, as Claim would one by one, in one round trip.
// The result holds, per id, what Claim would have returned; of an id given
// twice the first occurrence wins: the repeats are found in Go before
// anything is sent, only the first occurrence is sent and gets the script's
// answer, and every later one is false. So "first wins" holds however the
// batch is cut into calls, and whatever order the calls land in.
//
// The ids are grouped by hash slot: on a standalone or Sentinel server all of
// them form one group; on a cluster, ids whose keys share a slot (ids with a
// common {hash tag}) form one. Each group runs as ONE call of claim_many.lua
// (at most 500 keys per call; a bigger group is cut, in order, into several),
// atomically; the calls of all groups are pipelined in one DoMulti, so a
// whole batch costs one round trip and, per group, one script call instead of
// one per id. On a cluster, ids without a shared tag mostly land one per slot,
// and then each is one call of claim.lua, as before. A call on several keys of
// a slot being migrated between cluster nodes is refused by Redis with
// TRYAGAIN before it runs, and retried for up to 3 s (meanwhile a 1-key call
// of the same batch may run at once through ASK: no id is in both).
//
// Every id is validated before anything is sent. When a group fails (a
// connection error), the error names its first id and the other groups'
// results are still filled in; a failed group's ids are reported false, and
// may or may not have been claimed. With WithWaitReplicas, the calls are
// followed by one WAIT on the same connection: on a standalone or Sentinel
// server one DoMulti of every call and one WAIT, on one connection; on a
// cluster one per hash slot. When any group's replicas did not confirm it the
// error wraps ErrNotReplicated, naming that group's first id, with every
// result filled in: its claims happened on the primary but may not survive a
// failover.
func (s *Claims) ClaimMany(ctx context.Context, ids []string) ([]bool, error) {
	if s == nil {
		return nil, nilStore("claim_many", "", "Claims")
	}
	if s.ev.obs == nil {
		return s.many(ctx, "claim", ids, readClaim, nil, false, nil)
	}
	t := newTally(outClaimed, outDuplicate, outInFlight)
	out, err := s.many(ctx, "claim", ids, t.counting(readClaim, claimOutcome), t,
		false, func(bool) Outcome { return outDuplicate })
	t.end(out, len(ids), err)
	t.report(ctx, &s.ev, "claim_many", "claim_many", "", len(ids))
	return out, err
}

// SeenMany is Seen for many ids in one round trip, grouped by hash slot like
// ClaimMany (seen_many.lua: one consistent read per group). An id given
// several times is read once, and every occurrence gets that read's answer.
func (s *Claims) SeenMany(ctx context.Context, ids []string) ([]bool, error) {
	if s == nil {
		return nil, nilStore("seen_many", "", "Claims")
	}
	if s.ev.obs == nil {
		return s.many(ctx, "seen", ids, readSeen, nil, true, nil)
	}
	t := newTally(outSeen, outNotSeen)
	out, err := s.many(ctx, "seen", ids, t.counting(readSeen, func(n int64) Outcome { return seenOutcome(n == 1) }), t,
		true, seenOutcome)
	t.end(out, len(ids), err)
	t.report(ctx, &s.ev, "seen_many", "seen_many", "", len(ids))
	return out, err
}

// readClaim reads claim.lua's (and claim_many.lua's per-key) reply: any
// negative one is in flight (claim.lua answers the ms left on the lease).
func readClaim(n int64) (bool, bool) { return n == 1, n <= 1 }

// readSeen reads seen.lua's (and seen_many.lua's per-key) reply.
func readSeen(n int64) (bool, bool) { return n == 1, n == 0 || n == 1 }

// many validates every id (nothing is sent when one is invalid: a nil
// result), resolves the duplicates (firstOccurrences) and runs the batch of
// distinct ids. A repeat of an id gets false when copyRepeats is false
// (ClaimMany: the first occurrence won) and its first occurrence's result when
// it is true (SeenMany: one read answers both). t is the observer's tally of
// read's counts, or nil; a repeat counts as repeat's outcome of its first
// occurrence's result, or as failed when its first occurrence's group failed.
func (s *Claims) many(ctx context.Context, op string, ids []string,
	read func(int64) (result, valid bool), t *tally, copyRepeats bool, repeat func(first bool) Outcome) ([]bool, error) {
	if len(ids) == 0 {
		// An empty batch sends nothing, but bad input is still refused.
		if err := s.checkBatch(ctx, op); err != nil {
			return nil, err
		}
	}
	for _, id := range ids {
		if err := s.check(ctx, op, id); err != nil {
			return nil, err
		}
	}
	uniq, pos := firstOccurrences(ids)
	if pos == nil {
		return s.b.batch(ctx, op == "claim", ids, s.ttl, read, t, nil)
	}
	ok := make([]bool, len(uniq))
	res, err := s.b.batch(ctx, op == "claim", uniq, s.ttl, read, t, ok)
	out := make([]bool, len(ids))
	for i, p := range pos {
		if p >= 0 {
			out[i] = res[p]
			continue
		}
		first := res[^p]
		out[i] = copyRepeats && first
		if t != nil && ok[^p] {
			t.add(repeat(first))
		}
	}
	return out, err
}

// firstOccurrences returns ids without their repeats, in the order of first
// occurrence, and pos: for ids[i], its index in uniq, or ^j (negative) when
// it repeats uniq[j]. Without a repeat it returns (ids, nil), allocating
// nothing for a batch of up to 16 ids. This is what keeps "the first
// occurrence wins" whatever happens to the calls a batch is cut into (calls
// of one slot sent concurrently, or one held on TRYAGAIN during a cluster
// slot migration while a later one runs through ASK): no key is sent twice.
func firstOccurrences(ids []string) (uniq []string, pos []int) {
	if len(ids) < 2 {
		return ids, nil
	}
	if len(ids) <= 16 {
		dup := false
		for i := 1; i < len(ids) && !dup; i++ {
			for j := range i {
				if ids[j] == ids[i] {
					dup = true
					break
				}
			}
		}
		if !dup {
			return ids, nil
		}
	}
	at := make(map[string]int, len(ids))
	for i, id := range ids {
		j, seen := at[id]
		if !seen {
			j = len(at)
			at[id] = j
		}
		if pos == nil {
			if !seen {
				continue
			}
			// The first repeat: every id before it was new.
			pos = make([]int, len(ids))
			for k := range i {
				pos[k] = k
			}
			uniq = append(make([]string, 0, len(ids)-1), ids[:i]...)
		}
		if seen {
			pos[i] = ^j
			continue
		}
		pos[i] = j
		uniq = append(uniq, id)
	}
	if pos == nil {
		return ids, nil
	}
	return uniq, pos
}

// batch runs claim.lua or seen.lua (single-key scripts) or their batch
// scripts per slot group of ids in one DoMulti and reads one integer per
// id; valid reports whether an integer is a reply the script can give. The
// items of a group its replicas did not confirm move, in t, from their
// verdicts to the errors. ok, when not nil, is set true for every id whose
// group was read without an error.
func (s *redisClaims) batch(ctx context.Context, claim bool, ids []string, ttl time.Duration,
	read func(int64) (result, valid bool), t *tally, ok []bool) ([]bool, error) {
	op, one, many, args := "seen", scriptSeen, scriptSeenMany, []string(nil)
	if claim {
		op, one, many, args = "claim", scriptClaim, scriptClaimMany, []string{s.ttlMS.ms(ttl), "1"}
	}
	out := make([]bool, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	keys := s.keys(ids)
	if len(ids) > 1 && len(ids) <= maxBatchKeys && (s.c.Mode() != rueidis.ClientModeCluster || sameSlot(keys)) {
		// One group of every id in order (a standalone or Sentinel server, or
		// ids that share a hash tag): the keys go as they are.
		r := execMulti(ctx, s.c, []call{{s: many, keys: keys, args: args}})[0]
		err := readGroup(op, ids, nil, r, out, read, t)
		if err == nil {
			for i := range ok {
				ok[i] = true
			}
		}
		return out, err
	}
	groups := slotGroups(s.c, keys)
	calls := make([]call, len(groups))
	for g, idx := range groups {
		if len(idx) == 1 {
			i := idx[0]
			calls[g] = call{s: one, keys: keys[i : i+1], args: args} // no copy of the key
			continue
		}
		gk := make([]string, len(idx))
		for j, i := range idx {
			gk[j] = keys[i]
		}
		calls[g] = call{s: many, keys: gk, args: args}
	}
	var first, unrepl error
	for g, r := range execMulti(ctx, s.c, calls) {
		err := readGroup(op, ids, groups[g], r, out, read, t)
		if err == nil && ok != nil {
			for _, i := range groups[g] {
				ok[i] = true
			}
		}
		if first == nil {
			first = err
		}
		if unrepl == nil && errors.Is(err, ErrNotReplicated) {
			unrepl = err
		}
	}
	if unrepl != nil && !errors.Is(first, ErrNotReplicated) {
		// Another group's error comes first: the unconfirmed writes still say so.
		first = errors.Join(first, unrepl)
	}
	return out, first
}

// readGroup is readBatch, telling t when the group was not confirmed.
func readGroup(op string, ids []string, idx []int, r reply, out []bool, read func(int64) (bool, bool), t *tally) error {
	mark := t.mark()
	err := readBatch(op, ids, idx, r, out, read)
	if r.unreplicated != nil {
		t.unconfirmed(mark, err)
	}
	return err
}

// readBatch reads one group's reply into out: an integer for a single-key
// call, an array of len(idx) integers for a batch call. idx nil stands for
// every id in order. A group its replicas did not confirm (WithWaitReplicas)
// has its results read, and returns ErrNotReplicated naming its first id.
func readBatch(op string, ids []string, idx []int, r reply, out []bool,
	read func(int64) (bool, bool)) error {
	n := len(idx)
	at := func(j int) int { return idx[j] }
	if idx == nil {
		n = len(ids)
		at = func(j int) int { return j }
	}
	id := ids[at(0)]
	if idx != nil && n == 1 {
		n, err := replyInt(op, id, r)
		if err != nil && !errors.Is(err, ErrNotReplicated) {
			return err
		}
		v, ok := read(n)
		if !ok {
			return errorf(op, id, ErrUnexpectedReply, "reply %d", n)
		}
		out[idx[0]] = v
		return err
	}
	vals, err := replyArray(op, id, r, n)
	if err != nil {
		return err
	}
	var first error
	for j := range n {
		i := at(j)
		if err := vals[j].Error(); err != nil {
			// One key's own error (claim_many.lua's CORRUPT element): the
			// others were still run.
			if first == nil {
				first = opError(op, ids[i], err)
			}
			continue
		}
		n, err := vals[j].AsInt64()
		if err != nil || !vals[j].IsInt64() {
			return errorf(op, ids[i], ErrUnexpectedReply, "element %d is not an integer", j+1)
		}
		v, ok := read(n)
		if !ok {
			return errorf(op, ids[i], ErrUnexpectedReply, "element %d: reply %d", j+1, n)
		}
		out[i] = v
	}
	// One key's error does not hide that the others' writes are unconfirmed.
	return errors.Join(first, r.replicated(op, id))
}
