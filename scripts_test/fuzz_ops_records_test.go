package scripts_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
)

// Records operations for the model-based tests. Times come from the server
// on one side and the memory clock on the other, so replies show only
// whether a lease or expiry is set; tokens are random on both sides, so an
// operation presents "the token I acquired last" (Ref -2), which each side
// resolves to its own token, or a token no one holds (Ref -3).

const (
	refNone   = -1 // unfenced
	refLatest = -2 // the token of the caller's latest successful acquire
	refBogus  = -3 // a token no one holds
)

var (
	recordStatuses     = []string{"pending", "completed", "failed", "custom"}
	recordFuzzStatuses = []string{"pending", "completed", "failed", "custom", "", strings.Repeat("s", maxStatusLen+1)}
	recordFPs          = []string{"", "fp1", "fp2"}
)

var errRetryLater = errors.New("retry later")

var recordsModel = opModel{
	name:      "records",
	newMemory: func(opts ...store.Option) any { return must.Store(store.NewMemoryRecords(opts...)) },
	newRedis: func(c rueidis.Client, prefix string, opts ...store.Option) any {
		return must.Store(store.NewRecords(c, append(opts, store.WithPrefix(prefix))...))
	},
	options: func(*opReader) []store.Option { return nil },
	decode: func(r *opReader, valid bool) op {
		ids, statuses := fuzzIDs, recordFuzzStatuses
		names := []string{"AcquireWith", "AcquireWith", "Acquire", "Get", "Update", "Update", "Delete", "DeleteFenced", "Do"}
		if valid {
			ids, statuses = linIDs, recordStatuses
			names = names[:8]
		}
		o := op{Name: pick(r, names), ID: pick(r, ids), Ref: refNone}
		switch o.Name {
		case "AcquireWith":
			o.Arg = pick(r, recordFPs)
			o.Flag = r.byte()%2 == 0 // with an hour's lease
		case "Update":
			// N's bits: 1 status, 2 payload, 4 clear the lease, 8 expire now, 16 persist.
			o.N = uint64(r.byte() % 32)
			if o.N&3 == 0 && !valid {
				o.N |= uint64(r.byte() % 2) // sometimes nothing to update
			} else if o.N&3 == 0 {
				o.N |= 1
			}
			if valid {
				o.N &^= 8 // deleting by expiry is Delete's job in histories
			}
			o.Arg = pick(r, statuses)
			o.IDs = []string{r.bytes(6)}
			o.Ref = pick(r, []int{refNone, refLatest, refLatest, refBogus})
		case "DeleteFenced":
			o.Ref = pick(r, []int{refLatest, refBogus})
		case "Do":
			o.N = uint64(r.byte() % 3) // 0 ok, 1 error, 2 retryable error
			o.IDs = []string{r.bytes(6)}
		}
		return o
	},
	apply: func(ctx context.Context, s any, o op, env *applyEnv) result {
		rs := s.(*store.Records)
		token := ""
		switch {
		case o.Ref >= 0:
			if token = env.tokens[o.Ref]; token == "" {
				token = "no-token-at-" + fmt.Sprint(o.Ref)
			}
		case o.Ref == refBogus || o.Ref == refLatest: // refLatest unresolved: nobody acquired
			token = "0123456789abcdef0123456789abcdef"
		}
		var v string
		var err error
		switch o.Name {
		case "Acquire", "AcquireWith":
			var rec store.Record
			var acquired bool
			if o.Name == "Acquire" {
				rec, acquired, err = rs.Acquire(ctx, o.ID, 0)
			} else {
				ao := store.AcquireOptions{Fingerprint: o.Arg}
				if o.Flag {
					ao.Lease = time.Hour
				}
				rec, acquired, err = rs.AcquireWith(ctx, o.ID, ao)
			}
			if err == nil && acquired {
				env.tokens[o.Seq] = rec.Token
			}
			v = fmt.Sprintf("acquired=%v %s", acquired, renderRecord(rec))
		case "Get":
			var rec store.Record
			var found bool
			rec, found, err = rs.Get(ctx, o.ID)
			v = fmt.Sprintf("found=%v %s", found, renderRecord(rec))
		case "Update":
			var u store.Update
			if o.N&1 != 0 {
				st := store.Status(o.Arg)
				u.Status = &st
			}
			if o.N&2 != 0 {
				p := []byte(o.IDs[0])
				u.Payload = &p
			}
			if o.N&4 != 0 {
				u.LeaseUntil = &time.Time{}
			}
			if o.N&8 != 0 {
				past := time.Unix(1, 0)
				u.ExpiresAt = &past
			} else if o.N&16 != 0 {
				u.ExpiresAt = &time.Time{}
			}
			u.Token = token
			err = rs.Update(ctx, o.ID, u)
		case "Delete":
			err = rs.Delete(ctx, o.ID)
		case "DeleteFenced":
			err = rs.DeleteFenced(ctx, o.ID, token)
		case "Do":
			var res []byte
			var replayed bool
			res, replayed, err = rs.Do(ctx, o.ID, store.AcquireOptions{Lease: time.Hour}, func(context.Context) ([]byte, error) {
				switch o.N {
				case 1:
					return nil, store.Permanent(errCallbackFailed) // stored as failed, replayed
				case 2:
					return nil, store.Retryable(errRetryLater)
				}
				return []byte(o.IDs[0]), nil
			})
			v = fmt.Sprintf("%q replayed=%v", res, replayed)
		default:
			panic("records: no operation " + o.Name)
		}
		if err != nil && o.Name != "Do" {
			v = ""
		}
		return result{Val: v, Err: errName(err)}
	},
	atomic: func(o op) bool { return o.Name != "Do" },
	ids:    fuzzIDs,
	snapshot: func(ctx context.Context, s any, id string, env *applyEnv) string {
		// The record, and which acquire's token owns it (the hidden token):
		// the one whose fenced update goes through.
		rs := s.(*store.Records)
		rec, found, err := rs.Get(ctx, id)
		owner := -1
		if found {
			for seq, tok := range env.tokens {
				p := rec.Payload
				if rs.Update(ctx, id, store.Update{Payload: &p, Token: tok}) == nil {
					owner = seq
					break
				}
			}
		}
		return fmt.Sprintf("found=%v %s owner=%d %v", found, renderRecord(rec), owner, err)
	},
	write:  func(id string) op { return op{Name: "AcquireWith", ID: id, Flag: true, Ref: refNone} },
	read:   func(id string) op { return op{Name: "Get", ID: id, Ref: refNone} },
	broken: "Delete",
	impossible: func() []porcupine.Operation {
		// Two acquires of one key, one after the other, both acquired it.
		acq := op{Name: "AcquireWith", ID: "a", Flag: true, Ref: refNone}
		won := result{Val: "acquired=true " + renderRecord(store.Record{Status: store.StatusPending, Fence: 1, Token: "t",
			LeaseUntil: time.Unix(1, 0)})}
		return seqOps(opResult{acq, won}, opResult{acq, won})
	},
}

// renderRecord renders what both implementations agree on: not the times,
// only whether a lease or an expiry is set; not the token, only whether the
// caller got one; not the fence (each store's clock), only whether there is
// one (the conformance suite checks that fences only grow).
func renderRecord(r store.Record) string {
	return fmt.Sprintf("status=%q payload=%q fence=%v fp=%q lease=%v expires=%v token=%v",
		r.Status, r.Payload, r.Fence != 0, r.Fingerprint, !r.LeaseUntil.IsZero(), !r.ExpiresAt.IsZero(), r.Token != "")
}
