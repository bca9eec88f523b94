package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"

	"github.com/redisonce/redisonce"
)

// MaxIDLen is the longest message id, connection id or record key accepted, in
// bytes (1 KiB). Ids may hold any bytes, NUL, "{", "}" and ":" included; the key
// is exactly prefix + id.
const MaxIDLen = 1024

// maxPrefixLen is the longest key prefix accepted (WithPrefix), in bytes:
// with an id of at most MaxIDLen, every key fits the 1..redisonce.MaxKeyLen
// bytes the scripts accept.
const maxPrefixLen = redisonce.MaxKeyLen - MaxIDLen

// checkCtx refuses a nil context (ErrInvalidArgument) and returns a done
// one's error, before anything is sent.
func checkCtx(ctx context.Context, op, id string) error {
	if ctx == nil {
		return errorf(op, id, ErrInvalidArgument, "nil context")
	}
	if err := ctx.Err(); err != nil {
		return opError(op, id, err)
	}
	return nil
}

// checkID validates an id and the context before anything is sent.
func checkID(ctx context.Context, op, id string) error {
	if err := checkCtx(ctx, op, id); err != nil {
		return err
	}
	if id == "" {
		return errorf(op, id, ErrInvalidArgument, "empty id")
	}
	if len(id) > MaxIDLen {
		return errorf(op, id[:32]+"...", ErrInvalidArgument, "id is %d bytes, the limit is %d", len(id), MaxIDLen)
	}
	return nil
}

// newToken returns 32 lower-case hex characters from crypto/rand.
func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go >= 1.24)
	return hex.EncodeToString(b[:])
}
