package scripts_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/redisonce/redisonce/store"
)

func BenchmarkClaim(b *testing.B) {
	url := benchURL(b)
	c := newClientTB(b, url)
	s := store.NewClaims(c, store.WithPrefix("bench:claim:"+strconv.FormatInt(int64(b.N), 10)+":"))
	ctx := context.Background()
	var n atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.Claim(ctx, strconv.FormatInt(n.Add(1), 10)); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
