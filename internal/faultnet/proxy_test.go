package faultnet

import (
	"bufio"
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// echo starts a line echo server and returns its address.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader) (time.Duration, error) {
	t.Helper()
	start := time.Now()
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return 0, err
	}
	line, err := r.ReadString('\n')
	if err == nil && line != "ping\n" {
		t.Fatalf("echo = %q", line)
	}
	return time.Since(start), err
}

// The proxy's faults as a client sees them: latency adds 2d to a round trip
// (never less), a freeze holds bytes until the thaw, Cut ends the connection
// with EOF, Reset with ECONNRESET, Refuse closes new connections.
func TestProxy(t *testing.T) {
	p, err := Listen(echo(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	dial := func() (net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", p.Addr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		return c, bufio.NewReader(c)
	}
	c, r := dial()
	if _, err := roundTrip(t, c, r); err != nil {
		t.Fatal(err)
	}

	const d = 50 * time.Millisecond
	p.SetLatency(d)
	if rtt, err := roundTrip(t, c, r); err != nil || rtt < 2*d {
		t.Errorf("round trip with latency %v each way = %v, %v; want >= %v", d, rtt, err, 2*d)
	}
	p.SetLatency(0)

	p.Freeze()
	const frozen = 150 * time.Millisecond
	time.AfterFunc(frozen, p.Thaw)
	if rtt, err := roundTrip(t, c, r); err != nil || rtt < frozen {
		t.Errorf("round trip across a %v freeze = %v, %v; want >= the freeze", frozen, rtt, err)
	}

	p.Cut()
	if _, err := roundTrip(t, c, r); !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
		t.Errorf("round trip after Cut: %v, want EOF", err)
	}

	c2, r2 := dial()
	if _, err := roundTrip(t, c2, r2); err != nil {
		t.Fatalf("a new connection after Cut: %v", err)
	}
	p.Reset()
	if _, err := roundTrip(t, c2, r2); !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
		t.Errorf("round trip after Reset: %v, want a connection reset", err)
	}

	p.Refuse(true)
	c3, r3 := dial()
	if _, err := roundTrip(t, c3, r3); err == nil {
		t.Error("a connection opened while refusing carried a round trip")
	}
	if n := p.Conns(); n != 0 {
		t.Errorf("Conns = %d after Cut, Reset and a refused connection, want 0", n)
	}
}
