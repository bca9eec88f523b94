package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/internal/recordlayout"
	"github.com/redisonce/redisonce/store"
)

// The records workloads: a fresh key per Acquire (the create path) with a
// 30-second lease, a 32-character fingerprint and a one-hour TTL; a fenced
// Update storing "completed" and a 256-byte result on one of 10000 pending
// records.
const (
	recordPrefix = "idempotency:"
	recordTTL    = time.Hour
	recordLease  = 30 * time.Second
	recordFP     = "3f7a1c0e9b2d4f6a8c0e2b4d6f8a0c1e"
	updateKeys   = 10_000
	updateToken  = "0123456789abcdef0123456789abcdef"
)

var recordResult = make([]byte, 256)

// sameAcquire issues the same Redis commands as acquire.lua on its create path
// (GET, TIME, SET PXAT of the layout-1 string), without its checks.
const sameAcquire = `local key = KEYS[1]
if redis.call('GET', key) then
  return {0}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expires = now + tonumber(ARGV[1])
local lease = now + tonumber(ARGV[4])
redis.call('SET', key, struct.pack('>c4ddddBc0Bc0Hc0Hc0', 'ro1 ', now, now, expires, lease, 1, '1',
  7, 'pending', #ARGV[3], ARGV[3], #ARGV[2], ARGV[2]), 'PXAT', expires)
return {1, 'pending', '', now, now, expires, lease, '1', ARGV[3], ARGV[2]}`

// sameUpdate issues the same Redis commands as update.lua on its common path
// (GET, TIME, SET KEEPTTL of the record rewritten), without its checks.
// ARGV: token, status, payload.
const sameUpdate = `local key = KEYS[1]
local v = redis.call('GET', key)
if not v then
  return redis.error_reply('NOT_FOUND')
end
local _, c, u, e, l, f, s, fp, tok = struct.unpack('>c4ddddBc0Bc0Hc0Hc0', v)
if ARGV[1] ~= tok then
  return redis.error_reply('STALE_OWNER')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('SET', key, struct.pack('>c4ddddBc0Bc0Hc0Hc0', 'ro1 ', c, now, e, 0, #f, f, #ARGV[2], ARGV[2],
  #fp, fp, #tok, tok) .. ARGV[3], 'KEEPTTL')
return 1`

// sameReplay issues the same Redis commands as acquire.lua on a completed
// record (one GET), and its reply, without its checks.
const sameReplay = `local v = redis.call('GET', KEYS[1])
local _, c, u, e, l, f, s, fp, tok, pos = struct.unpack('>c4ddddBc0Bc0Hc0Hc0', v)
return {0, s, string.sub(v, pos), c, u, e, l, f, fp, ''}`

// newID mints a token or message id the way the stores do: 16 bytes of
// crypto/rand in hex.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func wantArrayLen(r rueidis.RedisResult, n int) error {
	a, err := r.ToArray()
	if err == nil && len(a) != n {
		err = fmt.Errorf("reply of %d elements, want %d", len(a), n)
	}
	return err
}

func opAcquire() *operation {
	ttl, lease := strconv.FormatInt(recordTTL.Milliseconds(), 10), strconv.FormatInt(recordLease.Milliseconds(), 10)
	return &operation{
		name:  "Acquire",
		batch: 1,
		about: "acquire a fresh key (create path): 30s lease, 32-byte fingerprint, TTL 1h",
		variants: []variant{
			{name: "redisonce Records.AcquireWith", role: roleStore, setup: func(_ context.Context, e *env, rc rueidis.Client) (callFunc, error) {
				s := mustStore(store.NewRecords(rc))
				o := store.AcquireOptions{TTL: recordTTL, Lease: recordLease, Fingerprint: recordFP}
				return func(ctx context.Context, i int) error {
					_, ok, err := s.AcquireWith(ctx, e.ids[i], o)
					if err == nil && !ok {
						err = errNotCreated
					}
					return err
				}, nil
			}},
			{name: "rueidis Lua.Exec same commands", role: roleMinimal, setup: func(_ context.Context, e *env, rc rueidis.Client) (callFunc, error) {
				lua := rueidis.NewLuaScript(sameAcquire)
				return func(ctx context.Context, i int) error {
					return wantArrayLen(lua.Exec(ctx, rc, []string{recordPrefix + e.ids[i]}, []string{ttl, newID(), recordFP, lease}), 10)
				}, nil
			}},
			{name: "go-redis Script.Run same commands", role: roleOther, setup: func(_ context.Context, e *env, _ rueidis.Client) (callFunc, error) {
				script := redis.NewScript(sameAcquire)
				return func(ctx context.Context, i int) error {
					a, err := script.Run(ctx, e.gr, []string{recordPrefix + e.ids[i]}, ttl, newID(), recordFP, lease).Slice()
					if err == nil && len(a) != 10 {
						err = fmt.Errorf("reply of %d elements, want 10", len(a))
					}
					return err
				}, nil
			}},
		},
	}
}

var updateKeyNames = names("u", updateKeys)

func updateKey(i int) string { return updateKeyNames[i%updateKeys] }

// seedRecords writes updateKeys pending records owned by updateToken, laid
// out as the scripts write them (layout 1).
func seedRecords(ctx context.Context, e *env) error {
	return seedRecordsAs(ctx, e, "pending", nil)
}

// seedRecordsAs writes updateKeys records of status with payload, owned by
// updateToken.
func seedRecordsAs(ctx context.Context, e *env, status string, payload []byte) error {
	now := time.Now().UnixMilli()
	lease := time.Now().Add(time.Hour).UnixMilli()
	if status != "pending" {
		lease = 0
	}
	v := rueidis.BinaryString(recordlayout.Encode(recordlayout.Fields{Status: status, Payload: string(payload),
		CreatedMS: now, UpdatedMS: now, LeaseMS: lease, Fence: "1", Token: updateToken}))
	cmds := make(rueidis.Commands, 0, updateKeys)
	for i := 0; i < updateKeys; i++ {
		cmds = append(cmds, e.admin.B().Set().Key(recordPrefix+updateKey(i)).Value(v).Build())
	}
	for _, r := range e.admin.DoMulti(ctx, cmds...) {
		if err := r.Error(); err != nil {
			return err
		}
	}
	return nil
}

func opUpdate() *operation {
	keys := make([]string, updateKeys)
	for i := range keys {
		keys[i] = recordPrefix + updateKey(i)
	}
	return &operation{
		name:  "Update",
		batch: 1,
		about: "fenced update of a pending record to completed with a 256-byte result (10000 records)",
		seed:  seedRecords,
		reuse: true,
		variants: []variant{
			{name: "redisonce Records.Update", role: roleStore, setup: func(_ context.Context, e *env, rc rueidis.Client) (callFunc, error) {
				s := mustStore(store.NewRecords(rc))
				status := store.StatusCompleted
				payload := recordResult
				return func(ctx context.Context, i int) error {
					return s.Update(ctx, updateKey(i), store.Update{Status: &status, Payload: &payload, Token: updateToken})
				}, nil
			}},
			{name: "rueidis Lua.Exec same commands", role: roleMinimal, setup: func(_ context.Context, e *env, rc rueidis.Client) (callFunc, error) {
				lua := rueidis.NewLuaScript(sameUpdate)
				return func(ctx context.Context, i int) error {
					return wantInt(lua.Exec(ctx, rc, []string{keys[i%updateKeys]},
						[]string{updateToken, string(store.StatusCompleted), rueidis.BinaryString(recordResult)}), 1)
				}, nil
			}},
			{name: "rueidis SET KEEPTTL (unfenced)", role: roleRaw, setup: func(_ context.Context, e *env, rc rueidis.Client) (callFunc, error) {
				now := time.Now().UnixMilli()
				v := rueidis.BinaryString(recordlayout.Encode(recordlayout.Fields{Status: string(store.StatusCompleted), Payload: string(recordResult),
					CreatedMS: now, UpdatedMS: now, Fence: "1", Token: updateToken}))
				return func(ctx context.Context, i int) error {
					return rc.Do(ctx, rc.B().Set().Key(keys[i%updateKeys]).Value(v).Keepttl().Build()).Error()
				}, nil
			}},
			{name: "go-redis Script.Run same commands", role: roleOther, setup: func(_ context.Context, e *env, _ rueidis.Client) (callFunc, error) {
				script := redis.NewScript(sameUpdate)
				return func(ctx context.Context, i int) error {
					n, err := script.Run(ctx, e.gr, []string{keys[i%updateKeys]}, updateToken, string(store.StatusCompleted), recordResult).Int64()
					if err == nil && n != 1 {
						err = fmt.Errorf("reply %d, want 1", n)
					}
					return err
				}, nil
			}},
		},
	}
}

// opRecordsDo is Records.Do on a fresh key: acquire.lua, then (fn returns at
// once) update.lua storing completed and a 256-byte result; the minimal side
// runs sameAcquire and sameUpdate, the same commands without the checks.
func opRecordsDo() *operation {
	ttl, lease := strconv.FormatInt(recordTTL.Milliseconds(), 10), strconv.FormatInt(recordLease.Milliseconds(), 10)
	return &operation{
		name:  "RecordsDo",
		batch: 1,
		about: "Records.Do on a fresh key (acquire, fn returns a 256-byte result, final write): 30s lease, 32-byte fingerprint, TTL 1h",
		variants: []variant{
			{name: "redisonce Records.Do", role: roleStore, setup: func(_ context.Context, e *env, rc rueidis.Client) (callFunc, error) {
				s := mustStore(store.NewRecords(rc))
				o := store.AcquireOptions{TTL: recordTTL, Lease: recordLease, Fingerprint: recordFP}
				fn := func(context.Context) ([]byte, error) { return recordResult, nil }
				return func(ctx context.Context, i int) error {
					_, replayed, err := s.Do(ctx, e.ids[i], o, fn)
					if err == nil && replayed {
						err = errNotCreated
					}
					return err
				}, nil
			}},
			{name: "rueidis Lua.Exec same commands (2 scripts)", role: roleMinimal, setup: func(_ context.Context, e *env, rc rueidis.Client) (callFunc, error) {
				acq, upd := rueidis.NewLuaScript(sameAcquire), rueidis.NewLuaScript(sameUpdate)
				return func(ctx context.Context, i int) error {
					key, tok := []string{recordPrefix + e.ids[i]}, newID()
					if err := wantArrayLen(acq.Exec(ctx, rc, key, []string{ttl, tok, recordFP, lease}), 10); err != nil {
						return err
					}
					return wantInt(upd.Exec(ctx, rc, key, []string{tok, string(store.StatusCompleted), rueidis.BinaryString(recordResult)}), 1)
				}, nil
			}},
		},
	}
}

// opReplay is the duplicate's Records.Do on a completed record: acquire.lua
// answers it (one GET), fn does not run.
func opReplay() *operation {
	return &operation{
		name:  "Replay",
		batch: 1,
		about: "Records.Do of a duplicate: the record is completed with a 256-byte result, replayed (10000 records)",
		seed:  func(ctx context.Context, e *env) error { return seedRecordsAs(ctx, e, "completed", recordResult) },
		reuse: true,
		variants: []variant{
			{name: "redisonce Records.Do (replayed)", role: roleStore, setup: func(_ context.Context, e *env, rc rueidis.Client) (callFunc, error) {
				s := mustStore(store.NewRecords(rc))
				o := store.AcquireOptions{TTL: recordTTL, Lease: recordLease}
				fn := func(context.Context) ([]byte, error) { return nil, errors.New("fn ran on a completed record") }
				return func(ctx context.Context, i int) error {
					p, replayed, err := s.Do(ctx, updateKey(i), o, fn)
					if err == nil && (!replayed || len(p) != len(recordResult)) {
						err = fmt.Errorf("replayed %v, %d bytes", replayed, len(p))
					}
					return err
				}, nil
			}},
			{name: "rueidis Lua.Exec same commands", role: roleMinimal, setup: func(_ context.Context, e *env, rc rueidis.Client) (callFunc, error) {
				lua := rueidis.NewLuaScript(sameReplay)
				return func(ctx context.Context, i int) error {
					return wantArrayLen(lua.Exec(ctx, rc, []string{recordPrefix + updateKey(i)}, []string{strconv.FormatInt(recordTTL.Milliseconds(), 10), newID(), "", "30000"}), 10)
				}, nil
			}},
		},
	}
}

func wantInt(r rueidis.RedisResult, n int64) error {
	v, err := r.AsInt64()
	if err == nil && v != n {
		err = fmt.Errorf("reply %d, want %d", v, n)
	}
	return err
}
