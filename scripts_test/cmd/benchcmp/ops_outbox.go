package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/store"
)

// The outbox workloads: 128-byte payloads (a small gateway frame), a one-hour
// TTL, no WithMaxUnacked (the default).
const (
	outboxPrefix = "gateway:outbox:"
	outboxTTL    = time.Hour
	outboxTTLms  = "3600000"
	// appendConns is how many connections the appends spread over.
	appendConns = 1024
	// ackPerConn is how many consecutive ids of the pool share a connection:
	// an AckMany batch is always one connection's.
	ackPerConn = batchSize
	// ackConns is how many connections the seeded messages spread over.
	ackConns = 256
	// ackPool is how many messages an Ack cell seeds: enough for its window.
	ackPool = 100_000
	// tailConns is how many 1000-message tails the Unacked cells read.
	tailConns = 16
	tailLen   = 1000
	// seedEpoch is the _epoch of seeded connections (µs since the Unix epoch).
	seedEpoch = "1764000000000000"
)

var outboxPayload = make([]byte, 128)

// minimalAppend is the least a script appending to an outbox must do:
// number the message and store it, and re-arm the TTL (no idempotency, no
// epoch, no bound).
const minimalAppend = `local seq = redis.call('HINCRBY', KEYS[1], '_seq', 1)
redis.call('HSET', KEYS[1], ARGV[1], seq .. ':' .. ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return seq`

// sameAppend issues the same Redis commands as append.lua on its common path
// (an existing connection, a new id), without append.lua's checks.
const sameAppend = `local key = KEYS[1]
local r = redis.call('HMGET', key, '_seq', '_gen', '_epoch', ARGV[1])
if not r[3] then
  local t = redis.call('TIME')
  r[3] = t[1] .. string.format('%06d', tonumber(t[2]))
  redis.call('HSET', key, '_gen', '0', '_epoch', r[3])
end
local seq = redis.call('HINCRBY', key, '_seq', 1)
redis.call('HSET', key, ARGV[1], seq .. ':' .. ARGV[2])
redis.call('PEXPIRE', key, ARGV[3])
return {seq, tonumber(r[3]), 1}`

// minimalAck is a fenced single ack: read the floor, compare, delete.
const minimalAck = `local floor = redis.call('HGET', KEYS[1], '_gen')
if floor and tonumber(ARGV[1]) < tonumber(floor) then
  return redis.error_reply('STALE_OWNER')
end
return redis.call('HDEL', KEYS[1], ARGV[2])`

// minimalAckMany is minimalAck for every id after ARGV[1], in one HDEL.
const minimalAckMany = `local floor = redis.call('HGET', KEYS[1], '_gen')
if floor and tonumber(ARGV[1]) < tonumber(floor) then
  return redis.error_reply('STALE_OWNER')
end
return redis.call('HDEL', KEYS[1], unpack(ARGV, 2))`

// minimalUnacked is the read the Unacked script does.
const minimalUnacked = `return redis.call('HGETALL', KEYS[1])`

var errNotAcked = errors.New("ack removed nothing")

// Connection names, built once so the calls allocate nothing of the
// harness's own.
var (
	appendConnNames = names("c", appendConns)
	ackConnNames    = names("a", ackConns)
	ackConnKeys     = names(outboxPrefix+"a", ackConns)
	tailConnNames   = names("t", tailConns)
)

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strconv.Itoa(i)
	}
	return out
}

func appendConn(i int) string { return appendConnNames[i%appendConns] }

func opAppend() *operation {
	conns := make([]string, appendConns)
	for i := range conns {
		conns[i] = outboxPrefix + appendConn(i)
	}
	return &operation{
		name:  "Append",
		batch: 1,
		about: "append a 128-byte payload to one of 1024 connections (id minted per call), TTL 1h",
		reuse: true,
		variants: []variant{
			{name: "redisonce Outbox.Append", role: roleStore, setup: func(_ context.Context, e *env, rc rueidis.Client) (callFunc, error) {
				ob := mustStore(store.NewOutbox(rc, store.WithTTL(outboxTTL)))
				return func(ctx context.Context, i int) error {
					_, _, err := ob.Append(ctx, appendConn(i), outboxPayload)
					return err
				}, nil
			}},
			{name: "rueidis Lua.Exec same commands", role: roleMinimal, setup: func(_ context.Context, e *env, rc rueidis.Client) (callFunc, error) {
				lua := rueidis.NewLuaScript(sameAppend)
				return func(ctx context.Context, i int) error {
					return lua.Exec(ctx, rc, []string{conns[i%appendConns]},
						[]string{newID(), rueidis.BinaryString(outboxPayload), outboxTTLms}).Error()
				}, nil
			}},
			{name: "rueidis Lua.Exec HINCRBY+HSET+PEXPIRE", role: roleOther, setup: func(_ context.Context, e *env, rc rueidis.Client) (callFunc, error) {
				lua := rueidis.NewLuaScript(minimalAppend)
				return func(ctx context.Context, i int) error {
					return lua.Exec(ctx, rc, []string{conns[i%appendConns]},
						[]string{newID(), rueidis.BinaryString(outboxPayload), outboxTTLms}).Error()
				}, nil
			}},
			{name: "go-redis Script.Run HINCRBY+HSET+PEXPIRE", role: roleOther, setup: func(_ context.Context, e *env, _ rueidis.Client) (callFunc, error) {
				script := redis.NewScript(minimalAppend)
				return func(ctx context.Context, i int) error {
					return script.Run(ctx, e.gr, []string{conns[i%appendConns]}, newID(), outboxPayload, outboxTTL.Milliseconds()).Err()
				}, nil
			}},
		},
	}
}

// ackConn is the connection of pool id i.
func ackConn(i int) string { return ackConnNames[(i/ackPerConn)%ackConns] }

// ackKey is the key of ackConn(i).
func ackKey(i int) string { return ackConnKeys[(i/ackPerConn)%ackConns] }

// seedAcks writes ackPool messages, id i under ackConn(i), generation floor 1,
// the way append.lua lays them out.
func seedAcks(ctx context.Context, e *env) error {
	n := min(ackPool, len(e.ids))
	var cmds rueidis.Commands
	for c := 0; c < ackConns; c++ {
		cmds = append(cmds, e.admin.B().Hset().Key(outboxPrefix+"a"+strconv.Itoa(c)).FieldValue().
			FieldValue("_seq", strconv.Itoa(n)).FieldValue("_gen", "1").FieldValue("_epoch", seedEpoch).Build())
	}
	for lo := 0; lo < n; lo += ackPerConn {
		fv := e.admin.B().Hset().Key(outboxPrefix + ackConn(lo)).FieldValue()
		for i := lo; i < min(lo+ackPerConn, n); i++ {
			fv = fv.FieldValue(e.ids[i], strconv.Itoa(i+1)+":"+string(outboxPayload))
		}
		cmds = append(cmds, fv.Build())
	}
	for _, r := range e.admin.DoMulti(ctx, cmds...) {
		if err := r.Error(); err != nil {
			return err
		}
	}
	return nil
}

func opAck() *operation {
	return &operation{
		name:  "Ack",
		batch: 1,
		about: "ack one unacked message (generation equal to the floor) of one of 256 connections",
		seed:  seedAcks,
		pool:  ackPool,
		variants: []variant{
			{name: "redisonce Outbox.Ack", role: roleStore, setup: func(_ context.Context, e *env, rc rueidis.Client) (callFunc, error) {
				ob := mustStore(store.NewOutbox(rc, store.WithTTL(outboxTTL)))
				return func(ctx context.Context, i int) error {
					return ob.Ack(ctx, ackConn(i), e.ids[i], 1)
				}, nil
			}},
			{name: "rueidis Lua.Exec minimal (HGET+HDEL)", role: roleMinimal, setup: func(_ context.Context, e *env, rc rueidis.Client) (callFunc, error) {
				lua := rueidis.NewLuaScript(minimalAck)
				return func(ctx context.Context, i int) error {
					return wantOne(lua.Exec(ctx, rc, []string{ackKey(i)}, []string{"1", e.ids[i]}))
				}, nil
			}},
			{name: "rueidis HDEL (unfenced)", role: roleRaw, setup: func(_ context.Context, e *env, rc rueidis.Client) (callFunc, error) {
				return func(ctx context.Context, i int) error {
					return wantOne(rc.Do(ctx, rc.B().Hdel().Key(ackKey(i)).Field(e.ids[i]).Build()))
				}, nil
			}},
			{name: "go-redis Script.Run minimal (HGET+HDEL)", role: roleOther, setup: func(_ context.Context, e *env, _ rueidis.Client) (callFunc, error) {
				script := redis.NewScript(minimalAck)
				return func(ctx context.Context, i int) error {
					n, err := script.Run(ctx, e.gr, []string{ackKey(i)}, 1, e.ids[i]).Int64()
					if err == nil && n != 1 {
						err = errNotAcked
					}
					return err
				}, nil
			}},
		},
	}
}

func opAckMany() *operation {
	return &operation{
		name:  "AckMany",
		batch: batchSize,
		about: "ack 100 unacked messages of one connection in one call; ops = messages",
		seed:  seedAcks,
		pool:  ackPool,
		variants: []variant{
			{name: "redisonce Outbox.AckMany", role: roleStore, setup: func(_ context.Context, e *env, rc rueidis.Client) (callFunc, error) {
				ob := mustStore(store.NewOutbox(rc, store.WithTTL(outboxTTL)))
				return func(ctx context.Context, first int) error {
					n, err := ob.AckMany(ctx, ackConn(first), e.ids[first:first+batchSize], 1)
					if err == nil && n != batchSize {
						err = fmt.Errorf("acked %d of %d", n, batchSize)
					}
					return err
				}, nil
			}},
			{name: "rueidis DoMulti 100 EVALSHA minimal", role: roleMinimal, setup: func(ctx context.Context, e *env, rc rueidis.Client) (callFunc, error) {
				sha, err := rc.Do(ctx, rc.B().ScriptLoad().Script(minimalAck).Build()).ToString()
				if err != nil {
					return nil, err
				}
				return func(ctx context.Context, first int) error {
					key := ackKey(first)
					cmds := make(rueidis.Commands, 0, batchSize)
					for _, id := range e.ids[first : first+batchSize] {
						cmds = append(cmds, rc.B().Evalsha().Sha1(sha).Numkeys(1).Key(key).Arg("1", id).Build())
					}
					for _, r := range rc.DoMulti(ctx, cmds...) {
						if err := wantOne(r); err != nil {
							return err
						}
					}
					return nil
				}, nil
			}},
			{name: "rueidis Lua.Exec minimal, 100 ids", role: roleOther, setup: func(_ context.Context, e *env, rc rueidis.Client) (callFunc, error) {
				lua := rueidis.NewLuaScript(minimalAckMany)
				return func(ctx context.Context, first int) error {
					args := make([]string, 0, 1+batchSize)
					args = append(args, "1")
					args = append(args, e.ids[first:first+batchSize]...)
					n, err := lua.Exec(ctx, rc, []string{ackKey(first)}, args).AsInt64()
					if err == nil && n != batchSize {
						err = fmt.Errorf("acked %d of %d", n, batchSize)
					}
					return err
				}, nil
			}},
			{name: "rueidis HDEL 100 fields (unfenced)", role: roleRaw, setup: func(_ context.Context, e *env, rc rueidis.Client) (callFunc, error) {
				return func(ctx context.Context, first int) error {
					n, err := rc.Do(ctx, rc.B().Hdel().Key(ackKey(first)).Field(e.ids[first:first+batchSize]...).Build()).AsInt64()
					if err == nil && n != batchSize {
						err = fmt.Errorf("acked %d of %d", n, batchSize)
					}
					return err
				}, nil
			}},
		},
	}
}

// seedTails writes tailConns connections of tailLen 128-byte messages each.
func seedTails(ctx context.Context, e *env) error {
	var cmds rueidis.Commands
	for c := 0; c < tailConns; c++ {
		fv := e.admin.B().Hset().Key(outboxPrefix+"t"+strconv.Itoa(c)).FieldValue().
			FieldValue("_seq", strconv.Itoa(tailLen)).FieldValue("_gen", "1").FieldValue("_epoch", seedEpoch)
		for i := 0; i < tailLen; i++ {
			fv = fv.FieldValue(e.ids[c*tailLen+i], strconv.Itoa(i+1)+":"+string(outboxPayload))
		}
		cmds = append(cmds, fv.Build())
	}
	for _, r := range e.admin.DoMulti(ctx, cmds...) {
		if err := r.Error(); err != nil {
			return err
		}
	}
	return nil
}

func tailConn(i int) string { return tailConnNames[i%tailConns] }

func opUnacked() *operation {
	conns := make([]string, tailConns)
	for i := range conns {
		conns[i] = outboxPrefix + tailConn(i)
	}
	wantLen := func(n int) error {
		if n != tailLen {
			return fmt.Errorf("tail of %d, want %d", n, tailLen)
		}
		return nil
	}
	return &operation{
		name:  "Unacked",
		batch: 1,
		about: "read (and sort) a connection's tail of 1000 messages of 128 bytes",
		seed:  seedTails,
		reuse: true,
		variants: []variant{
			{name: "redisonce Outbox.Unacked", role: roleStore, setup: func(_ context.Context, e *env, rc rueidis.Client) (callFunc, error) {
				ob := mustStore(store.NewOutbox(rc))
				return func(ctx context.Context, i int) error {
					m, err := ob.Unacked(ctx, tailConn(i))
					if err != nil {
						return err
					}
					return wantLen(len(m))
				}, nil
			}},
			{name: "rueidis Lua.Exec HGETALL (EVALSHA_RO)", role: roleMinimal, setup: func(_ context.Context, e *env, rc rueidis.Client) (callFunc, error) {
				lua := rueidis.NewLuaScriptReadOnly(minimalUnacked)
				return func(ctx context.Context, i int) error {
					a, err := lua.Exec(ctx, rc, []string{conns[i%tailConns]}, nil).ToArray()
					if err != nil {
						return err
					}
					return wantLen(len(a)/2 - 3)
				}, nil
			}},
			{name: "rueidis HGETALL", role: roleRaw, setup: func(_ context.Context, e *env, rc rueidis.Client) (callFunc, error) {
				return func(ctx context.Context, i int) error {
					m, err := rc.Do(ctx, rc.B().Hgetall().Key(conns[i%tailConns]).Build()).AsStrMap()
					if err != nil {
						return err
					}
					return wantLen(len(m) - 3)
				}, nil
			}},
			{name: "go-redis HGetAll", role: roleOther, setup: func(_ context.Context, e *env, _ rueidis.Client) (callFunc, error) {
				return func(ctx context.Context, i int) error {
					m, err := e.gr.HGetAll(ctx, conns[i%tailConns]).Result()
					if err != nil {
						return err
					}
					return wantLen(len(m) - 3)
				}, nil
			}},
		},
	}
}

// wantOne checks an integer reply of 1 (one message removed).
func wantOne(r rueidis.RedisResult) error {
	n, err := r.AsInt64()
	if err == nil && n != 1 {
		err = errNotAcked
	}
	return err
}

func opAppendMany() *operation {
	return &operation{
		name:  "AppendMany",
		batch: batchSize,
		about: "append a burst of 100 messages (128-byte payloads, ids from the pool) to one of 1024 connections, TTL 1h; ops = messages",
		variants: []variant{
			{name: "redisonce Outbox.AppendMany", role: roleStore, setup: func(_ context.Context, e *env, rc rueidis.Client) (callFunc, error) {
				ob := mustStore(store.NewOutbox(rc, store.WithTTL(outboxTTL)))
				return func(ctx context.Context, first int) error {
					msgs := make([]store.Outgoing, batchSize)
					for j := range msgs {
						msgs[j] = store.Outgoing{ID: e.ids[first+j], Payload: outboxPayload}
					}
					out, err := ob.AppendMany(ctx, appendConn(first/batchSize), msgs)
					if err != nil {
						return err
					}
					for _, a := range out {
						if !a.Created {
							return errors.New("a message was not created")
						}
					}
					return nil
				}, nil
			}},
			{name: "rueidis DoMulti of 100 EVALSHA append.lua (100 pipelined AppendWithID)", role: rolePrevious, setup: func(ctx context.Context, e *env, rc rueidis.Client) (callFunc, error) {
				if err := loadScripts(ctx, rc); err != nil {
					return nil, err
				}
				sha := scriptSHA("append")
				payload := string(outboxPayload)
				return func(ctx context.Context, first int) error {
					key := outboxPrefix + appendConn(first/batchSize)
					cmds := make(rueidis.Commands, 0, batchSize)
					for _, id := range e.ids[first : first+batchSize] {
						cmds = append(cmds, rc.B().Evalsha().Sha1(sha).Numkeys(1).Key(key).Arg(id, payload, outboxTTLms, "0").Build())
					}
					for _, r := range rc.DoMulti(ctx, cmds...) {
						if err := wantArrayLen(r, 3); err != nil {
							return err
						}
					}
					return nil
				}, nil
			}},
		},
	}
}
