package asynq_test

// The code of the Go snippet of docs/integrations.md about this module: a
// region (// snippet:NAME ... // snippet:end) that TestDocSnippets (root
// module) compares with the document. Compiled by every `go test` of this
// module, not run (it needs a Redis); ExampleMiddleware runs the same
// middleware on a memory store (store.NewMemoryClaims).

import (
	"context"
	"time"

	"github.com/hibiken/asynq"

	asynqonce "github.com/redisonce/redisonce/integrations/asynq"
	"github.com/redisonce/redisonce/store"
)

func sendWelcomeEmail(context.Context, *asynq.Task) error { return nil }

func docAsynq() error {
	// snippet:asynq
	claims, err := store.OpenClaims("redis://localhost:6379/0", store.WithTTL(7*24*time.Hour))
	if err != nil {
		return err
	}
	defer claims.Close()

	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: "localhost:6379"}, asynq.Config{
		IsFailure:      asynqonce.IsFailure,       // a task in flight elsewhere is no failure
		RetryDelayFunc: asynqonce.RetryDelay(nil), // ... and comes back after the holder's lease; nil: asynq's backoff for failures
	})
	mux := asynq.NewServeMux()
	mux.Use(asynqonce.Middleware(claims)) // every handler: once per task id
	mux.HandleFunc("email:welcome", sendWelcomeEmail)
	err = srv.Run(mux)
	// snippet:end
	return err
}
