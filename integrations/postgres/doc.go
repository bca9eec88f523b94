// Package postgres keeps a message's effect exactly once in PostgreSQL: an
// Inbox claims the message id in Redis (store.Claims), then records the id,
// fenced, in an inbox table in the same transaction as the effect, so the
// effect commits once even when the process dies between the SQL commit and
// the claim's commit, or Redis loses the claim.
package postgres
