package watermill_test

import (
	"context"
	"errors"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	wmonce "github.com/redisonce/redisonce/integrations/watermill"
	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
)

// Bad input in the watermill module: nil claims, a nil option, a
// nil handler, a nil message and a nil context give store.ErrInvalidArgument,
// never a panic, and the handler never runs.
func TestBadInputNeverPanics(t *testing.T) {
	claims := must.Store(store.NewMemoryClaims())
	ran := 0
	h := func(*message.Message) ([]*message.Message, error) { ran++; return nil, nil }
	msg := func() *message.Message { return message.NewMessage("uuid-1", []byte("p")) }
	handle := func(mw message.HandlerMiddleware, h message.HandlerFunc, m *message.Message) error {
		_, err := mw(h)(m)
		return err
	}
	for name, f := range map[string]func() error{
		"Middleware nil claims":  func() error { return handle(wmonce.Middleware(nil), h, msg()) },
		"Middleware nil option":  func() error { return handle(wmonce.Middleware(claims, nil), h, msg()) },
		"Middleware nil handler": func() error { return handle(wmonce.Middleware(claims), nil, msg()) },
		"Middleware nil message": func() error { return handle(wmonce.Middleware(claims), h, nil) },
		"Repository nil claims": func() error {
			return second(wmonce.NewExpiringKeyRepository(nil).IsDuplicate(context.Background(), "k"))
		},
		"Repository nil context": func() error { return second(wmonce.NewExpiringKeyRepository(claims).IsDuplicate(nil, "k")) }, //nolint:staticcheck // the bad input under test
		"nil Repository IsDuplicate": func() error {
			return second((*wmonce.ExpiringKeyRepository)(nil).IsDuplicate(context.Background(), "k"))
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
	// Nothing was claimed: the id is still free.
	if seen, err := claims.Seen(context.Background(), "uuid-1"); err != nil || seen {
		t.Errorf("Seen(uuid-1) = %v, %v; want false (bad input claims nothing)", seen, err)
	}
}

func second[T any](_ T, err error) error { return err }
