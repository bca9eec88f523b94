//go:build linux

package scripts_test

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redisonce/redisonce/internal/faultnet"
	"github.com/redisonce/redisonce/internal/redisproc"
)

var netnsSeq atomic.Int32

// netns is a network namespace joined to the host by a veth pair: the host
// side has hostIP, the namespace side nsIP (a /30 of 10.213.0.0/16).
type netns struct {
	name, hostIP, nsIP string
}

// newNetns makes a namespace for this test and removes it (with its veth and
// its iptables rules) when the test ends. It skips the test, saying why,
// where it cannot: not root, no iproute2 or iptables, no namespaces, or no
// netfilter in the namespace.
func newNetns(t *testing.T) *netns {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root: skipped (CI runs as root)")
	}
	for _, bin := range []string{"ip", "iptables"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("no %s on PATH (apt-get install iproute2 iptables): skipped", bin)
		}
	}
	n := int(netnsSeq.Add(1))
	id := fmt.Sprintf("%d%d", os.Getpid()%1000, n)
	sub := (os.Getpid()*7 + n*4) % 16000 // /30 blocks of 10.213.0.0/16
	ns := &netns{
		name:   "lease-" + id,
		hostIP: fmt.Sprintf("10.213.%d.%d", sub/64, (sub%64)*4+1),
		nsIP:   fmt.Sprintf("10.213.%d.%d", sub/64, (sub%64)*4+2),
	}
	host, peer := "lsh"+id, "lsn"+id
	run := func(args ...string) error {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	if err := run("ip", "netns", "add", ns.name); err != nil {
		t.Skipf("cannot create a network namespace here: %v", err)
	}
	t.Cleanup(func() {
		_ = run("ip", "netns", "del", ns.name) // takes the veth and the namespace's rules with it
		_ = exec.Command("ip", "link", "del", host).Run()
	})
	for _, args := range [][]string{
		{"ip", "link", "add", host, "type", "veth", "peer", "name", peer},
		{"ip", "link", "set", peer, "netns", ns.name},
		{"ip", "addr", "add", ns.hostIP + "/30", "dev", host},
		{"ip", "link", "set", host, "up"},
		{"ip", "netns", "exec", ns.name, "ip", "addr", "add", ns.nsIP + "/30", "dev", peer},
		{"ip", "netns", "exec", ns.name, "ip", "link", "set", peer, "up"},
		{"ip", "netns", "exec", ns.name, "ip", "link", "set", "lo", "up"},
	} {
		if err := run(args...); err != nil {
			t.Fatal(err)
		}
	}
	if err := ns.partition(true); err != nil {
		t.Skipf("no iptables in a network namespace here: %v", err)
	}
	if err := ns.partition(false); err != nil {
		t.Fatal(err)
	}
	return ns
}

// partition adds (true) or removes (false) the namespace's rule that drops
// every packet it sends to the host side: the owner's route to Redis is cut
// without a reset, as by a failed link or a firewall.
func (ns *netns) partition(on bool) error {
	op := "-A"
	if !on {
		op = "-D"
	}
	args := []string{"netns", "exec", ns.name, "iptables", op, "OUTPUT", "-d", ns.hostIP, "-j", "DROP"}
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// TestLeasePartitionedOwner: owner A runs in its own network namespace and
// reaches Redis through a veth; once it runs fn, its route to Redis is cut by
// an iptables DROP at an offset after its claim (between extensions, or right
// on one), and B, on the host, tries every 2 ms. In every trial B's fn must
// start after A saw its context cancelled (A checks ctx.Err() every ms), and
// A must not act after B started. Claims and Records, two lease lengths.
func TestLeasePartitionedOwner(t *testing.T) {
	// Not parallel: its margins are tens of ms, and a binary busy with
	// the parallel tests delays timers and the proxy far more than that.
	ns := newNetns(t)
	srv := newServer(t, redisproc.Options{})
	// The owner dials the host side of the veth; a proxy there forwards to
	// the server on loopback.
	p, err := faultnet.ListenOn(ns.hostIP+":0", srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	base := newClient(t, srv.URL())
	trial := 0
	for _, lease := range []time.Duration{500 * time.Millisecond, time.Second} {
		for _, kind := range []string{"claims", "records", "batch"} {
			// The cut lands (1+trial%4)*lease/8 + lease/32 after A is ready
			// (plus the time iptables takes): before, on and after the
			// extensions that go out every lease/4.
			offset := lease/4*time.Duration(1+trial%4)/2 + lease/32
			trial++
			t.Run(fmt.Sprintf("%s/%v/cut+%v", kind, lease, offset), func(t *testing.T) {
				prefix := uniquePrefix(t)
				a := startOwner(t, []string{"ip", "netns", "exec", ns.name}, "redis://"+p.Addr(), kind, prefix, lease)
				a.read(t, "ready", 30*time.Second)
				ready := time.Now()
				time.Sleep(time.Until(ready.Add(offset)))
				if err := ns.partition(true); err != nil {
					t.Fatal(err)
				}
				defer func() { _ = ns.partition(false) }()
				cut := time.Now()
				bStart := takeOver(t, kind, base, prefix, lease, 20*lease)
				a.read(t, "lost", 10*time.Second)
				lostAt := time.Unix(0, a.lostAt)
				t.Logf("A ready %v; cut +%v; A saw the loss +%v; B started +%v (lease %v)", ready.Format("15:04:05.000"),
					cut.Sub(ready), lostAt.Sub(ready), bStart.Sub(ready), lease)
				if !lostAt.Before(bStart) {
					t.Errorf("B's fn started %v before A saw its context cancelled", lostAt.Sub(bStart))
				}
				if n := a.actsFrom(bStart); n != 0 {
					t.Errorf("A acted %d times after B's takeover", n)
				}
			})
		}
	}
}
