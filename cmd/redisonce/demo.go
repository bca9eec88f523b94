package main

import (
	"context"
	"flag"

	"github.com/redisonce/redisonce/cmd/redisonce/internal/demo"
)

func demoCommand() *command {
	return &command{
		name:    "demo",
		summary: "the main job: a small fleet shows exactly-once effects (start here)",
		help: `
Runs a small fleet against real Redis and shows that every effect happens
exactly once although messages are duplicated, redelivered, and a consumer
crashes mid-message:

  claims   several consumers drain a stream with duplicates and redeliveries
           through Claims.Do; one consumer crashes holding a message: its lease
           expires and another consumer processes the message.
  outbox   gateways push messages to clients over connections whose unacked
           tails live in Outbox; one gateway stops answering, the next owner
           replays its connections' tails (clients drop what they had by
           (epoch, seq)), and the old owner's late acks are rejected as stale.
  records  clients send payments with an Idempotency-Key through Records.Do and
           retry (lost responses, slow first tries, provider errors); a
           server's provider call hangs past its lease, Do keeps the lease
           alive so retries wait (409), and the failed call's record is dropped
           so a retry charges.

It ends with a table per store: messages delivered, duplicates suppressed,
unique messages, effects applied (must equal unique messages, or the demo
exits 1), replays, stale operations rejected. It takes a few seconds.

With no --url and no REDIS_URL it starts a throwaway redis-server (found on
PATH, /usr/sbin or /usr/local/bin) and stops it at the end. Against your own
server it writes only keys under redisonce-demo:<random>: and deletes them at
the end.

  redisonce demo
  redisonce demo --url redis://127.0.0.1:6379
  make demo`,
		nargs: exactly(0),
		flags: func(fs *flag.FlagSet) func(context.Context, *env, []string) error {
			u := urlFlag(fs, "")
			return func(ctx context.Context, e *env, _ []string) error {
				return demo.Run(ctx, demo.Options{URL: *u, Out: e.stdout, Log: e.logf})
			}
		},
	}
}
