package scripts_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redisonce/redisonce"
	"github.com/redisonce/redisonce/internal/redisproc"
)

// TestWaitForReplica is docs/failover.md's recipe for a write that must be on a
// replica before the caller goes on (asynchronous replication loses
// acknowledged writes on failover): the script and WAIT in one DoMulti, so
// that WAIT runs on the connection that carried the write. (A WAIT sent on its
// own goes, like every blocking command in rueidis, to a pooled connection
// other than the store's, and covers nothing of the store's writes.)
func TestWaitForReplica(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	primary := newServer(t, redisproc.Options{Args: []string{"--repl-diskless-sync-delay", "0"}})
	replica := newServer(t, redisproc.Options{Args: []string{"--replicaof", "127.0.0.1", strconv.Itoa(primary.Port)}})
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := replica.Do("INFO", "replication")
		if err == nil && strings.Contains(info, "master_link_status:up") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replica never linked up: %v %s", err, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
	c := newClient(t, primary.URL())

	claim, _ := redisonce.Get("claim")
	if err := c.Do(ctx, c.B().ScriptLoad().Script(claim.Source).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	key := "bq:idemp:" + t.Name()
	res := c.DoMulti(ctx,
		c.B().Evalsha().Sha1(claim.SHA1).Numkeys(1).Key(key).Arg("86400000", "1").Build(),
		c.B().Wait().Numreplicas(1).Timeout(2000).Build())
	won, err := res[0].AsInt64()
	if err != nil || won != 1 {
		t.Fatalf("claim = %d, %v", won, err)
	}
	if n, err := res[1].AsInt64(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 = %d, %v; want 1 replica", n, err)
	}
	if v, err := replica.Do("GET", key); err != nil || v != "1" {
		t.Errorf("the replica has %q, %v after WAIT; want the claim", v, err)
	}
}
