package asynq_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/hibiken/asynq"

	asynqonce "github.com/redisonce/redisonce/integrations/asynq"
	"github.com/redisonce/redisonce/store"
)

// A worker's configuration: the middleware on the mux, IsFailure and
// RetryDelay on the server. Here the mux is called directly, twice for one
// job, as asynq would after a crash; in production the claims are
// store.OpenClaims on Redis, and srv.Run(mux) runs the worker.
func ExampleMiddleware() {
	claims, err := store.NewMemoryClaims(store.WithTTL(7 * 24 * time.Hour))
	if err != nil {
		log.Fatal(err)
	}

	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: "localhost:6379"}, asynq.Config{
		IsFailure:      asynqonce.IsFailure,
		RetryDelayFunc: asynqonce.RetryDelay(nil),
	})
	_ = srv // srv.Run(mux)

	mux := asynq.NewServeMux()
	mux.Use(asynqonce.Middleware(claims,
		asynqonce.WithLease(30*time.Second),
		// The default id is asynq's task id; this job's id is its payload.
		asynqonce.WithID(func(ctx context.Context, t *asynq.Task) (string, error) {
			return "welcome:" + string(t.Payload()), nil
		})))
	mux.HandleFunc("email:welcome", func(ctx context.Context, t *asynq.Task) error {
		fmt.Println("sending the welcome email to", string(t.Payload()))
		return nil
	})

	for range 2 {
		if err := mux.ProcessTask(context.Background(), asynq.NewTask("email:welcome", []byte("user-7"))); err != nil {
			fmt.Println(err)
		}
	}
	// Output:
	// sending the welcome email to user-7
}
