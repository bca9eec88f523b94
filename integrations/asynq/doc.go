// Package asynq runs asynq task handlers exactly once per task id over
// asynq's at-least-once processing (a retry after a crash, a lease that
// expired, a task enqueued twice), with a redisonce claims store
// (store.Claims, on the same Redis as asynq or another).
//
//	go get github.com/redisonce/redisonce/integrations/asynq
//
// Import it under a name of your own beside asynq (asynqonce below), and
// give the server three things: the middleware, and the IsFailure and
// RetryDelay that keep a task another worker is running from burning its
// retries:
//
//	claims, err := store.OpenClaims("redis://localhost:6379/0", store.WithTTL(7*24*time.Hour))
//	if err != nil { ... }
//	defer claims.Close()
//
//	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: "localhost:6379"}, asynq.Config{
//		IsFailure:      asynqonce.IsFailure,
//		RetryDelayFunc: asynqonce.RetryDelay(nil), // nil: asynq's default backoff for failures
//	})
//	mux := asynq.NewServeMux()
//	mux.Use(asynqonce.Middleware(claims))
//	mux.HandleFunc("email:welcome", sendWelcomeEmail)
//	err = srv.Run(mux)
//
// What each case does:
//
//	what happened                          the handler          the task
//	first run, handler succeeds            ran, id committed    completed
//	handler fails or panics                ran, id released     retried (a failure: counted, asynq's backoff)
//	task id already processed              not run              completed
//	another worker runs the task id        not run              retried after the holder's lease time left; not a failure
//	worker killed in the handler           -                    asynq retries it once its own lease expired; the run waits out ours
//	handler succeeds, commit fails         ran                  completed (a retry would run it twice)
//
// The id is asynq's task id, which a retry keeps; a producer that sets
// asynq.TaskID gets asynq's own enqueue-time dedupe on top (ErrTaskIDConflict
// while the task exists). A producer that may enqueue one job under two task
// ids: WithID, from the payload. asynq's own Unique option dedupes enqueues
// for a TTL, not runs: without the middleware, a retry after a crash runs
// the handler again.
//
// While the handler runs, its lease (WithLease, default 30s) is extended every
// quarter of it, so a slow handler keeps its task however long it takes; the
// handler's context is cancelled if the lease is lost, and carries the
// store.Lease (store.LeaseFromContext). Keep asynq's task Timeout or Deadline
// for how long a run may take; the lease only says how long a dead worker's
// task stays locked.
//
// asynq hands the middleware one task per call, so there is no batch to
// claim up front: the middleware runs every call through one store.Batch,
// which gathers the claims, extensions and commits of the tasks running at
// once (Config.Concurrency) into one script call each. A lone task waits for
// nothing (a call waits at most for the one in flight ahead of it).
//
// A task the middleware finds in flight returns the store's error
// (errors.Is(err, store.ErrInFlight); store.RetryAfter(err) is the holder's
// lease time left). IsFailure does not count it, so it
// neither uses up one of the task's retries nor counts in the queue's failure
// stats; RetryDelay retries it once the holder's lease may have run out. asynq
// stores retry times in whole seconds and moves due retries every
// Config.DelayedTaskCheckInterval (default 5s): expect an in-flight task to be
// tried again a second or more after the holder's lease time left.
//
// A worker killed mid-task stops extending its lease. asynq's recoverer
// requeues the task 30s after asynq's own 30s lease expired (checked every
// minute), as a failure (asynq.ErrLeaseExpired); by then our lease has long
// run out, and the retry runs the handler.
package asynq
