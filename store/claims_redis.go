package store

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

var (
	scriptClaim   = mustScript("claim")
	scriptSeen    = mustScript("seen")
	scriptForget  = mustScript("forget")
	scriptCommit  = mustScript("commit")
	scriptRelease = mustScript("release")
	scriptExtend  = mustScript("extend")

	scriptClaimMany = mustScript("claim_many")
	scriptSeenMany  = mustScript("seen_many")
)

// redisClaims is Claims' Redis backend: one script per operation on
// prefix+id.
type redisClaims struct {
	redisStore
	// ttlMS and leaseMS render the TTL and Do's lease for the scripts:
	// callers pass the same ones every time, so no string is allocated.
	ttlMS, leaseMS msCache
}

func (b *redisClaims) claim(ctx context.Context, op, id, value string, ttl time.Duration, sent *time.Time) (int64, uint64, error) {
	if value[0] == '~' {
		// a lease won answers its fence
		return replyClaimed(op, id, b.execSent(ctx, scriptClaim, b.key(id), sent, b.leaseMS.ms(ttl), value))
	}
	n, err := replyInt(op, id, b.execSent(ctx, scriptClaim, b.key(id), sent, b.ttlMS.ms(ttl), value))
	return n, 0, err
}

func (b *redisClaims) seen(ctx context.Context, id string) (int64, error) {
	return replyInt("seen", id, b.exec(ctx, scriptSeen, b.key(id)))
}

func (b *redisClaims) forget(ctx context.Context, id string) (int64, error) {
	return replyInt("forget", id, b.exec(ctx, scriptForget, b.key(id)))
}

func (b *redisClaims) extend(ctx context.Context, id, token string, lease time.Duration, sent *time.Time) (int64, error) {
	return replyInt("extend", id, b.execSent(ctx, scriptExtend, b.key(id), sent, token, b.leaseMS.ms(lease)))
}

func (b *redisClaims) commit(ctx context.Context, id, token string, ttl time.Duration) (int64, error) {
	return replyInt("commit", id, b.exec(ctx, scriptCommit, b.key(id), token, b.ttlMS.ms(ttl)))
}

func (b *redisClaims) release(ctx context.Context, id, token string) error {
	_, err := replyInt("release", id, b.exec(ctx, scriptRelease, b.key(id), token))
	return err
}

var (
	scriptLeaseMany   = mustScript("lease_many")
	scriptExtendMany  = mustScript("extend_many")
	scriptCommitMany  = mustScript("commit_many")
	scriptReleaseMany = mustScript("release_many")
)

// leaseGroup is one call of a gathering: requests of one operation, one
// argument and (on a cluster) one hash slot, at most maxBatchKeys.
type leaseGroup struct {
	op   leaseOp
	arg  time.Duration
	reqs []*leaseReq
}

// leaseFlush sends a gathering: the requests grouped by operation, argument
// and hash slot (on a standalone or Sentinel server by operation and
// argument only), each group one call (the single-id script for a group of
// one), all in one round trip (execMulti: NOSCRIPT and TRYAGAIN handled
// there). Extensions never wait for replicas: with WithWaitReplicas they go
// in a round trip of their own, beside the others'.
func (b *redisClaims) leaseFlush(ctx context.Context, reqs []*leaseReq) {
	if len(reqs) == 1 {
		// One request: the single-id script, sent as Claims.Do sends it.
		r := reqs[0]
		switch r.op {
		case opLease:
			r.n, r.fence, r.err = b.claim(ctx, "do", r.id, r.value, r.arg, &r.sent)
		case opExtend:
			r.n, r.err = b.extend(ctx, r.id, r.value[1:], r.arg, &r.sent)
		case opCommit:
			stamp(&r.sent)
			r.n, r.err = b.commit(ctx, r.id, r.value[1:], r.arg)
		default:
			stamp(&r.sent)
			r.err = b.release(ctx, r.id, r.value[1:])
		}
		return
	}
	type gkey struct {
		op   leaseOp
		arg  time.Duration
		slot uint16
	}
	cluster := b.c.Mode() == rueidis.ClientModeCluster
	at := map[gkey]int{}
	var groups []leaseGroup
	keys := make([]string, len(reqs))
	for i, r := range reqs {
		keys[i] = b.key(r.id)
		k := gkey{op: r.op, arg: r.arg}
		if cluster {
			k.slot = keySlot(keys[i])
		}
		g, ok := at[k]
		if !ok || len(groups[g].reqs) == maxBatchKeys {
			g = len(groups)
			at[k] = g
			groups = append(groups, leaseGroup{op: r.op, arg: r.arg})
		}
		groups[g].reqs = append(groups[g].reqs, r)
	}
	key := map[*leaseReq]string{}
	for i, r := range reqs {
		key[r] = keys[i]
	}
	calls := make([]call, len(groups))
	for g, grp := range groups {
		calls[g] = b.leaseCall(grp, key)
	}
	send := func(idx []int) {
		sub := make([]call, len(idx))
		for j, g := range idx {
			sub[j] = calls[g]
		}
		sent := time.Now()
		res := execMulti(ctx, b.c, sub)
		for j, g := range idx {
			readLeaseGroup(groups[g], res[j], sent)
		}
	}
	var waits, rest []int
	for g, grp := range groups {
		if grp.op != opExtend && b.c.waitN > 0 {
			waits = append(waits, g)
		} else {
			rest = append(rest, g)
		}
	}
	if len(waits) == 0 || len(rest) == 0 {
		send(append(waits, rest...))
		return
	}
	var wg sync.WaitGroup
	wg.Go(func() { send(rest) })
	send(waits)
	wg.Wait()
}

// leaseCall is the script call of one group.
func (b *redisClaims) leaseCall(g leaseGroup, key map[*leaseReq]string) call {
	if len(g.reqs) == 1 {
		r := g.reqs[0]
		k := []string{key[r]}
		switch g.op {
		case opLease:
			return call{s: scriptClaim, keys: k, args: []string{b.leaseMS.ms(g.arg), r.value}}
		case opExtend:
			return call{s: scriptExtend, keys: k, args: []string{r.value[1:], b.leaseMS.ms(g.arg)}}
		case opCommit:
			return call{s: scriptCommit, keys: k, args: []string{r.value[1:], b.ttlMS.ms(g.arg)}}
		default:
			return call{s: scriptRelease, keys: k, args: []string{r.value[1:]}}
		}
	}
	keys := make([]string, len(g.reqs))
	args := make([]string, 0, len(g.reqs)+1)
	var s *script
	switch g.op {
	case opLease:
		s = scriptLeaseMany
		args = append(args, b.leaseMS.ms(g.arg))
	case opExtend:
		s = scriptExtendMany
		args = append(args, b.leaseMS.ms(g.arg))
	case opCommit:
		s = scriptCommitMany
		args = append(args, b.ttlMS.ms(g.arg))
	default:
		s = scriptReleaseMany
	}
	for i, r := range g.reqs {
		keys[i] = key[r]
		if g.op == opLease {
			args = append(args, r.value)
		} else {
			args = append(args, r.value[1:])
		}
	}
	return call{s: s, keys: keys, args: args}
}

// readLeaseGroup reads one group's reply into its requests: the single-id
// script's reply, or one element per request; a failed call fails every
// request of the group, a key's own error (CORRUPT) only that request.
func readLeaseGroup(g leaseGroup, r reply, sent time.Time) {
	for _, q := range g.reqs {
		q.sent = sent
	}
	if len(g.reqs) == 1 {
		q := g.reqs[0]
		switch g.op {
		case opLease:
			q.n, q.fence, q.err = replyClaimed("do", q.id, r)
		default:
			q.n, q.err = replyInt(opName(g.op), q.id, r)
		}
		return
	}
	name := [...]string{"lease_many", "extend_many", "commit_many", "release_many"}[g.op]
	vals, err := replyArray(name, g.reqs[0].id, r, len(g.reqs))
	if err != nil {
		for _, q := range g.reqs {
			q.err = err
		}
		return
	}
	for j, q := range g.reqs {
		op := opName(g.op)
		if e := vals[j].Error(); e != nil {
			q.err = opError(op, q.id, e)
			continue
		}
		if g.op == opLease && vals[j].IsString() {
			s, _ := vals[j].ToString()
			f, perr := strconv.ParseUint(s, 10, 64)
			if perr != nil || f == 0 {
				q.err = errorf(op, q.id, ErrUnexpectedReply, "element %d: want a fence, got %s", j+1, vals[j].String())
				continue
			}
			q.n, q.fence, q.err = 1, f, r.replicated(op, q.id)
			continue
		}
		n, e := vals[j].AsInt64()
		if e != nil || !vals[j].IsInt64() || !validLeaseReply(g.op, n) {
			q.err = errorf(op, q.id, ErrUnexpectedReply, "element %d: reply %s", j+1, vals[j].String())
			continue
		}
		q.n, q.err = n, r.replicated(op, q.id)
	}
}

// validLeaseReply reports whether n is an integer op's script can answer.
func validLeaseReply(op leaseOp, n int64) bool {
	switch op {
	case opLease:
		return n <= 0
	case opCommit:
		return n >= -1 && n <= 2
	default:
		return n == 0 || n == 1
	}
}
