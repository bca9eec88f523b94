package jetstream_test

import (
	"context"
	"errors"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/redisonce/redisonce/integrations/jetstream"
	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
)

// untouchedMsg is a message whose every method panics: Process must refuse
// a nil context before using it.
type untouchedMsg struct{ natsjs.Msg }

// Bad input in the jetstream module: a nil option, a nil context, a
// nil message and a nil Handler give store.ErrInvalidArgument, never a
// panic, and fn never runs.
func TestBadInputNeverPanics(t *testing.T) {
	claims := must.Store(store.NewMemoryClaims())
	ran := 0
	fn := func(context.Context, natsjs.Msg) error { ran++; return nil }
	h, err := jetstream.New(claims, fn)
	if err != nil {
		t.Fatal(err)
	}
	var nilHandler *jetstream.Handler
	var reported []error
	hr, err := jetstream.New(claims, fn, jetstream.WithReport(func(_ natsjs.Msg, _ jetstream.Outcome, err error) { reported = append(reported, err) }))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for name, f := range map[string]func() error{
		"New nil option":       func() error { return second(jetstream.New(claims, fn, nil)) },
		"New nil option after": func() error { return second(jetstream.New(claims, fn, jetstream.WithLease(1), nil)) },
		"Process nil context":  func() error { return second(h.Process(nil, untouchedMsg{})) }, //nolint:staticcheck // the bad input under test
		"Process nil message":  func() error { return second(h.Process(ctx, nil)) },
		"reported nil message": func() error { return second(hr.Process(ctx, nil)) },
		"nil Handler Process":  func() error { return second(nilHandler.Process(ctx, untouchedMsg{})) },
		"nil Handler Handle":   func() error { nilHandler.Handle(untouchedMsg{}); return store.ErrInvalidArgument },
		"Handle nil message":   func() error { h.Handle(nil); return store.ErrInvalidArgument },
		"MsgID nil message":    func() error { return second(jetstream.MsgID(nil)) },
		"ProcessBatch nil context": func() error {
			return second(h.ProcessBatch(nil, []natsjs.Msg{untouchedMsg{}})) //nolint:staticcheck // the bad input under test
		},
		"ProcessBatch nil message": func() error { return second(h.ProcessBatch(ctx, []natsjs.Msg{untouchedMsg{}, nil})) },
		"nil Handler ProcessBatch": func() error { return second(nilHandler.ProcessBatch(ctx, []natsjs.Msg{untouchedMsg{}})) },
		"nil Handler Consume":      func() error { return second(nilHandler.Consume(nil)) },
		"Consume nil consumer":     func() error { return second(h.Consume(nil)) },
		"DefaultFailure nil message": func() error {
			if f := jetstream.DefaultFailure(nil, errors.New("x")); f.Term || f.Delay != time.Second {
				t.Errorf("DefaultFailure(nil, x) = %+v, want a 1 s redelivery (one delivery)", f)
			}
			return store.ErrInvalidArgument
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
		t.Errorf("fn ran %d times on bad input", ran)
	}
	if len(reported) != 1 || !errors.Is(reported[0], store.ErrInvalidArgument) {
		t.Errorf("WithReport heard %v, want one ErrInvalidArgument", reported)
	}
}

func second[T any](_ T, err error) error { return err }
