package demo

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"

	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/cmd/redisonce/internal/server"
	"github.com/redisonce/redisonce/store"
)

// process is one simulated process of the fleet: its own client, whose
// connections kill cuts at once, as when the process dies.
type process struct {
	client rueidis.Client
	mu     sync.Mutex
	dead   bool
	conns  []net.Conn
}

// newProcess opens a client on the demo's server for one simulated process,
// with the options the stores open their own clients with
// (store.ClientOptions: Sentinel credentials included).
func (d *Env) newProcess() (*process, error) {
	opt, err := store.ClientOptions(d.url)
	if err != nil {
		return nil, err
	}
	p := &process{}
	dial := opt.DialCtxFn // set for unix:// URLs
	opt.DialCtxFn = func(ctx context.Context, addr string, nd *net.Dialer, tc *tls.Config) (net.Conn, error) {
		p.mu.Lock()
		dead := p.dead
		p.mu.Unlock()
		if dead {
			return nil, errProcessDead
		}
		var c net.Conn
		var err error
		switch {
		case dial != nil:
			c, err = dial(ctx, addr, nd, tc)
		case tc != nil:
			c, err = (&tls.Dialer{NetDialer: nd, Config: tc}).DialContext(ctx, "tcp", addr)
		default:
			c, err = nd.DialContext(ctx, "tcp", addr)
		}
		if err != nil {
			return nil, err
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.dead {
			c.Close()
			return nil, errProcessDead
		}
		p.conns = append(p.conns, c)
		return c, nil
	}
	opt.DisableRetry = true
	if p.client, err = rueidis.NewClient(opt); err != nil {
		return nil, server.Explain(err, server.Redacted(d.url))
	}
	return p, nil
}

var errProcessDead = errors.New("the process is dead")

// kill cuts every connection of the process and refuses new ones: nothing it
// still tries to send reaches Redis.
func (p *process) kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dead = true
	for _, c := range p.conns {
		c.Close()
	}
}
