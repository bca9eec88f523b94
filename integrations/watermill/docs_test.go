package watermill_test

// The code of the Go snippets of docs/integrations.md about this module:
// regions (// snippet:NAME ... // snippet:end) that TestDocSnippets (root
// module) compares with the document. Compiled by every `go test` of this
// module, not run (they need a Redis); the Examples run the same calls on
// a MemoryClaims.

import (
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	wmonce "github.com/redisonce/redisonce/integrations/watermill"
	"github.com/redisonce/redisonce/store"
)

func docWatermill(router *message.Router) error {
	// snippet:watermill
	claims, err := store.OpenClaims("redis://localhost:6379/0", store.WithTTL(7*24*time.Hour))
	if err != nil {
		return err
	}
	defer claims.Close()

	// Every handler of the router runs once per message UUID (WithMetadataID for a
	// business id); a failed one is retried with a backoff, the id released between tries.
	retry := middleware.Retry{MaxRetries: 5, InitialInterval: time.Second, Multiplier: 2}
	router.AddMiddleware(retry.Middleware, wmonce.Middleware(claims))
	// snippet:end
	return nil
}

func docWatermillDedup(router *message.Router, claims *store.Claims) {
	// snippet:watermillDedup
	dedup := &middleware.Deduplicator{
		KeyFactory: middleware.NewMessageHasherSHA256(1024),
		Repository: wmonce.NewExpiringKeyRepository(claims),
	}
	router.AddMiddleware(dedup.Middleware)
	// snippet:end
}
