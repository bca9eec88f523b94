package scripts_test

// The code of the Go snippet of docs/upstream-rueidis-race.md: a region
// (// snippet:NAME ... // snippet:end) that TestDocSnippets (root module)
// compares with the document. Compiled by every `go test` of this module;
// TestUpstreamRueidisRetryRace runs the same reproduction.

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/rueidis"
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
