package gojob_test

// The code of the Go snippet of this module's README.md: a region
// (// snippet:NAME ... // snippet:end) that TestDocSnippets (root module)
// compares with the document. Compiled by every `go test` of this module,
// not run (it needs a Redis and a go-job queue); the store tests run the same
// store against go-job's own tests.

import (
	"context"
	"time"

	job "github.com/goliatone/go-job"
	"github.com/goliatone/go-job/queue"
	"github.com/goliatone/go-job/queue/command"
	"github.com/goliatone/go-job/queue/worker"

	"github.com/redisonce/redisonce/adapters/gojob"
	"github.com/redisonce/redisonce/store"
)

func docGoJob(ctx context.Context, dequeuer queue.Dequeuer, q queue.Enqueuer, reg *command.Registry, params map[string]any) error {
	// snippet:gojob
	rs, err := store.OpenRecords("redis://localhost:6379/0", store.WithPrefix("gojob:idempotency:"))
	if err != nil {
		return err
	}
	defer rs.Close()
	idem := gojob.NewStore(rs)

	w := worker.NewWorker(dequeuer, worker.WithIdempotencyStore(idem, 24*time.Hour))
	receipt, err := command.EnqueueWithOptions(ctx, q, reg, "export", params,
		command.EnqueueOptions{IdempotencyKey: "export:123", DedupPolicy: job.DedupPolicyDrop, IdempotencyStore: idem})
	// snippet:end
	_, _ = w, receipt
	return err
}
