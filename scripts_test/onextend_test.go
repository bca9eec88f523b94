package scripts_test

import (
	"testing"

	"github.com/redisonce/redisonce/store"
	"github.com/redisonce/redisonce/store/storetest"
)

// Records.Do on Redis calls store.OnExtend's fn after each renew.lua that
// kept the lease.
func TestRecordsOnExtend(t *testing.T) {
	for name, url := range map[string]func(*testing.T) string{"standalone": standaloneURL, "cluster": clusterURL} {
		t.Run(name, func(t *testing.T) {
			storetest.TestRecordsOnExtend(t, mustStore(store.NewRecords(newClient(t, url(t)), store.WithPrefix(uniquePrefix(t)))))
		})
	}
}
