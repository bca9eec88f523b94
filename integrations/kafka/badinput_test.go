package kafka_test

import (
	"context"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redisonce/redisonce/integrations/kafka"
	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
)

// Bad input in the kafka module: a nil option, a nil context and a
// nil Consumer give store.ErrInvalidArgument, never a panic; a Run refused
// for a nil context leaves the Consumer usable.
func TestBadInputNeverPanics(t *testing.T) {
	claims := must.Store(store.NewMemoryClaims())
	fn := func(context.Context, *kgo.Record) error { return nil }
	// No broker listens there: nothing here may reach one.
	opts := []kgo.Opt{kgo.SeedBrokers("127.0.0.1:1"), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t")}
	c, err := kafka.New(claims, fn, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Client().Close() })
	var nilConsumer *kafka.Consumer
	for name, f := range map[string]func() error{
		"New nil option":       func() error { return second(kafka.New(claims, fn, opts, nil)) },
		"New nil option after": func() error { return second(kafka.New(claims, fn, opts, kafka.WithLease(1), nil)) },
		"Run nil context":      func() error { return c.Run(nil) }, //nolint:staticcheck // the bad input under test
		"nil Consumer Run":     func() error { return nilConsumer.Run(context.Background()) },
		"nil Consumer Client":  func() error { nilConsumer.Client(); return store.ErrInvalidArgument },
		"OffsetID nil record":  func() error { return second(kafka.OffsetID(nil)) },
		"HeaderID nil record":  func() error { return second(kafka.HeaderID("id")(nil)) },
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
	// The refused Run did not count as the one Run: a real one still runs
	// (and returns at once on a cancelled context).
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := c.Run(ctx); err != nil {
		t.Errorf("Run after a refused Run = %v, want nil", err)
	}
}

func second[T any](_ T, err error) error { return err }
