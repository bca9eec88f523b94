package scripts_test

import (
	"testing"

	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/store"
	"github.com/redisonce/redisonce/store/storetest"
)

// Records.Do on a cluster calls store.OnExtend's fn after each renew.lua
// that kept the lease; the standalone run is store's TestRedisRecordsOnExtend.
func TestRecordsClusterOnExtend(t *testing.T) {
	storetest.TestRecordsOnExtend(t, must.Store(store.NewRecords(newClient(t, clusterURL(t)), store.WithPrefix(uniquePrefix(t)))))
}
