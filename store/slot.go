package store

import (
	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce"
)

// maxBatchKeys is the most keys one batch script call (claim_many.lua,
// seen_many.lua) carries. A script blocks the server while it runs, so a call
// is kept to a few hundred keys (about a millisecond of server time: see
// BENCHMARKS.md, "Per operation, 64 goroutines"), and a bigger batch of one
// slot is sent as several calls, in order, in the same round trip. It is also
// the scripts' own limit: a call of more keys is refused (BADARG).
const maxBatchKeys = redisonce.MaxBatchKeys

// keySlot is the Redis Cluster hash slot of key: CRC16-XMODEM of the key, or
// of its hash tag (the bytes between the first "{" and the next "}", when
// there are any), mod 16384. scripts_test checks it against CLUSTER KEYSLOT.
func keySlot(key string) uint16 {
	for s := 0; s < len(key); s++ {
		if key[s] == '{' {
			for e := s + 1; e < len(key); e++ {
				if key[e] == '}' {
					if e > s+1 {
						key = key[s+1 : e]
					}
					return crc16(key) & 16383
				}
			}
			break
		}
	}
	return crc16(key) & 16383
}

// crc16 is CRC16-XMODEM (polynomial 0x1021, initial value 0), as Redis Cluster
// uses it.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc = crc<<8 ^ crc16Table[byte(crc>>8)^s[i]]
	}
	return crc
}

var crc16Table = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()

// sameSlot reports whether every key hashes to one slot.
func sameSlot(keys []string) bool {
	first := keySlot(keys[0])
	for _, k := range keys[1:] {
		if keySlot(k) != first {
			return false
		}
	}
	return true
}

// slotGroups splits the indexes 0..len(keys)-1 into the groups a batch script
// call may take: on a cluster one group per hash slot, each in the order of
// keys, the groups in the order of their first key; on a standalone or Sentinel
// server every key in one group. A group over maxBatchKeys is cut in order into
// several. The calls of one slot are not guaranteed to run in order (on a
// cluster a call held on TRYAGAIN is retried after the others ran), so the
// batches resolve repeated ids before grouping (firstOccurrences): no key is
// in two calls.
func slotGroups(c rueidis.Client, keys []string) [][]int {
	var groups [][]int
	if c.Mode() != rueidis.ClientModeCluster {
		all := make([]int, len(keys))
		for i := range all {
			all[i] = i
		}
		groups = [][]int{all}
	} else {
		at := make(map[uint16]int, 8) // slot -> index in groups
		for i, k := range keys {
			sl := keySlot(k)
			g, ok := at[sl]
			if !ok {
				g = len(groups)
				at[sl] = g
				groups = append(groups, nil)
			}
			groups[g] = append(groups[g], i)
		}
	}
	var out [][]int
	for _, g := range groups {
		for len(g) > maxBatchKeys {
			out = append(out, g[:maxBatchKeys:maxBatchKeys])
			g = g[maxBatchKeys:]
		}
		out = append(out, g)
	}
	return out
}
