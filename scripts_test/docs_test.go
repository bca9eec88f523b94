package scripts_test

// The code of the Go snippets of docs/upstream-rueidis-race.md and
// docs/upstream-rueidis-redial.md: regions (// snippet:NAME ... // snippet:end)
// that TestDocSnippets (root module) compares with the documents. Compiled by
// every `go test` of this module; TestUpstreamRueidisRetryRace and
// TestUpstreamRueidisRedialSharesContext run the same reproductions.

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/internal/redisproc"
)

func docRueidisRace(ctx context.Context, addr string, admin rueidis.Client) {
	// snippet:rueidisRace
	c, _ := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	for w := 0; w < 8; w++ {
		go func() {
			for i := 0; ctx.Err() == nil; i++ {
				_ = c.Do(ctx, c.B().Get().Key("race:"+strconv.Itoa(i%64)).Build()).Error()
			}
		}()
	}
	for ctx.Err() == nil { // on a second connection
		time.Sleep(2 * time.Millisecond)
		admin.Do(ctx, admin.B().ClientKill().TypeNormal().Build())
	}
	// snippet:end
}

func docRueidisRedial(ctx context.Context, addr string, admin *redisproc.Server) error {
	// snippet:rueidisRedial
	c, _ := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true, PipelineMultiplex: -1})
	c.Do(ctx, c.B().Set().Key("k").Value("v").Build())
	admin.Do("CLIENT", "KILL", "TYPE", "normal") // on another connection
	go admin.Do("DEBUG", "SLEEP", "2")
	time.Sleep(100 * time.Millisecond)
	c.Do(ctx, c.B().Set().Key("k").Value("first").Build()) // EOF: the dead connection is dropped

	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancelShort()
	go c.Do(short, c.B().Set().Key("k").Value("short").Build()) // starts the redial under `short`
	time.Sleep(20 * time.Millisecond)
	long, cancelLong := context.WithTimeout(ctx, 10*time.Second)
	defer cancelLong()
	err := c.Do(long, c.B().Set().Key("k").Value("long").Build()).Error()
	// snippet:end
	return err
}
