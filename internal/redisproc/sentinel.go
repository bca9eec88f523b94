package redisproc

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// sentinelReadyTimeout bounds how long StartSentinel waits for the sentinels
// to find each other and the replicas (Sentinel announces itself on the
// primary's hello channel every 2 s and reads INFO every 10 s).
const sentinelReadyTimeout = 30 * time.Second

// SentinelOptions configures a deployment of one primary, its replicas and the
// Sentinels that watch them. The zero value is one primary, one replica and
// three sentinels (quorum 2) watching "mymaster", with down-after 1.5 s and
// failover-timeout 2 s.
type SentinelOptions struct {
	// MasterName is the monitored master set's name. Default "mymaster".
	MasterName string
	// Replicas is the number of replicas. Default 1.
	Replicas int
	// Sentinels is the number of sentinels. Default 3.
	Sentinels int
	// Quorum is how many sentinels must agree the primary is down. Default: a
	// majority of Sentinels.
	Quorum int
	// DownAfter is down-after-milliseconds: how long the primary may stay
	// silent before a sentinel considers it down. Default 1.5 s. Keep it well
	// above 1 s: a sentinel pings an instance every min(down-after, 1 s), and
	// first pings a newly promoted master only that long after the switch, so
	// with down-after 1 s a busy machine sees a healthy new master flagged
	// down, and failed over again, right after a failover.
	DownAfter time.Duration
	// FailoverTimeout is failover-timeout. Default 2 s.
	FailoverTimeout time.Duration
	// Server applies to every data node (primary and replicas); Port and Dir
	// must be zero. Its Password, when set, is also every sentinel's
	// requirepass, the data nodes' masterauth and the sentinels' auth-pass and
	// sentinel-pass, so one URL with one password reaches everything.
	Server Options
}

// Sentinel is a running deployment: data nodes and the Sentinels watching
// them, every process a Server on 127.0.0.1.
type Sentinel struct {
	// MasterName is the monitored master set's name.
	MasterName string
	// Servers are the data nodes; Servers[0] was started as the primary.
	// After a failover, ask Master which one is the primary now.
	Servers []*Server
	// Sentinels are the Sentinel processes.
	Sentinels []*Server

	o SentinelOptions
}

// StartSentinel starts a primary, its replicas and the sentinels, and waits
// until every replica is linked and every sentinel knows the primary, every
// replica (healthy) and every other sentinel — that is, until a failover can
// happen.
func StartSentinel(o SentinelOptions) (*Sentinel, error) {
	if o.MasterName == "" {
		o.MasterName = "mymaster"
	}
	if o.Replicas == 0 {
		o.Replicas = 1
	}
	if o.Sentinels == 0 {
		o.Sentinels = 3
	}
	if o.Quorum == 0 {
		o.Quorum = o.Sentinels/2 + 1
	}
	if o.DownAfter == 0 {
		o.DownAfter = 1500 * time.Millisecond
	}
	if o.FailoverTimeout == 0 {
		o.FailoverTimeout = 2 * time.Second
	}
	if o.Server.Port != 0 || o.Server.Dir != "" || o.Server.SentinelConfig != "" {
		return nil, errors.New("redisproc: SentinelOptions.Server must not set Port, Dir or SentinelConfig")
	}
	if o.Replicas < 0 || o.Sentinels < 1 || o.Quorum < 1 || o.Quorum > o.Sentinels {
		return nil, fmt.Errorf("redisproc: %d replicas, %d sentinels, quorum %d: not a deployment", o.Replicas, o.Sentinels, o.Quorum)
	}
	d := &Sentinel{MasterName: o.MasterName, o: o}
	fail := func(err error) (*Sentinel, error) {
		_ = d.Stop()
		return nil, err
	}
	node := o.Server
	// A (re)joining replica syncs at once, not after the default 5 s wait
	// for more replicas to share the transfer.
	node.Args = append([]string{"--repl-diskless-sync-delay", "0"}, node.Args...)
	if node.Password != "" {
		node.Args = append(node.Args, "--masterauth", node.Password)
	}
	primary, err := Start(node)
	if err != nil {
		return fail(err)
	}
	d.Servers = append(d.Servers, primary)
	for range o.Replicas {
		r := node
		r.Args = append(append([]string{}, node.Args...), "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port))
		s, err := Start(r)
		if err != nil {
			return fail(err)
		}
		d.Servers = append(d.Servers, s)
	}
	conf := d.sentinelConfig(primary)
	for range o.Sentinels {
		s, err := Start(Options{Binary: o.Server.Binary, Password: o.Server.Password, SentinelConfig: conf})
		if err != nil {
			return fail(err)
		}
		d.Sentinels = append(d.Sentinels, s)
	}
	deadline := time.Now().Add(sentinelReadyTimeout)
	for _, r := range d.Servers[1:] {
		if err := waitLinked(primary, r, deadline); err != nil {
			return fail(err)
		}
	}
	if err := d.waitSentinels(primary, d.Servers[1:], deadline); err != nil {
		return fail(err)
	}
	return d, nil
}

func (d *Sentinel) sentinelConfig(primary *Server) string {
	o, name := d.o, d.o.MasterName
	var b strings.Builder
	fmt.Fprintf(&b, "sentinel monitor %s 127.0.0.1 %d %d\n", name, primary.Port, o.Quorum)
	fmt.Fprintf(&b, "sentinel down-after-milliseconds %s %d\n", name, o.DownAfter.Milliseconds())
	fmt.Fprintf(&b, "sentinel failover-timeout %s %d\n", name, o.FailoverTimeout.Milliseconds())
	fmt.Fprintf(&b, "sentinel parallel-syncs %s 1\n", name)
	if pw := o.Server.Password; pw != "" {
		fmt.Fprintf(&b, "sentinel auth-pass %s %s\n", name, pw)
		fmt.Fprintf(&b, "sentinel sentinel-pass %s\n", pw)
	}
	return b.String()
}

// URL returns the deployment as a rueidis Sentinel URL:
// redis://[:password@]sentinel-1?addr=sentinel-2&addr=sentinel-3&master_set=NAME.
func (d *Sentinel) URL() string {
	u := url.URL{Scheme: "redis", Host: d.Sentinels[0].Addr}
	if pw := d.o.Server.Password; pw != "" {
		u.User = url.UserPassword("", pw)
	}
	q := url.Values{}
	for _, s := range d.Sentinels[1:] {
		q.Add("addr", s.Addr)
	}
	q.Set("master_set", d.MasterName)
	u.RawQuery = q.Encode()
	return u.String()
}

// Master returns the data node that the sentinels name as the primary, once
// every running sentinel names the same one and it reports role:master.
func (d *Sentinel) Master() (*Server, error) {
	var addr string
	for _, s := range d.Sentinels {
		if s.Pid() == 0 {
			continue
		}
		a, err := d.masterAddr(s)
		if err != nil {
			return nil, err
		}
		if addr != "" && a != addr {
			return nil, fmt.Errorf("redisproc: sentinels disagree on the master: %s and %s", addr, a)
		}
		addr = a
	}
	m := d.server(addr)
	if m == nil {
		return nil, fmt.Errorf("redisproc: the sentinels name %q, not a data node of this deployment", addr)
	}
	info, err := m.Do("INFO", "replication")
	if err != nil {
		return nil, err
	}
	if role := parseInfo(info)["role"]; role != "master" {
		return nil, fmt.Errorf("redisproc: the sentinels name %s, which reports role %q", addr, role)
	}
	return m, nil
}

// WaitFailover waits until every sentinel names a master other than old and
// that server reports role:master, and returns it.
func (d *Sentinel) WaitFailover(old *Server, timeout time.Duration) (*Server, error) {
	deadline := time.Now().Add(timeout)
	for {
		m, err := d.Master()
		if err == nil && m != old {
			return m, nil
		}
		if err == nil {
			err = fmt.Errorf("still %s", old.Addr)
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("redisproc: no failover from %s after %s: %w", old.Addr, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Rejoin restarts s (a data node that was killed) as a replica of the current
// master and waits until it is linked and every sentinel sees it as a healthy
// replica, so that it can be promoted by the next failover.
func (d *Sentinel) Rejoin(s *Server, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	m, err := d.Master()
	if err != nil {
		return err
	}
	if err := s.RestartAsReplicaOf(m.Addr); err != nil {
		return err
	}
	if err := waitLinked(m, s, deadline); err != nil {
		return err
	}
	var replicas []*Server
	for _, r := range d.Servers {
		if r != m {
			replicas = append(replicas, r)
		}
	}
	return d.waitSentinels(m, replicas, deadline)
}

// Stop stops every process of the deployment (sentinels first, so they do
// not fail over while the data nodes go away) and returns the first error.
func (d *Sentinel) Stop() error {
	var first error
	for _, s := range append(append([]*Server{}, d.Sentinels...), d.Servers...) {
		if err := s.Stop(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (d *Sentinel) server(addr string) *Server {
	for _, s := range d.Servers {
		if s.Addr == addr {
			return s
		}
	}
	return nil
}

func (d *Sentinel) masterAddr(s *Server) (string, error) {
	r, err := s.Do("SENTINEL", "GET-MASTER-ADDR-BY-NAME", d.MasterName)
	if err != nil {
		return "", err
	}
	host, port, ok := strings.Cut(r, "\n")
	if !ok {
		return "", fmt.Errorf("redisproc: sentinel %s: master address %q", s.Addr, r)
	}
	return net.JoinHostPort(host, port), nil
}

// waitSentinels waits until every sentinel names master, sees len(sentinels)-1
// other sentinels, and lists every one of replicas with flags "slave" and
// master-link-status ok.
func (d *Sentinel) waitSentinels(master *Server, replicas []*Server, deadline time.Time) error {
	var last error
	for {
		if last = d.checkSentinels(master, replicas); last == nil {
			return nil
		}

		if time.Now().After(deadline) {
			return fmt.Errorf("redisproc: sentinels not ready: %w", last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (d *Sentinel) checkSentinels(master *Server, replicas []*Server) error {
	for _, s := range d.Sentinels {
		a, err := d.masterAddr(s)
		if err != nil {
			return err
		}
		if a != master.Addr {
			return fmt.Errorf("sentinel %s names master %s, want %s", s.Addr, a, master.Addr)
		}
		r, err := s.Do("SENTINEL", "MASTER", d.MasterName)
		if err != nil {
			return err
		}
		m := pairs(strings.Split(r, "\n"))
		if m["flags"] != "master" || m["num-other-sentinels"] != strconv.Itoa(len(d.Sentinels)-1) {
			return fmt.Errorf("sentinel %s: master flags %q, %s other sentinels", s.Addr, m["flags"], m["num-other-sentinels"])
		}
		r, err = s.Do("SENTINEL", "REPLICAS", d.MasterName)
		if err != nil {
			return err
		}
		seen := map[string]map[string]string{}
		for _, rep := range splitRecords(strings.Split(r, "\n")) {
			seen[net.JoinHostPort(rep["ip"], rep["port"])] = rep
		}
		for _, want := range replicas {
			rep, ok := seen[want.Addr]
			if !ok || rep["flags"] != "slave" || rep["master-link-status"] != "ok" {
				return fmt.Errorf("sentinel %s: replica %s: %v", s.Addr, want.Addr, rep)
			}
		}
	}
	return nil
}

// pairs reads a flattened key, value, key, value... reply.
func pairs(f []string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(f); i += 2 {
		m[f[i]] = f[i+1]
	}
	return m
}

// splitRecords reads the flattened reply of SENTINEL REPLICAS (a list of
// key/value lists, each starting with "name").
func splitRecords(f []string) []map[string]string {
	var out []map[string]string
	var cur map[string]string
	for i := 0; i+1 < len(f); i += 2 {
		if f[i] == "name" {
			cur = map[string]string{}
			out = append(out, cur)
		}
		if cur != nil {
			cur[f[i]] = f[i+1]
		}
	}
	return out
}

// WaitLinked waits up to timeout until replica reports master_link_status:up
// and primary lists it as online, as StartSentinel does for its replicas: a
// test that starts a replica itself (Args --replicaof) calls it before
// counting on WAIT.
func WaitLinked(primary, replica *Server, timeout time.Duration) error {
	return waitLinked(primary, replica, time.Now().Add(timeout))
}

// waitLinked waits until replica s reports master_link_status:up and its
// primary lists it as online. (After a diskless sync the primary counts a
// replica online, and WAIT counts it, only from its first REPLCONF ACK, which
// a replica sends once a second.)
func waitLinked(primary, s *Server, deadline time.Time) error {
	for {
		info, err := s.Do("INFO", "replication")
		if err == nil && parseInfo(info)["master_link_status"] == "up" {
			var pinfo string
			if pinfo, err = primary.Do("INFO", "replication"); err == nil &&
				strings.Contains(pinfo, ",port="+strconv.Itoa(s.Port)+",state=online,") {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redisproc: replica %s not linked: %v %s", s.Addr, err, info)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// StartSentinelT starts a deployment for a test: StartSentinel, Stop with
// t.Cleanup, t.Fatalf when it cannot start.
func StartSentinelT(t TB, o SentinelOptions) *Sentinel {
	t.Helper()
	d, err := StartSentinel(o)
	if err != nil {
		t.Fatalf("%v", err)
		return nil
	}
	t.Cleanup(func() {
		if err := d.Stop(); err != nil {
			t.Fatalf("%v", err)
		}
	})
	return d
}
