package subscribe_test

import (
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/ffriver/ffriver/subscribe"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
)

// proxy is a TCP relay in front of the real server that can go down like a
// restarting server: every connection is cut and new ones are refused until
// it comes back on the same port.
type proxy struct {
	t        testing.TB
	upstream string
	addr     string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]bool
	wg    sync.WaitGroup
}

func newProxy(t testing.TB, upstream string) *proxy {
	p := &proxy{t: t, upstream: upstream, conns: map[net.Conn]bool{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(func() {
		p.down()
		p.wg.Wait()
	})
	return p
}

func (p *proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", p.upstream)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns[c], p.conns[u] = true, true
			p.mu.Unlock()
			for _, pair := range [][2]net.Conn{{c, u}, {u, c}} {
				p.wg.Go(func() {
					_, _ = io.Copy(pair[0], pair[1])
					pair[0].Close()
					pair[1].Close()
				})
			}
		}
	})
}

// down cuts every connection and stops accepting.
func (p *proxy) down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// up accepts again on the same address. It runs on a timer's goroutine, so
// it reports a failure with Errorf (the stream then never comes back, and
// the test fails waiting for it); while another socket holds the port (the
// tests run in parallel) it tries again for a while.
func (p *proxy) up() {
	deadline := time.Now().Add(10 * time.Second)
	for {
		ln, err := net.Listen("tcp", p.addr)
		if err == nil {
			p.serve(ln)
			return
		}
		if time.Now().After(deadline) {
			p.t.Errorf("proxy: listening again on %s: %v", p.addr, err)
			return
		}
		time.Sleep(50 * time.Millisecond) // until the port is free again
	}
}

// The server going away for a while (connections cut, new ones refused)
// costs one DisconnectedError however many reconnects fail; afterwards the
// stream delivers every event exactly once, in order.
func TestServerOutage(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()

	cfg, err := pgxpool.ParseConfig(testdb.URL())
	if err != nil {
		t.Fatal(err)
	}
	p := newProxy(t, net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))))
	host, port, _ := net.SplitHostPort(p.addr)
	portNum, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, uint16(portNum)
	cfg.ConnConfig.Fallbacks = nil
	cfg.ConnConfig.RuntimeParams["search_path"] = db.Schema
	viaProxy, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer viaProxy.Close()

	s, err := subscribe.Leases(ctx, viaProxy, fast(t, subscribe.Options{Start: subscribe.StartBeginning}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	const total = 300
	written := make(chan error, 1)
	go func() {
		for i := range total {
			if _, err := db.Pool.Exec(ctx,
				`INSERT INTO ff_lease_event (execution_id, lease_id, event_type, occurred_at_ms, partition_key, namespace, instance_tag)
				 VALUES ($1, NULL, 'renewed', $2, 1, NULL, NULL)`, uuid.NewString(), i); err != nil {
				written <- err
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		written <- nil
	}()

	var events []subscribe.LeaseEvent
	var discs []*subscribe.DisconnectedError
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	outage := false
	for len(events) < total {
		if len(events) == total/3 && !outage {
			outage = true
			p.down()
			time.AfterFunc(1500*time.Millisecond, p.up) // several reconnects fail meanwhile
		}
		ev, err := s.Next(rctx)
		var d *subscribe.DisconnectedError
		switch {
		case errors.As(err, &d):
			if d.Cursor != events[len(events)-1].Cursor {
				t.Fatalf("disconnect carries %#v, want the last delivered %#v", d.Cursor, events[len(events)-1].Cursor)
			}
			discs = append(discs, d)
			continue
		case err != nil:
			t.Fatalf("after %d events: %v", len(events), err)
		}
		if n := len(events); n > 0 && (!events[n-1].Cursor.Less(ev.Cursor) || ev.AtMs != events[n-1].AtMs+1) {
			t.Fatalf("event %d (at_ms %d) after %d (at_ms %d): lost, repeated or out of order",
				ev.EventID, ev.AtMs, events[n-1].EventID, events[n-1].AtMs)
		}
		events = append(events, ev)
	}
	if err := <-written; err != nil {
		t.Fatal(err)
	}
	if len(discs) != 1 {
		t.Fatalf("%d DisconnectedErrors for one outage, want 1", len(discs))
	}
	expectNone(t, s, 100*time.Millisecond)
}
