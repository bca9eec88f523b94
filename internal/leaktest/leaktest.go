// Package leaktest counts the goroutines whose stack holds a frame, for the
// tests that check a consumer leaves none behind once it has stopped. It uses
// the standard library only.
package leaktest

import (
	"runtime"
	"strings"
	"time"
)

// Count is how many goroutines have a frame whose function name contains
// frame (e.g. "redisonce/streams.(*run)").
func Count(frame string) int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, frame) {
			count++
		}
	}
	return count
}

// Left waits up to within for Count(frame) to reach 0 and returns the count
// it ended with.
func Left(frame string, within time.Duration) int {
	deadline := time.Now().Add(within)
	for Count(frame) > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	return Count(frame)
}
