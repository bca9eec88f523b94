package gojob_test

// go-job's own store tests, v0.19.0, ported: queue/idempotency/redis/
// store_test.go (TestStoreAcquireGetUpdateDelete, TestStoreExpiresRecords)
// and queue/idempotency/postgres/store_test.go (the same two, its expiry
// test re-acquiring the expired key, and TestStoreAcquireConcurrentSameKey).
// TestStoreRejectsInvalidTableIdentifier is SQL-only and does not apply.
//
// The assertions are go-job's, unchanged (testify, as upstream). What
// changed: the store is the adapter over each target, and durations go
// through tg.d, which shrinks them on Redis, where "advance the clock" is a
// real sleep.

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goliatone/go-job/queue/idempotency"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStoreAcquireGetUpdateDelete(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		store, clock := tg.setup(t)

		record, acquired, err := store.Acquire(context.Background(), "key-1", tg.d(10*time.Second))
		require.NoError(t, err)
		assert.True(t, acquired)
		assert.Equal(t, idempotency.StatusPending, record.Status)

		record, acquired, err = store.Acquire(context.Background(), "key-1", tg.d(10*time.Second))
		require.NoError(t, err)
		assert.False(t, acquired)

		payload := []byte("result")
		status := idempotency.StatusCompleted
		expiresAt := clock.Now().Add(tg.d(20 * time.Second))
		require.NoError(t, store.Update(context.Background(), "key-1", idempotency.Update{
			Status:    &status,
			Payload:   &payload,
			ExpiresAt: &expiresAt,
		}))

		fetched, found, err := store.Get(context.Background(), "key-1")
		require.NoError(t, err)
		assert.True(t, found)
		assert.Equal(t, status, fetched.Status)
		assert.Equal(t, payload, fetched.Payload)

		require.NoError(t, store.Delete(context.Background(), "key-1"))
		_, found, err = store.Get(context.Background(), "key-1")
		require.NoError(t, err)
		assert.False(t, found)
	})
}

// TestStoreExpiresRecords is the postgres version: the redis one is its
// first half.
func TestStoreExpiresRecords(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		store, clock := tg.setup(t)

		_, acquired, err := store.Acquire(context.Background(), "key-1", tg.d(5*time.Second))
		require.NoError(t, err)
		assert.True(t, acquired)

		clock.Advance(tg.d(6 * time.Second))
		_, found, err := store.Get(context.Background(), "key-1")
		require.NoError(t, err)
		assert.False(t, found)

		_, acquired, err = store.Acquire(context.Background(), "key-1", tg.d(5*time.Second))
		require.NoError(t, err)
		assert.True(t, acquired)
	})
}

func TestStoreAcquireConcurrentSameKey(t *testing.T) {
	forEach(t, func(t *testing.T, tg target) {
		store, _ := tg.setup(t)

		const workers = 12
		var acquiredCount atomic.Int64
		errCh := make(chan error, workers)

		var wg sync.WaitGroup
		wg.Add(workers)
		for i := 0; i < workers; i++ {
			go func() {
				defer wg.Done()
				_, acquired, err := store.Acquire(context.Background(), "same-key", tg.d(30*time.Second))
				if err != nil {
					errCh <- err
					return
				}
				if acquired {
					acquiredCount.Add(1)
				}
			}()
		}
		wg.Wait()
		close(errCh)

		for err := range errCh {
			require.NoError(t, err)
		}
		assert.Equal(t, int64(1), acquiredCount.Load())
	})
}
