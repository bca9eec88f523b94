package jetstream_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/redis/rueidis"

	"github.com/redisonce/redisonce/internal/must"
	"github.com/redisonce/redisonce/internal/redisproc"
	"github.com/redisonce/redisonce/internal/redistest"
	"github.com/redisonce/redisonce/store"
)

// startNATS runs a JetStream-enabled nats-server in this process on a free
// loopback port, stopped when the test ends.
func startNATS(t testing.TB) string {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT,
		JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server did not start")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s.ClientURL()
}

// startRedis runs a redis-server on a free loopback port (internal/redisproc).
func startRedis(t *testing.T) string {
	t.Helper()
	return redisproc.StartT(t, redisproc.Options{}).URL()
}

// newRedis opens a client on url with the stores' options, closed when the test ends.
var newRedis = redistest.Client

func connectJS(t *testing.T, url string) (*nats.Conn, natsjs.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

var seq atomic.Int64

// env is one test's broker and store: a stream "S<n>" on subject "s<n>.>",
// and claims under a fresh prefix.
type env struct {
	natsURL, redisURL string
	js                natsjs.JetStream
	stream            natsjs.Stream
	subject           string
	claims            *store.Claims
	prefix            string // the claims' key prefix
	rc                rueidis.Client
}

func newEnv(t *testing.T, dupWindow time.Duration) *env {
	t.Helper()
	e := &env{natsURL: startNATS(t), redisURL: startRedis(t)}
	_, e.js = connectJS(t, e.natsURL)
	n := seq.Add(1)
	e.subject = fmt.Sprintf("s%d", n)
	cfg := natsjs.StreamConfig{Name: fmt.Sprintf("S%d", n), Subjects: []string{e.subject + ".>"}, Duplicates: dupWindow}
	var err error
	if e.stream, err = e.js.CreateStream(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	e.prefix, e.rc = fmt.Sprintf("jstest:%d:", n), newRedis(t, e.redisURL)
	e.claims = must.Store(store.NewClaims(e.rc, store.WithPrefix(e.prefix)))
	return e
}

func (e *env) consumer(t *testing.T, name string, ackWait time.Duration) natsjs.Consumer {
	t.Helper()
	c, err := e.stream.CreateOrUpdateConsumer(context.Background(), natsjs.ConsumerConfig{
		Durable: name, AckPolicy: natsjs.AckExplicitPolicy, AckWait: ackWait})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (e *env) publish(t *testing.T, msgID string, data string) {
	t.Helper()
	m := nats.NewMsg(e.subject + ".pay")
	m.Data = []byte(data)
	if msgID != "" {
		m.Header.Set(nats.MsgIdHdr, msgID)
	}
	if _, err := e.js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
}
