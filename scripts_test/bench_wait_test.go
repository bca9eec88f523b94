package scripts_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/internal/redisproc"
	"github.com/redisonce/redisonce/store"
)

// harnessStartReplicated starts a primary with one replica and waits until
// the primary counts it online; it returns the primary's URL.
func harnessStartReplicated() (string, func() error, error) {
	if _, err := redisproc.LookPath(); err != nil {
		return "", nil, harnessMissing(true, "no redis-server binary: this benchmark starts a primary and a replica")
	}
	p, err := redisproc.Start(redisproc.Options{Args: []string{"--repl-diskless-sync-delay", "0"}})
	if err != nil {
		return "", nil, err
	}
	r, err := redisproc.Start(redisproc.Options{Args: []string{"--replicaof", "127.0.0.1", strconv.Itoa(p.Port)}})
	if err != nil {
		return "", nil, errors.Join(err, p.Stop())
	}
	stop := func() error { return errors.Join(r.Stop(), p.Stop()) }
	if err := redisproc.WaitLinked(p, r, 10*time.Second); err != nil {
		return "", nil, errors.Join(err, stop())
	}
	return p.URL(), stop, nil
}

// BenchmarkWaitReplicas is the cost of WithWaitReplicas(1, 1s): Claim and
// Append, and the batches ClaimMany and AppendMany of 16 (one WAIT per call:
// ns/op is per batch), on a primary with one replica (on the same machine),
// without the option and with it, at 1 and 64 goroutines.
func BenchmarkWaitReplicas(b *testing.B) {
	url := harnessReplicated.get(b, harnessStartReplicated)
	for _, wait := range []int{0, 1} {
		opts := func(b *testing.B) []store.Option {
			o := []store.Option{store.WithPrefix(benchPrefix(b)), store.WithTTL(time.Hour)}
			if wait > 0 {
				o = append(o, store.WithWaitReplicas(wait, time.Second))
			}
			return o
		}
		b.Run("Claim/wait="+strconv.Itoa(wait), func(b *testing.B) {
			benchEach(b, func(b *testing.B, g int) {
				s := must.Store(store.NewClaims(benchClientAt(b, url), opts(b)...))
				ids := benchIDs(b.N)
				ctx := context.Background()
				benchParallel(b, g, func(i int) error {
					ok, err := s.Claim(ctx, ids[i])
					if err == nil && !ok {
						err = errBenchUnexpected
					}
					return err
				})
			})
		})
		b.Run("Append/wait="+strconv.Itoa(wait), func(b *testing.B) {
			benchEach(b, func(b *testing.B, g int) {
				s := must.Store(store.NewOutbox(benchClientAt(b, url), opts(b)...))
				ids := benchIDs(b.N)
				ctx := context.Background()
				benchParallel(b, g, func(i int) error {
					_, err := s.AppendWithID(ctx, "conn"+strconv.Itoa(i%64), ids[i], []byte("payload"))
					return err
				})
			})
		})
		b.Run("ClaimMany16/wait="+strconv.Itoa(wait), func(b *testing.B) {
			benchEach(b, func(b *testing.B, g int) {
				s := must.Store(store.NewClaims(benchClientAt(b, url), opts(b)...))
				ids := benchIDs(16 * b.N)
				ctx := context.Background()
				benchParallel(b, g, func(i int) error {
					ok, err := s.ClaimMany(ctx, ids[16*i:16*i+16])
					if err == nil && !ok[0] {
						err = errBenchUnexpected
					}
					return err
				})
			})
		})
		b.Run("AppendMany16/wait="+strconv.Itoa(wait), func(b *testing.B) {
			benchEach(b, func(b *testing.B, g int) {
				s := must.Store(store.NewOutbox(benchClientAt(b, url), opts(b)...))
				ids := benchIDs(16 * b.N)
				ctx := context.Background()
				benchParallel(b, g, func(i int) error {
					msgs := make([]store.Outgoing, 16)
					for j := range msgs {
						msgs[j] = store.Outgoing{ID: ids[16*i+j], Payload: []byte("payload")}
					}
					_, err := s.AppendMany(ctx, "conn"+strconv.Itoa(i%64), msgs)
					return err
				})
			})
		})
	}
}
