// Package postgres keeps a message's effect exactly once in PostgreSQL: an
// Inbox claims the message id in Redis (store.Claims), then records the id,
// fenced, in an inbox table in the same transaction as the effect, so the
// effect commits once even when the process dies between the SQL commit and
// the claim's commit, or Redis loses the claim.
//
// Records is a record store (store.Records' methods, over a store.Records)
// whose stored results commit with their effect: its Do runs fn inside one
// transaction (Tx gives it to fn, so an httpidem handler writes with
// Tx(r.Context())) and writes the record's row in that same transaction,
// fenced by the Redis lease; Redis stays the lease and the fast path.
package postgres
