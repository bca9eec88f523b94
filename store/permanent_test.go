package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// IsPermanent tells an integration's failure policy (JetStream's Term, a dead
// letter) that fn marked its error final with Permanent, through any wrapping.
func TestIsPermanent(t *testing.T) {
	base := errors.New("declined")
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"plain", base, false},
		{"marked", Permanent(base), true},
		{"wrapped mark", fmt.Errorf("charge: %w", Permanent(base)), true},
		{"joined mark", errors.Join(errors.New("other"), Permanent(base)), true},
		{"marked and retryable", Retryable(Permanent(base)), false},
		{"marked context error", Permanent(context.Canceled), false},
	} {
		if got := IsPermanent(c.err); got != c.want {
			t.Errorf("IsPermanent(%s: %v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}
