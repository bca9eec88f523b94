// Package faultnet is a TCP proxy for fault tests: it stands between a client
// and a server on loopback and can delay, freeze, cut and reset the traffic
// while the test runs. Standard library only, so any test of the repository
// (or of a module beside it) can use it.
//
//	p, err := faultnet.Listen(serverAddr) // clients dial p.Addr()
//	p.SetLatency(100 * time.Millisecond)  // each direction: +100 ms (RTT +200 ms)
//	p.Freeze()                            // bytes stop flowing, connections stay open
//	p.Thaw()
//	p.Cut()                               // every connection closed (FIN); new ones accepted
//	p.Reset()                             // every connection reset (RST)
//	p.Refuse(true)                        // new connections are closed at once
package faultnet

import (
	"net"
	"sync"
	"time"
)

// Proxy forwards every connection accepted on Addr to the target address.
// Its methods are safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	latency time.Duration
	frozen  bool
	thaw    chan struct{} // closed by Thaw
	refuse  bool
	conns   map[*pair]struct{}
	closed  bool
	wg      sync.WaitGroup
}

// pair is one proxied connection: the client's side and the server's side.
type pair struct {
	client, server *net.TCPConn
	once           sync.Once
	dead           chan struct{} // closed when the pair is closed
}

// Listen starts a proxy to target on a free loopback port.
func Listen(target string) (*Proxy, error) { return ListenOn("127.0.0.1:0", target) }

// ListenOn starts a proxy to target listening on addr ("10.1.2.1:0": a free
// port on a veth's address, for a client in another network namespace).
func ListenOn(addr, target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[*pair]struct{}{}, thaw: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients dial instead of the target's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetLatency delays every byte by d in each direction (a round trip grows by
// 2d), from the moment the proxy reads it; order is kept. 0 removes it.
func (p *Proxy) SetLatency(d time.Duration) {
	p.mu.Lock()
	p.latency = d
	p.mu.Unlock()
}

// Freeze stops forwarding: bytes read are held (connections stay open and
// new ones are accepted and held too) until Thaw, as on a link that stalls
// without a reset.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	if !p.frozen {
		p.frozen, p.thaw = true, make(chan struct{})
	}
	p.mu.Unlock()
}

// Thaw forwards what Freeze held, in order, and what follows.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	if p.frozen {
		p.frozen = false
		close(p.thaw)
	}
	p.mu.Unlock()
}

// Refuse makes the proxy close every new connection at once (true) or accept
// them again (false); connections already open are left alone.
func (p *Proxy) Refuse(on bool) {
	p.mu.Lock()
	p.refuse = on
	p.mu.Unlock()
}

// Cut closes every open connection on both sides (an orderly FIN); bytes
// held by Freeze or a latency are dropped.
func (p *Proxy) Cut() { p.drop(false) }

// Reset resets every open connection on both sides (RST: SO_LINGER 0).
func (p *Proxy) Reset() { p.drop(true) }

// Conns is the number of connections open through the proxy.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Close stops the proxy and closes every connection through it.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.drop(true)
	p.Thaw()
	p.wg.Wait()
	return err
}

func (p *Proxy) drop(reset bool) {
	p.mu.Lock()
	conns := p.conns
	p.conns = map[*pair]struct{}{}
	p.mu.Unlock()
	for c := range conns {
		if reset {
			_ = c.client.SetLinger(0)
			_ = c.server.SetLinger(0)
		}
		p.close(c)
	}
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse, closed := p.refuse, p.closed
		p.mu.Unlock()
		if refuse || closed {
			_ = c.Close()
			continue
		}
		s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		pr := &pair{client: c.(*net.TCPConn), server: s.(*net.TCPConn), dead: make(chan struct{})}
		p.mu.Lock()
		p.conns[pr] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pump(pr, pr.client, pr.server)
		go p.pump(pr, pr.server, pr.client)
	}
}

// chunk is bytes read at a time, to be written once at + the latency passed.
type chunk struct {
	b  []byte
	at time.Time
}

// pump copies src to dst through a queue, so that reading goes on (and
// timestamps stay true) while writes wait for the latency or a thaw.
func (p *Proxy) pump(pr *pair, src, dst *net.TCPConn) {
	defer p.wg.Done()
	q := make(chan chunk, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range q {
			if !p.wait(pr, c.at) {
				break
			}
			if _, err := dst.Write(c.b); err != nil {
				break
			}
		}
		p.close(pr)
		for range q { // let the reader finish
		}
	}()
	for {
		b := make([]byte, 32<<10)
		n, err := src.Read(b)
		if n > 0 {
			q <- chunk{b: b[:n], at: time.Now()}
		}
		if err != nil {
			break
		}
	}
	close(q)
	<-done
	p.close(pr)
}

// wait blocks until a chunk read at at may be written: its latency passed
// and the proxy is not frozen. False when the proxy closed.
func (p *Proxy) wait(pr *pair, at time.Time) bool {
	for {
		p.mu.Lock()
		frozen, thaw, latency, closed := p.frozen, p.thaw, p.latency, p.closed
		p.mu.Unlock()
		if closed {
			return false
		}
		if frozen {
			select {
			case <-thaw:
			case <-pr.dead:
				return false
			}
			continue
		}
		if d := time.Until(at.Add(latency)); d > 0 {
			// One sleep, not a polling loop: on a busy machine every wake-up
			// may come late, and the delays would add up. A Freeze that
			// begins meanwhile is seen when it ends.
			time.Sleep(d)
			continue
		}
		return true
	}
}

// close closes both sides of pr (once the first pump ends, the other follows).
func (p *Proxy) close(pr *pair) {
	p.mu.Lock()
	delete(p.conns, pr)
	p.mu.Unlock()
	pr.once.Do(func() {
		close(pr.dead)
		_ = pr.client.Close()
		_ = pr.server.Close()
	})
}
