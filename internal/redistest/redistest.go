// Package redistest opens the Redis clients the repository's tests use.
package redistest

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

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

// ServerCPU is the server's CPU time so far (INFO cpu: used_cpu_user +
// used_cpu_sys), for benchmarks that report server CPU per operation. An
// error fails the test.
func ServerCPU(tb testing.TB, c rueidis.Client) time.Duration {
	tb.Helper()
	info, err := c.Do(context.Background(), c.B().Info().Section("cpu").Build()).ToString()
	if err != nil {
		tb.Fatal(err)
	}
	var total float64
	for line := range strings.Lines(info) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				tb.Fatal(err)
			}
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}

// Calls is how many times the server ran the named commands since its last
// CONFIG RESETSTAT (INFO commandstats, calls=), summed; "evalsha" and
// "eval" for the script calls. An error fails the test.
func Calls(tb testing.TB, c rueidis.Client, cmds ...string) int {
	tb.Helper()
	info, err := c.Do(context.Background(), c.B().Info().Section("commandstats").Build()).ToString()
	if err != nil {
		tb.Fatal(err)
	}
	n := 0
	for line := range strings.Lines(info) {
		for _, cmd := range cmds {
			rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls=")
			if !ok {
				continue
			}
			k, err := strconv.Atoi(rest[:strings.IndexByte(rest+",", ',')])
			if err != nil {
				tb.Fatal(err)
			}
			n += k
		}
	}
	return n
}
