package inspect

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/rueidis"
)

// ErrNotFound is a key that does not exist (never written, deleted, or
// expired).
var ErrNotFound = errors.New("not found")

// ReadClaim reads a claims key: TYPE, GET, PTTL in one round trip.
func ReadClaim(ctx context.Context, c rueidis.Client, key string) (Claim, error) {
	res := c.DoMulti(ctx, c.B().Type().Key(key).Build(), c.B().Get().Key(key).Build(), c.B().Pttl().Key(key).Build())
	if err := checkType(res[0], "string", "a claim is a string"); err != nil {
		return Claim{Key: key}, err
	}
	v, err := res[1].ToString()
	if err != nil {
		return Claim{Key: key}, gone(err)
	}
	pttl, err := res[2].AsInt64()
	if err != nil {
		return Claim{Key: key}, err
	}
	return DecodeClaim(key, v, pttl)
}

// ReadTail reads an outbox connection's hash: TYPE, HGETALL, PTTL.
func ReadTail(ctx context.Context, c rueidis.Client, key string) (Tail, error) {
	res := c.DoMulti(ctx, c.B().Type().Key(key).Build(), c.B().Hgetall().Key(key).Build(), c.B().Pttl().Key(key).Build())
	if err := checkType(res[0], "hash", "an outbox tail is a hash"); err != nil {
		return Tail{Key: key}, err
	}
	fields, err := res[1].AsStrMap()
	if err != nil || len(fields) == 0 {
		return Tail{Key: key}, gone(err)
	}
	pttl, err := res[2].AsInt64()
	if err != nil {
		return Tail{Key: key}, err
	}
	return DecodeTail(key, fields, pttl)
}

// ReadRecord reads an idempotency record: TYPE and GET in one round trip.
func ReadRecord(ctx context.Context, c rueidis.Client, key string) (Record, error) {
	res := c.DoMulti(ctx, c.B().Type().Key(key).Build(), c.B().Get().Key(key).Build())
	if err := checkType(res[0], "string", "a record is a string"); err != nil {
		return Record{Key: key}, err
	}
	v, err := res[1].ToString()
	if err != nil {
		return Record{Key: key}, gone(err)
	}
	return DecodeRecordValue(key, v)
}

// ServerTime is the server's clock in ms since the epoch (TIME): the clock
// that expires keys and that the scripts measure leases with.
func ServerTime(ctx context.Context, c rueidis.Client) (int64, error) {
	t, err := c.Do(ctx, c.B().Time().Build()).AsStrSlice()
	if err != nil {
		return 0, err
	}
	if len(t) != 2 {
		return 0, fmt.Errorf("TIME answered %d elements, want 2", len(t))
	}
	sec, err1 := strconv.ParseInt(t[0], 10, 64)
	usec, err2 := strconv.ParseInt(t[1], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("TIME answered %q: %w", t, err)
	}
	return sec*1000 + usec/1000, nil
}

// checkType turns TYPE's reply into ErrNotFound, a Foreign error, or nil.
func checkType(m rueidis.RedisResult, want, why string) error {
	typ, err := m.ToString()
	switch {
	case err != nil:
		return err
	case typ == "none":
		return ErrNotFound
	case typ != want:
		return foreign("the key is a %s: not the store's (%s)", typ, why)
	}
	return nil
}

// gone is ErrNotFound for a key deleted or expired between two commands,
// else err.
func gone(err error) error {
	if err == nil || rueidis.IsRedisNil(err) {
		return ErrNotFound
	}
	return err
}
