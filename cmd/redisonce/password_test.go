package main

import (
	"fmt"
	"strings"
	"testing"
)

// No command prints a Redis password, whatever the URL holds, from
// --url or REDIS_URL, when nothing listens there.
func TestNoPasswordInCLIOutput(t *testing.T) {
	fragments := []string{"Zm9v", "YmFy", "cXV4"}
	var urls []string
	for _, c := range []string{"/", "#", "?", "@", ":", "%", "+"} {
		pw := strings.Join(fragments, c)
		urls = append(urls,
			"redis://:"+pw+"@127.0.0.1:1/0",
			"redis://app:"+pw+"@127.0.0.1:1",
			"redis://:"+pw+"@127.0.0.1:1?addr=127.0.0.1:2&master_set=m")
	}
	urls = append(urls, "redis://:Zm9v%2FYmFy%25cXV4@127.0.0.1:1",
		// Digits: url.Parse reads host ":4711" and path "/0815@...": a dial
		// error would quote the password's first half.
		"redis://:4711/0815@127.0.0.1:1")
	fragments = append(fragments, "4711", "0815")
	commands := [][]string{
		{"load"}, {"functions", "--load"}, {"call", "seen", "k"}, {"inspect", "claim", "x"},
		{"inspect", "tail", "c"}, {"inspect", "record", "r"}, {"stats"}, {"version"}, {"demo"},
	}
	for _, u := range urls {
		for _, cmd := range commands {
			for _, viaEnv := range []bool{false, true} {
				args := append([]string{cmd[0], "--url", u}, cmd[1:]...)
				if viaEnv {
					args = cmd
				}
				t.Run(fmt.Sprint(u, args, viaEnv), func(t *testing.T) {
					if viaEnv {
						t.Setenv("REDIS_URL", u)
					}
					code, out, errs := cli(t, args...)
					if code == 0 {
						t.Errorf("exit 0 with nothing at 127.0.0.1:1:\n%s%s", out, errs)
					}
					for _, f := range fragments {
						if strings.Contains(out+errs, f) {
							t.Errorf("output shows %q of the password:\nstdout: %s\nstderr: %s", f, out, errs)
						}
					}
				})
			}
		}
	}
}
