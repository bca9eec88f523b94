package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// waitRecheck bounds how long a waiter (AcquireOptions.Wait) trusts the
// notification to come: it reads the record again at least this often. A
// final write publishes to the watched record's waiters (watch.lua,
// update.lua, delete.lua); an expiry, an unfenced Delete, or a notice lost
// with a connection publishes nothing, and the re-read finds them.
const waitRecheck = time.Second

var scriptWatch = mustScript("watch")

// errSubscriptionEnded: the shard channel subscription ended before the
// server confirmed it.
var errSubscriptionEnded = errors.New("the subscription ended before it was confirmed")

// waiters shares one SSUBSCRIBE per channel among the Records' waiters in
// this process: rueidis delivers a channel's SUNSUBSCRIBE to every local
// subscriber of it, so each waiter cannot unsubscribe on its own.
type waiters struct {
	mu sync.Mutex
	m  map[string]*channelWait
}

// channelWait is one subscription to a record's channel (the key itself).
type channelWait struct {
	n      int           // waiters sharing it; guarded by waiters.mu
	ready  chan struct{} // closed once subscribed, or when it failed (err)
	fired  chan struct{} // closed on a message, or when the subscription ended
	err    error         // why it failed before ready; read after ready closed
	cancel context.CancelFunc
	once   [2]sync.Once
}

func (w *channelWait) setReady(err error) {
	w.once[0].Do(func() { w.err = err; close(w.ready) })
}

func (w *channelWait) fire() { w.once[1].Do(func() { close(w.fired) }) }

// join returns the subscription to channel, starting one if none is live.
func (ws *waiters) join(c rueidis.Client, channel string) *channelWait {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if w := ws.m[channel]; w != nil {
		w.n++
		return w
	}
	if ws.m == nil {
		ws.m = map[string]*channelWait{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &channelWait{n: 1, ready: make(chan struct{}), fired: make(chan struct{}), cancel: cancel}
	ws.m[channel] = w
	// drop removes w from the map, so that the next waiter subscribes anew.
	drop := func() {
		ws.mu.Lock()
		if ws.m[channel] == w {
			delete(ws.m, channel)
		}
		ws.mu.Unlock()
	}
	ctx = rueidis.WithOnSubscriptionHook(ctx, func(s rueidis.PubSubSubscription) {
		if s.Kind == "ssubscribe" {
			w.setReady(nil)
		}
	})
	// Receive leaves the server subscribed when it returns; unsubscribe on
	// the same connection.
	ctx = rueidis.WithOnReceiveReturnHook(ctx, func(err error, cc rueidis.CommandClient) error {
		uctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = cc.Do(uctx, cc.B().Sunsubscribe().Channel(channel).Build()).Error()
		return err
	})
	go func() {
		err := c.Receive(ctx, c.B().Ssubscribe().Channel(channel).Build(), func(rueidis.PubSubMessage) {
			w.fire()
			go drop() // not on rueidis's reader goroutine
		})
		if err == nil {
			err = errSubscriptionEnded
		}
		w.setReady(err)
		w.fire()
		drop()
	}()
	return w
}

// leave ends the caller's share of w; the last one out ends the subscription.
func (ws *waiters) leave(w *channelWait, channel string) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if w.n--; w.n == 0 {
		if ws.m[channel] == w {
			delete(ws.m, channel)
		}
		w.cancel()
	}
}

// errRejoin: the subscription was spent (a message came, or it ended):
// subscribe again.
var errRejoin = errors.New("rejoin")

// waitDone is how Records.Do waits for another owner's final write:
// subscribe to the record's shard channel (SSUBSCRIBE prefix..key), mark the
// record watched if it is still pending (watch.lua), then wait for the
// message, calling again (Do's next acquire) after each message and at least
// every waitRecheck, until again says the wait is over or until passes. It
// returns ctx's error when ctx ends, or the subscription's or the script's
// error.
func (s *redisRecords) waitDone(ctx context.Context, key string, until time.Time, again func() bool) error {
	k := s.key(key)
	for {
		w := s.waits.join(s.c.Client, k)
		err := s.waitOn(ctx, w, key, k, until, again)
		s.waits.leave(w, k)
		if err != errRejoin {
			return err
		}
	}
}

// waitOn is waitDone on one subscription, w.
func (s *redisRecords) waitOn(ctx context.Context, w *channelWait, key, k string, until time.Time, again func() bool) error {
	subscribed := false
	for {
		left := time.Until(until)
		if left <= 0 {
			return nil
		}
		t := time.NewTimer(min(left, waitRecheck))
		if !subscribed {
			select {
			case <-w.ready:
			case <-t.C:
				if again() {
					return nil
				}
				continue
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
			switch {
			case w.err == errSubscriptionEnded:
				// Another subscription's SUNSUBSCRIBE on the channel ended it
				// (rueidis tells every local subscriber): look, then again.
				t.Stop()
				if again() {
					return nil
				}
				return errRejoin
			case w.err != nil:
				t.Stop()
				if cerr := ctx.Err(); cerr != nil {
					return cerr
				}
				return fmt.Errorf("redisonce: do %q: waiting for the record: SSUBSCRIBE %s: %w", key, k, w.err)
			}
			subscribed = true
		}
		n, err := replyInt("do", key, s.exec(ctx, scriptWatch, k))
		if err != nil {
			t.Stop()
			return err
		}
		if n == 0 { // no longer pending: look now
			t.Stop()
			if again() {
				return nil
			}
			continue
		}
		select {
		case <-w.fired:
			t.Stop()
			if again() {
				return nil
			}
			return errRejoin
		case <-t.C:
			if again() {
				return nil
			}
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
	}
}

// waitDone is redisRecords.waitDone in memory: the final writes (an update
// to another status, a delete) close the key's channel.
func (s *memRecords) waitDone(ctx context.Context, key string, until time.Time, again func() bool) error {
	for {
		left := time.Until(until)
		if left <= 0 {
			return nil
		}
		s.mu.Lock()
		r, ok := s.live(key, s.nowMS())
		if !ok || r.status != string(StatusPending) {
			s.mu.Unlock()
			if again() {
				return nil
			}
			continue
		}
		if s.waits == nil {
			s.waits = map[string]chan struct{}{}
		}
		ch := s.waits[key]
		if ch == nil {
			ch = make(chan struct{})
			s.waits[key] = ch
		}
		s.mu.Unlock()
		t := time.NewTimer(min(left, waitRecheck))
		select {
		case <-ch:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		t.Stop()
		if again() {
			return nil
		}
	}
}

// notify wakes key's waiters. Callers hold mu.
func (s *memRecords) notify(key string) {
	if ch := s.waits[key]; ch != nil {
		close(ch)
		delete(s.waits, key)
	}
}
