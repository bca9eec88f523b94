package redisproc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redisonce/redisonce/internal/proc"
)

// clusterReadyTimeout bounds how long StartCluster waits for every node to
// report a healthy cluster. A fresh master waits 2 s before it turns its state
// to ok (CLUSTER_WRITABLE_DELAY in Redis), so this is never instant.
const clusterReadyTimeout = 30 * time.Second

// Cluster is a Redis Cluster of masters only, every node a Server.
type Cluster struct {
	// Nodes are the cluster's masters, in start order.
	Nodes []*Server
}

// StartCluster starts a cluster of masters (no replicas) and waits until every
// node reports cluster_state:ok, cluster_slots_ok:16384 and knows every other
// node — that is, until any node gives a client the full slot map.
//
// o applies to every node, with Cluster forced on. Defaults differ per node:
// with o.Dir set, node i uses o.Dir/node<i>; with o.Port set, node i uses
// o.Port+i (and the bus port o.Port+i+10000).
//
// One master gets all 16384 slots with CLUSTER ADDSLOTSRANGE. Three or more
// are joined by `redis-cli --cluster create`; redis-cli is looked for next to
// the redis-server binary, then on PATH. Two masters are refused because
// redis-cli does not create such a cluster.
func StartCluster(masters int, o Options) (*Cluster, error) {
	switch {
	case masters < 1:
		return nil, fmt.Errorf("redisproc: a cluster needs at least 1 master, not %d", masters)
	case masters == 2:
		return nil, errors.New("redisproc: a cluster of 2 masters is not supported (redis-cli --cluster create needs 3); use 1 or 3+")
	}
	if o.Binary == "" {
		bin, err := LookPath()
		if err != nil {
			return nil, err
		}
		o.Binary = bin
	}
	o.Cluster = true
	var cli string
	if masters > 1 {
		var err error
		if cli, err = lookRedisCLI(o.Binary); err != nil {
			return nil, err
		}
	}

	c := &Cluster{}
	for i := range masters {
		oi := o
		if o.Dir != "" {
			oi.Dir = filepath.Join(o.Dir, "node"+strconv.Itoa(i))
		}
		if o.Port != 0 {
			oi.Port = o.Port + i
		}
		s, err := Start(oi)
		if err != nil {
			c.Stop()
			return nil, err
		}
		c.Nodes = append(c.Nodes, s)
	}

	var err error
	if masters == 1 {
		err = c.assignAllSlots()
	} else {
		err = c.create(cli, o.Password)
	}
	if err == nil {
		err = c.waitOK(clusterReadyTimeout)
	}
	if err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// lookRedisCLI finds redis-cli next to the redis-server binary, then on PATH.
// Its error wraps ErrNotInstalled.
func lookRedisCLI(serverBin string) (string, error) {
	if p := filepath.Join(filepath.Dir(serverBin), "redis-cli"); proc.IsExecutable(p) {
		return p, nil
	}
	if p, err := exec.LookPath("redis-cli"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("redisproc: redis-cli %w: not found next to %s or on PATH; "+
		"install it with `sudo apt-get install redis-tools` (Debian/Ubuntu) or `brew install redis` (macOS)", ErrNotInstalled, serverBin)
}

// assignAllSlots gives the only node every slot.
func (c *Cluster) assignAllSlots() error {
	n := c.Nodes[0]
	_, err := n.Do("CLUSTER", "ADDSLOTSRANGE", "0", "16383")
	var re ReplyError
	if errors.As(err, &re) && strings.Contains(strings.ToLower(string(re)), "unknown subcommand") {
		// Before Redis 7.0: list the slots one by one.
		args := make([]string, 0, 2+16384)
		args = append(args, "CLUSTER", "ADDSLOTS")
		for slot := range 16384 {
			args = append(args, strconv.Itoa(slot))
		}
		_, err = n.Do(args...)
	}
	if err != nil {
		return fmt.Errorf("redisproc: assign slots on %s: %w", n.Addr, err)
	}
	return nil
}

// create joins the nodes with redis-cli --cluster create.
func (c *Cluster) create(cli, password string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	cmd := exec.CommandContext(ctx, cli, args...)
	cmd.Env = os.Environ()
	if password != "" {
		// Through the environment, not -a, so it does not show in ps.
		cmd.Env = append(cmd.Env, "REDISCLI_AUTH="+password)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("redisproc: %s --cluster create: %w\n%s", cli, err, out)
	}
	return nil
}

// waitOK polls CLUSTER INFO on every node until all report the cluster
// healthy and complete.
func (c *Cluster) waitOK(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := c.checkOK()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redisproc: cluster not ready after %s: %w", timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *Cluster) checkOK() error {
	want := map[string]string{
		"cluster_state":       "ok",
		"cluster_slots_ok":    "16384",
		"cluster_known_nodes": strconv.Itoa(len(c.Nodes)),
	}
	for _, n := range c.Nodes {
		info, err := n.Do("CLUSTER", "INFO")
		if err != nil {
			return fmt.Errorf("%s: %w", n.Addr, err)
		}
		fields := parseInfo(info)
		for k, v := range want {
			if fields[k] != v {
				return fmt.Errorf("%s reports %s:%s, want %s", n.Addr, k, fields[k], v)
			}
		}
	}
	return nil
}

// parseInfo parses "key:value" lines of INFO or CLUSTER INFO.
func parseInfo(info string) map[string]string {
	m := make(map[string]string)
	for line := range strings.Lines(info) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			m[k] = v
		}
	}
	return m
}

// Addrs returns every node's "127.0.0.1:port".
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr
	}
	return addrs
}

// URL returns the first node's URL; a cluster client discovers the others
// from it.
func (c *Cluster) URL() string { return c.Nodes[0].URL() }

// Stop stops every node (in parallel) and returns their errors joined.
func (c *Cluster) Stop() error {
	errs := make([]error, len(c.Nodes))
	var wg sync.WaitGroup
	for i, n := range c.Nodes {
		wg.Go(func() { errs[i] = n.Stop() })
	}
	wg.Wait()
	return errors.Join(errs...)
}
