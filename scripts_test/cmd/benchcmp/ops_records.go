package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/store"
)

// The records workloads: a fresh key per Acquire (the create path) with a
// 30-second lease, a 32-character fingerprint and a one-hour TTL; a fenced
// Update storing "completed" and a 256-byte result on one of 10000 pending
// records.
const (
	recordPrefix = store.DefaultRecordsPrefix
	recordTTL    = time.Hour
	recordLease  = 30 * time.Second
	recordFP     = "3f7a1c0e9b2d4f6a8c0e2b4d6f8a0c1e"
	updateKeys   = 10_000
	updateToken  = "0123456789abcdef0123456789abcdef"
)

var recordResult = make([]byte, 256)

// sameAcquire issues the same Redis commands as acquire.lua on its create path
// (TYPE, TIME, HSET of the 9 fields, PEXPIREAT), without its checks.
const sameAcquire = `local key = KEYS[1]
if redis.call('TYPE', key)['ok'] ~= 'none' then
  return {0}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expires = now + tonumber(ARGV[1])
local lease = now + tonumber(ARGV[4])
redis.call('HSET', key, 'status', 'pending', 'payload', '', 'created_ms', now,
  'updated_ms', now, 'expires_ms', expires, 'lease_ms', lease, 'fence', '1',
  'fp', ARGV[3], 'token', ARGV[2])
redis.call('PEXPIREAT', key, expires)
return {1, 'pending', '', now, now, expires, lease, '1', ARGV[3], ARGV[2]}`

// sameUpdate issues the same Redis commands as update.lua on its common path
// (HMGET of the 9 fields, TIME, HSET of 5 fields), without its checks.
// ARGV: token, status, payload.
const sameUpdate = `local key = KEYS[1]
local r = redis.call('HMGET', key, 'status', 'payload', 'created_ms', 'updated_ms',
  'expires_ms', 'lease_ms', 'fence', 'fp', 'token')
if not r[1] then
  return redis.error_reply('NOT_FOUND')
end
if ARGV[1] ~= r[9] then
  return redis.error_reply('STALE_OWNER')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', key, 'status', ARGV[2], 'payload', ARGV[3], 'updated_ms', now,
  'expires_ms', r[5], 'lease_ms', '0')
return {ARGV[2], ARGV[3], r[3], now, r[5], '0', r[7], r[8], ARGV[1]}`

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
				s := store.NewRecords(rc)
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

// seedRecords writes updateKeys pending records owned by updateToken.
func seedRecords(ctx context.Context, e *env) error {
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	lease := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)
	cmds := make(rueidis.Commands, 0, updateKeys)
	for i := 0; i < updateKeys; i++ {
		cmds = append(cmds, e.admin.B().Hset().Key(recordPrefix+updateKey(i)).FieldValue().
			FieldValue("status", "pending").FieldValue("payload", "").FieldValue("created_ms", now).
			FieldValue("updated_ms", now).FieldValue("expires_ms", "0").FieldValue("lease_ms", lease).
			FieldValue("fence", "1").FieldValue("fp", "").FieldValue("token", updateToken).Build())
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
				s := store.NewRecords(rc)
				status := store.StatusCompleted
				payload := recordResult
				return func(ctx context.Context, i int) error {
					return s.Update(ctx, updateKey(i), store.Update{Status: &status, Payload: &payload, Token: updateToken})
				}, nil
			}},
			{name: "rueidis Lua.Exec same commands", role: roleMinimal, setup: func(_ context.Context, e *env, rc rueidis.Client) (callFunc, error) {
				lua := rueidis.NewLuaScript(sameUpdate)
				return func(ctx context.Context, i int) error {
					return wantArrayLen(lua.Exec(ctx, rc, []string{keys[i%updateKeys]},
						[]string{updateToken, string(store.StatusCompleted), rueidis.BinaryString(recordResult)}), 9)
				}, nil
			}},
			{name: "rueidis HSET (unfenced)", role: roleRaw, setup: func(_ context.Context, e *env, rc rueidis.Client) (callFunc, error) {
				return func(ctx context.Context, i int) error {
					return rc.Do(ctx, rc.B().Hset().Key(keys[i%updateKeys]).FieldValue().FieldValue("status", string(store.StatusCompleted)).
						FieldValue("payload", rueidis.BinaryString(recordResult)).FieldValue("lease_ms", "0").Build()).Error()
				}, nil
			}},
			{name: "go-redis Script.Run same commands", role: roleOther, setup: func(_ context.Context, e *env, _ rueidis.Client) (callFunc, error) {
				script := redis.NewScript(sameUpdate)
				return func(ctx context.Context, i int) error {
					a, err := script.Run(ctx, e.gr, []string{keys[i%updateKeys]}, updateToken, string(store.StatusCompleted), recordResult).Slice()
					if err == nil && len(a) != 9 {
						err = fmt.Errorf("reply of %d elements, want 9", len(a))
					}
					return err
				}, nil
			}},
		},
	}
}
