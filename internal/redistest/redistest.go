// Package redistest opens the Redis clients the repository's tests use.
package redistest

import (
	"testing"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/store"
)

// Client opens a client on url (redis://, rediss:// or unix://) with the
// options the stores open theirs with (store.ClientOptions) and closes it
// when the test ends. An error fails the test.
func Client(tb testing.TB, url string) rueidis.Client {
	tb.Helper()
	opt, err := store.ClientOptions(url)
	if err != nil {
		tb.Fatal(err)
	}
	c, err := rueidis.NewClient(opt)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return c
}
