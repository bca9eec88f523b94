package store_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/redisonce/redisonce/store"
)

func TestIsPermanent(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"permanent", store.Permanent(boom), true},
		{"wrapped", fmt.Errorf("charge: %w", store.Permanent(boom)), true},
		{"joined", errors.Join(errors.New("other"), store.Permanent(boom)), true},
		{"plain", boom, false},
		{"nil", nil, false},
		{"retryable over permanent", store.Retryable(store.Permanent(boom)), false},
		{"a context error", store.Permanent(context.Canceled), false},
	} {
		if got := store.IsPermanent(tc.err); got != tc.want {
			t.Errorf("%s: IsPermanent = %v, want %v", tc.name, got, tc.want)
		}
	}
}
