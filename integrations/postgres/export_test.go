package postgres

import (
	"context"
	"time"
)

// Claimer is the claim's one method, for tests that wrap a *store.Claims to
// inject a fault between its steps.
type Claimer interface {
	Do(ctx context.Context, id string, lease time.Duration, fn func(context.Context) error) (bool, error)
}

// NewInboxWithClaimer is NewInbox over such a wrapper.
func NewInboxWithClaimer(c Claimer, db InboxDB, opts ...InboxOption) (*Inbox, error) {
	if c == nil {
		return newInbox(nil, db, opts...)
	}
	return newInbox(c, db, opts...)
}
