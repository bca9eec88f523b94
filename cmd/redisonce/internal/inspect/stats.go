package inspect

import (
	"context"
	"sort"
	"strings"

	"github.com/redis/rueidis"
)

// maxExamples bounds the foreign keys and largest tails a report lists.
const maxExamples = 5

// KeyMs is a key and a duration in ms.
type KeyMs struct {
	Key string `json:"key"`
	Ms  int64  `json:"ms"`
}

// Counts is what every store's stats have: the keys read, and the ones that
// are not the store's.
type Counts struct {
	Keys           int      `json:"keys"`
	Foreign        int      `json:"foreign"`
	ForeignSamples []string `json:"foreign_samples,omitempty"` // the first few
	// Moved counts keys whose slot moved to another node between SCAN and
	// the read (a cluster being resharded): not counted anywhere else.
	Moved int `json:"moved_during_scan,omitempty"`
}

func (c *Counts) addForeign(key string) {
	c.Foreign++
	if len(c.ForeignSamples) < maxExamples {
		c.ForeignSamples = append(c.ForeignSamples, key)
	}
}

// ClaimsStats counts claims by state.
type ClaimsStats struct {
	Counts
	Processed int `json:"processed"`
	InFlight  int `json:"in_flight"`
	// ShortestLease is the in-flight claim whose lease ends first: the
	// oldest lease (every lease of a store has the same length).
	ShortestLease *KeyMs `json:"shortest_lease,omitempty"`
	// NoExpiry counts in-flight claims without a TTL: they never end by
	// themselves (the scripts never write one; a PERSIST by hand does).
	NoExpiry int `json:"in_flight_without_expiry"`
}

// Add reads a batch of claims keys of one node (GET and PTTL per key, one
// pipeline) and counts them.
func (s *ClaimsStats) Add(ctx context.Context, c rueidis.Client, keys []string) error {
	cmds := make(rueidis.Commands, 0, 2*len(keys))
	for _, k := range keys {
		cmds = append(cmds, c.B().Get().Key(k).Build(), c.B().Pttl().Key(k).Build())
	}
	res := c.DoMulti(ctx, cmds...)
	for i, k := range keys {
		v, err := res[2*i].ToString()
		pttl, _ := res[2*i+1].AsInt64()
		if skip, err := s.counted(k, err); skip || err != nil {
			if err != nil {
				return err
			}
			continue
		}
		cl, err := DecodeClaim(k, v, pttl)
		if err != nil {
			s.addForeign(k)
			continue
		}
		s.add(cl)
	}
	return nil
}

func (s *ClaimsStats) add(cl Claim) {
	if cl.State == Processed {
		s.Processed++
		return
	}
	s.InFlight++
	if cl.TTLms < 0 {
		s.NoExpiry++
	} else if s.ShortestLease == nil || cl.TTLms < s.ShortestLease.Ms {
		s.ShortestLease = &KeyMs{Key: cl.Key, Ms: cl.TTLms}
	}
}

// counted handles a key's read error: a key gone since SCAN is skipped, a
// key whose slot moved is counted as moved, a key of another type as
// foreign (all three skip), other errors end the scan. A key read without
// error is counted in Keys.
func (c *Counts) counted(key string, err error) (skip bool, _ error) {
	switch {
	case err == nil:
		c.Keys++
		return false, nil
	case rueidis.IsRedisNil(err):
		return true, nil
	}
	re, ok := rueidis.IsRedisErr(err)
	if !ok {
		return true, err
	}
	if _, moved := re.IsRedirect(); moved {
		c.Moved++
		return true, nil
	}
	if strings.HasPrefix(re.Error(), "WRONGTYPE") {
		c.Keys++
		c.addForeign(key)
		return true, nil
	}
	return true, err
}

// OutboxStats counts connections and their unacked messages.
type OutboxStats struct {
	Counts
	Connections int `json:"connections"`
	Drained     int `json:"drained"` // connections with no unacked message
	Unacked     int `json:"unacked"`
	// Tails are the longest tails, longest first.
	Tails []Size `json:"largest_tails"`
}

// Size is a tail's length.
type Size struct {
	Key     string `json:"key"`
	Unacked int    `json:"unacked"`
}

// Add reads a batch of outbox keys of one node (HMGET of the reserved
// fields and HLEN per key: payloads are not read) and counts them.
func (s *OutboxStats) Add(ctx context.Context, c rueidis.Client, keys []string) error {
	return s.readHashes(ctx, c, keys, tailReserved, func(key string, fields map[string]string, hlen int) {
		if _, err := DecodeTail(key, fields, -1); err != nil {
			s.addForeign(key)
			return
		}
		s.add(key, hlen-len(fields))
	})
}

func (s *OutboxStats) add(key string, unacked int) {
	s.Connections++
	s.Unacked += unacked
	if unacked == 0 {
		s.Drained++
		return
	}
	s.Tails = append(s.Tails, Size{Key: key, Unacked: unacked})
	sort.SliceStable(s.Tails, func(i, j int) bool { return s.Tails[i].Unacked > s.Tails[j].Unacked })
	if len(s.Tails) > maxExamples {
		s.Tails = s.Tails[:maxExamples]
	}
}

// RecordsStats counts records by status.
type RecordsStats struct {
	Counts
	ByStatus map[string]int `json:"by_status"`
	// LeaseExpired counts pending records whose lease has passed: their
	// owner died or stalled, and the next acquire takes them over.
	LeaseExpired int `json:"pending_lease_expired"`
	// OldestExpired is the pending record whose lease passed longest ago.
	OldestExpired *KeyMs `json:"oldest_expired_lease,omitempty"`
}

// headerMax is the longest record header (times, fence, status, fp, token):
// stats reads no more of a record, never its payload.
const headerMax = 4 + 32 + 1 + 19 + 1 + 64 + 2 + 256 + 2 + 256

// Add reads a batch of records keys of one node and counts them: per key,
// in one pipeline, GETRANGE of a record's header and STRLEN (a key of
// another type answers WRONGTYPE: foreign); and the node's TIME.
func (s *RecordsStats) Add(ctx context.Context, c rueidis.Client, keys []string) error {
	now, err := ServerTime(ctx, c)
	if err != nil {
		return err
	}
	cmds := make(rueidis.Commands, 0, 2*len(keys))
	for _, k := range keys {
		cmds = append(cmds, c.B().Getrange().Key(k).Start(0).End(headerMax-1).Build(), c.B().Strlen().Key(k).Build())
	}
	res := c.DoMulti(ctx, cmds...)
	for i, k := range keys {
		head, err := res[2*i].ToString()
		size, _ := res[2*i+1].AsInt64()
		if err == nil && size == 0 {
			// Gone since SCAN (GETRANGE answers "" for a missing key), or
			// an empty string: neither is a record.
			if n, _ := c.Do(ctx, c.B().Exists().Key(k).Build()).AsInt64(); n == 0 {
				continue
			}
		}
		if skip, err := s.counted(k, err); skip || err != nil {
			if err != nil {
				return err
			}
			continue
		}
		rec, err := DecodeRecordHeader(k, head, int(size))
		if err != nil {
			s.addForeign(k)
			continue
		}
		s.add(rec, now)
	}
	return nil
}

func (s *RecordsStats) add(rec Record, now int64) {
	key := rec.Key
	if s.ByStatus == nil {
		s.ByStatus = map[string]int{}
	}
	s.ByStatus[rec.Status]++
	if rec.Status == Pending && rec.LeaseMs != 0 && rec.LeaseMs <= now {
		s.LeaseExpired++
		if s.OldestExpired == nil || now-rec.LeaseMs > s.OldestExpired.Ms {
			s.OldestExpired = &KeyMs{Key: key, Ms: now - rec.LeaseMs}
		}
	}
}

// readHashes reads names and the length of each hash of keys (HMGET and HLEN
// per key, one pipeline) and calls add with the fields present and the
// length, for each key still there and of the hash type (see counted).
func (cn *Counts) readHashes(ctx context.Context, c rueidis.Client, keys, names []string, add func(key string, fields map[string]string, hlen int)) error {
	cmds := make(rueidis.Commands, 0, 2*len(keys))
	for _, k := range keys {
		cmds = append(cmds, c.B().Hmget().Key(k).Field(names...).Build(), c.B().Hlen().Key(k).Build())
	}
	res := c.DoMulti(ctx, cmds...)
	for i, k := range keys {
		vals, err := res[2*i].ToArray()
		n, _ := res[2*i+1].AsInt64()
		if err == nil && n == 0 {
			continue // gone since SCAN
		}
		if skip, err := cn.counted(k, err); skip || err != nil {
			if err != nil {
				return err
			}
			continue
		}
		fields := map[string]string{}
		for j, name := range names {
			if j < len(vals) {
				if v, err := vals[j].ToString(); err == nil {
					fields[name] = v
				}
			}
		}
		add(k, fields, int(n))
	}
	return nil
}
