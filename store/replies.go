package store

import (
	"fmt"
	"strconv"

	"github.com/redis/rueidis"
)

// The reply helpers every Redis store parses with: each checks the reply's
// type and shape and answers ErrUnexpectedReply (or the script's error mapped
// by opError), never a panic. store/replies_test.go feeds them malformed replies.

// replyInt reads an integer reply, mapping script errors to sentinels. A
// write that its replicas did not confirm returns its integer with
// ErrNotReplicated (WithWaitReplicas).
func replyInt(op, id string, r reply) (int64, error) {
	if err := r.Error(); err != nil {
		return 0, opError(op, id, err)
	}
	m, err := r.ToMessage()
	if err != nil {
		return 0, opError(op, id, err)
	}
	if !m.IsInt64() {
		return 0, errorf(op, id, ErrUnexpectedReply, "want an integer reply, got %s", m.String())
	}
	n, err := m.AsInt64()
	if err != nil {
		return 0, errorf(op, id, ErrUnexpectedReply, "%v", err)
	}
	return n, r.replicated(op, id)
}

// replyClaimed reads claim.lua's reply to a lease ("~<token>"): the lease
// won, its fence (a decimal uint64 above 0) with n = 1; else 0 (processed)
// or -(ms left on the holder's lease) and no fence. A write that its
// replicas did not confirm comes with ErrNotReplicated (WithWaitReplicas).
func replyClaimed(op, id string, r reply) (n int64, fence uint64, err error) {
	if err := r.Error(); err != nil {
		return 0, 0, opError(op, id, err)
	}
	m, err := r.ToMessage()
	if err != nil {
		return 0, 0, opError(op, id, err)
	}
	if m.IsInt64() {
		n, err := m.AsInt64()
		if err != nil || n > 0 {
			return 0, 0, errorf(op, id, ErrUnexpectedReply, "want a fence, 0 or a negative integer, got %s", m.String())
		}
		return n, 0, r.replicated(op, id)
	}
	s, err := replyString(&m)
	if err == nil {
		fence, err = strconv.ParseUint(s, 10, 64)
	}
	if err != nil || fence == 0 {
		return 0, 0, errorf(op, id, ErrUnexpectedReply, "want a fence, 0 or a negative integer, got %s", m.String())
	}
	return 1, fence, r.replicated(op, id)
}

// replyString reads a string reply element. Unlike RedisMessage.ToString it
// refuses every other type (ToString answers "" and no error for an empty
// array).
func replyString(m *rueidis.RedisMessage) (string, error) {
	if !m.IsString() {
		return "", fmt.Errorf("want a string, got %s", m.String())
	}
	return m.ToString()
}

// replyArray reads an array reply of exactly n elements, mapping script errors
// to sentinels. It leaves r.replicated to the caller, which reports it with
// what it parsed.
func replyArray(op, key string, r reply, n int) ([]rueidis.RedisMessage, error) {
	if err := r.Error(); err != nil {
		return nil, opError(op, key, err)
	}
	m, err := r.ToMessage()
	if err != nil {
		return nil, opError(op, key, err)
	}
	arr, err := m.ToArray()
	if err != nil {
		return nil, errorf(op, key, ErrUnexpectedReply, "want an array reply, got %s", m.String())
	}
	if len(arr) != n {
		return nil, errorf(op, key, ErrUnexpectedReply, "want %d elements, got %d", n, len(arr))
	}
	return arr, nil
}

// replyUint reads a non-negative integer reply, or a decimal string one.
func replyUint(m *rueidis.RedisMessage) (uint64, error) {
	if m.IsInt64() {
		n, err := m.AsInt64()
		if err != nil {
			return 0, err
		}
		if n < 0 {
			return 0, fmt.Errorf("negative integer %d", n)
		}
		return uint64(n), nil
	}
	s, err := replyString(m)
	if err != nil {
		return 0, fmt.Errorf("want an integer or a decimal string, got %s", m.String())
	}
	return strconv.ParseUint(s, 10, 64)
}
