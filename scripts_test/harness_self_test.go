package scripts_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/internal/redisproc"
)

// harnessClusterInfo runs CLUSTER INFO through c and returns the fields the
// harness promises: a healthy cluster with every slot served, and how many
// nodes it has.
func harnessClusterInfo(t *testing.T, c rueidis.Client) map[string]string {
	t.Helper()
	info, err := c.Do(context.Background(), c.B().ClusterInfo().Build()).ToString()
	if err != nil {
		t.Fatalf("CLUSTER INFO: %v", err)
	}
	// RESP3 sends CLUSTER INFO as a verbatim string, and rueidis keeps its
	// "txt:" format prefix.
	info = strings.TrimPrefix(info, "txt:")
	got := map[string]string{}
	for line := range strings.Lines(info) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		switch k {
		case "cluster_state", "cluster_slots_ok", "cluster_known_nodes":
			got[k] = v
		}
	}
	return got
}

// harnessSetGet writes and reads back one key of the test's own.
func harnessSetGet(t *testing.T, c rueidis.Client) {
	t.Helper()
	ctx := context.Background()
	key := "harness:" + t.Name()
	if err := c.Do(ctx, c.B().Set().Key(key).Value("v").Px(time.Minute).Build()).Error(); err != nil {
		t.Fatalf("SET %s: %v", key, err)
	}
	got, err := c.Do(ctx, c.B().Get().Key(key).Build()).ToString()
	if err != nil || got != "v" {
		t.Fatalf("GET %s = %q, %v; want \"v\"", key, got, err)
	}
}

func TestHarnessStandalone(t *testing.T) {
	t.Parallel()
	c := newClient(t, standaloneURL(t))
	pong, err := c.Do(context.Background(), c.B().Ping().Build()).ToString()
	if err != nil || pong != "PONG" {
		t.Fatalf("PING = %q, %v; want PONG", pong, err)
	}
	if c.Mode() != rueidis.ClientModeStandalone {
		t.Errorf("client mode %q, want %q (is REDIS_URL a cluster?)", c.Mode(), rueidis.ClientModeStandalone)
	}
	harnessSetGet(t, c)
	if standaloneURL(t) != standaloneURL(t) {
		t.Error("standaloneURL is not shared")
	}
}

func TestHarnessCluster(t *testing.T) {
	t.Parallel()
	c := newClient(t, clusterURL(t))
	pong, err := c.Do(context.Background(), c.B().Ping().Build()).ToString()
	if err != nil || pong != "PONG" {
		t.Fatalf("PING = %q, %v; want PONG", pong, err)
	}
	if c.Mode() != rueidis.ClientModeCluster {
		t.Errorf("client mode %q, want %q", c.Mode(), rueidis.ClientModeCluster)
	}
	if n := len(c.Nodes()); n != 1 {
		t.Errorf("cluster client sees %d nodes, want 1", n)
	}
	want := map[string]string{"cluster_state": "ok", "cluster_slots_ok": "16384", "cluster_known_nodes": "1"}
	if diff := cmp.Diff(want, harnessClusterInfo(t, c)); diff != "" {
		t.Errorf("CLUSTER INFO (-want +got):\n%s", diff)
	}
	harnessSetGet(t, c)
}

func TestHarnessCluster3(t *testing.T) {
	t.Parallel()
	c := newClient(t, cluster3URL(t))
	if c.Mode() != rueidis.ClientModeCluster {
		t.Errorf("client mode %q, want %q", c.Mode(), rueidis.ClientModeCluster)
	}
	if n := len(c.Nodes()); n != 3 {
		t.Errorf("cluster client sees %d nodes, want 3", n)
	}
	want := map[string]string{"cluster_state": "ok", "cluster_slots_ok": "16384", "cluster_known_nodes": "3"}
	if diff := cmp.Diff(want, harnessClusterInfo(t, c)); diff != "" {
		t.Errorf("CLUSTER INFO (-want +got):\n%s", diff)
	}
	harnessSetGet(t, c)
}

func TestHarnessPrivateServer(t *testing.T) {
	t.Parallel()
	s := newServer(t, redisproc.Options{MaxMemory: "2mb", MaxMemoryPolicy: "noeviction"})
	if s.URL() == standaloneURL(t) {
		t.Fatal("newServer returned the shared server")
	}
	got, err := s.Do("CONFIG", "GET", "maxmemory")
	if err != nil || got != "maxmemory\n2097152" {
		t.Errorf("CONFIG GET maxmemory = %q, %v; want 2 MiB", got, err)
	}
	harnessSetGet(t, newClient(t, s.URL()))
}
