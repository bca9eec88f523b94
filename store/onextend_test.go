package store_test

import (
	"testing"

	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
	"github.com/redisonce/redisonce/store/storetest"
)

func TestMemoryRecordsOnExtend(t *testing.T) {
	storetest.TestRecordsOnExtend(t, must.Store(store.NewMemoryRecords()))
}
