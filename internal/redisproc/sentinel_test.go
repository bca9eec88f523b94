package redisproc

import (
	"net/url"
	"testing"
	"time"
)

// TestSentinelFailover runs two failovers of a password-protected deployment:
// the primary is killed, the sentinels promote the replica, the old primary
// rejoins as a replica of the new one and is promoted in turn.
func TestSentinelFailover(t *testing.T) {
	needBinary(t)
	t.Parallel()
	start := time.Now()
	d := StartSentinelT(t, SentinelOptions{Server: Options{Password: "s3cret"}})
	t.Logf("deployment ready in %v", time.Since(start).Round(time.Millisecond))
	if len(d.Servers) != 2 || len(d.Sentinels) != 3 {
		t.Fatalf("%d data nodes, %d sentinels; want 2 and 3", len(d.Servers), len(d.Sentinels))
	}
	u, err := url.Parse(d.URL())
	if err != nil {
		t.Fatal(err)
	}
	if q := u.Query(); u.Host != d.Sentinels[0].Addr || len(q["addr"]) != 2 || q.Get("master_set") != "mymaster" {
		t.Errorf("URL() = %s", d.URL())
	}
	if pw, _ := u.User.Password(); pw != "s3cret" {
		t.Errorf("URL() = %s: no password", d.URL())
	}

	m, err := d.Master()
	if err != nil || m != d.Servers[0] {
		t.Fatalf("Master() = %v, %v; want Servers[0]", m, err)
	}
	for round := 1; round <= 2; round++ {
		mustDo(t, m, "SET", "k", "v")
		mustDo(t, m, "WAIT", "1", "5000")
		if err := m.Kill(); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		next, err := d.WaitFailover(m, 30*time.Second)
		t.Logf("round %d: failover in %v", round, time.Since(start).Round(time.Millisecond))
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if got := mustDo(t, next, "GET", "k"); got != "v" {
			t.Errorf("round %d: the promoted replica has k = %q", round, got)
		}
		if err := d.Rejoin(m, 30*time.Second); err != nil {
			for _, s := range d.Sentinels {
				t.Logf("sentinel %s:\n%s", s.Addr, s.Log())
			}
			t.Fatalf("round %d: rejoin: %v", round, err)
		}
		t.Logf("round %d: rejoined after %v", round, time.Since(start).Round(time.Millisecond))
		m = next
	}
}

// TestPauseResume: a paused server answers nothing; resumed, it answers.
func TestPauseResume(t *testing.T) {
	needBinary(t)
	t.Parallel()
	s := StartT(t, Options{})
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.do(200*time.Millisecond, "PING"); err == nil {
		t.Error("a paused server answered PING")
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	if got := mustDo(t, s, "PING"); got != "PONG" {
		t.Errorf("PING after Resume = %q", got)
	}
}
