package asynq_test

import (
	"context"
	"errors"
	"testing"

	"github.com/hibiken/asynq"

	asynqonce "github.com/redisonce/redisonce/integrations/asynq"
	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
)

// Bad input in the asynq module: nil claims, a nil option, a nil
// handler, a nil task and a nil context give store.ErrInvalidArgument, never
// a panic, and the handler never runs.
func TestBadInputNeverPanics(t *testing.T) {
	claims := must.Store(store.NewMemoryClaims())
	ran := 0
	h := asynq.HandlerFunc(func(context.Context, *asynq.Task) error { ran++; return nil })
	byPayload := asynqonce.WithID(func(context.Context, *asynq.Task) (string, error) { return "task-1", nil })
	task := asynq.NewTask("t", []byte("p"))
	ctx := context.Background()
	for name, f := range map[string]func() error{
		"nil claims":  func() error { return asynqonce.Middleware(nil, byPayload)(h).ProcessTask(ctx, task) },
		"nil option":  func() error { return asynqonce.Middleware(claims, byPayload, nil)(h).ProcessTask(ctx, task) },
		"nil handler": func() error { return asynqonce.Middleware(claims, byPayload)(nil).ProcessTask(ctx, task) },
		"nil task":    func() error { return asynqonce.Middleware(claims, byPayload)(h).ProcessTask(ctx, nil) },
		"nil context": func() error { return asynqonce.Middleware(claims)(h).ProcessTask(nil, task) }, //nolint:staticcheck // the bad input under test
		"nil context, WithID": func() error {
			return asynqonce.Middleware(claims, byPayload)(h).ProcessTask(nil, task) //nolint:staticcheck
		},
	} {
		t.Run(name, func(t *testing.T) {
			var err error
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("panicked: %v", p)
					}
				}()
				err = f()
			}()
			if !errors.Is(err, store.ErrInvalidArgument) {
				t.Errorf("%v, want ErrInvalidArgument", err)
			}
		})
	}
	if ran != 0 {
		t.Errorf("the handler ran %d times on bad input", ran)
	}
	if seen, err := claims.Seen(ctx, "task-1"); err != nil || seen {
		t.Errorf("Seen(task-1) = %v, %v; want false (bad input claims nothing)", seen, err)
	}
}
