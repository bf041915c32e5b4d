// Package testgate is a TCP front of a Postgres server that a test
// controls: it forwards connections to the server, or refuses them as the
// server itself would (a FATAL error response with a SQLSTATE, e.g. 53300
// "sorry, too many clients already"), so a test can show a process a full
// or starting server without taking the shared server's connection slots
// or restarting it.
package testgate

import (
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
)

// Refusals the server sends, as it words them.
const (
	TooManyClients = "53300" // sorry, too many clients already
	StartingUp     = "57P03" // the database system is starting up
	BadPassword    = "28P01" // password authentication failed for user …
)

// Gate listens on a loopback port and forwards or refuses each new
// connection. It starts forwarding.
type Gate struct {
	t      testing.TB
	ln     net.Listener
	target string

	mu      sync.Mutex
	code    string // "" forwards
	message string
	conns   map[net.Conn]bool
	closed  bool

	refused atomic.Int64
}

// Start starts a gate in front of the server of dbURL (a postgres:// URL)
// on a free loopback port and returns it; it is closed when the test ends.
func Start(t testing.TB, dbURL string) *Gate {
	t.Helper()
	return StartOn(t, "127.0.0.1:0", dbURL)
}

// StartOn is Start listening on addr: a port where nothing listened, to
// show a process started before it a server that comes up.
func StartOn(t testing.TB, addr, dbURL string) *Gate {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil || u.Host == "" {
		t.Skipf("the gate needs a host in the database URL (%v)", err)
	}
	target := u.Host
	if u.Port() == "" {
		target = net.JoinHostPort(u.Hostname(), "5432")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	g := &Gate{t: t, ln: ln, target: target, conns: map[net.Conn]bool{}}
	go g.serve()
	t.Cleanup(g.Close)
	return g
}

// URL returns dbURL with its host and port replaced by the gate's.
func (g *Gate) URL(dbURL string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		g.t.Fatal(err)
	}
	u.Host = g.ln.Addr().String()
	return u.String()
}

// Refuse makes the gate answer each new connection's start-up with a FATAL
// error of SQLSTATE code and message, then close it, as a server does that
// is full (TooManyClients) or starting up (StartingUp). Connections
// already forwarded stay.
func (g *Gate) Refuse(code, message string) {
	g.mu.Lock()
	g.code, g.message = code, message
	g.mu.Unlock()
}

// Forward makes the gate forward each new connection to the server.
func (g *Gate) Forward() { g.Refuse("", "") }

// Refused returns how many connections the gate has refused so far.
func (g *Gate) Refused() int { return int(g.refused.Load()) }

// Close stops listening and closes every connection.
func (g *Gate) Close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return
	}
	g.closed = true
	_ = g.ln.Close()
	for c := range g.conns {
		_ = c.Close()
	}
}

func (g *Gate) serve() {
	for {
		c, err := g.ln.Accept()
		if err != nil {
			return
		}
		go g.handle(c)
	}
}

// track adds c to the open connections, false when the gate is closed.
func (g *Gate) track(cs ...net.Conn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	for _, c := range cs {
		g.conns[c] = true
	}
	return true
}

func (g *Gate) untrack(cs ...net.Conn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, c := range cs {
		delete(g.conns, c)
		_ = c.Close()
	}
}

func (g *Gate) handle(c net.Conn) {
	g.mu.Lock()
	code, message := g.code, g.message
	g.mu.Unlock()
	if code != "" {
		g.refuse(c, code, message)
		return
	}
	s, err := net.Dial("tcp", g.target)
	if err != nil {
		_ = c.Close()
		return
	}
	if !g.track(c, s) {
		_ = c.Close()
		_ = s.Close()
		return
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(s, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, s); done <- struct{}{} }()
	<-done
	g.untrack(c, s)
}

// refuse reads c's start-up (declining TLS and GSS encryption) and answers
// with a FATAL error, as the server does.
func (g *Gate) refuse(c net.Conn, code, message string) {
	defer c.Close()
	be := pgproto3.NewBackend(c, c)
	for {
		msg, err := be.ReceiveStartupMessage()
		if err != nil {
			return
		}
		switch msg.(type) {
		case *pgproto3.SSLRequest, *pgproto3.GSSEncRequest:
			if _, err := c.Write([]byte{'N'}); err != nil {
				return
			}
			continue
		case *pgproto3.StartupMessage:
			// Counted before the answer goes out: a client that reads it
			// and returns must find its refusal counted.
			g.refused.Add(1)
			be.Send(&pgproto3.ErrorResponse{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: code, Message: message})
			if be.Flush() != nil {
				g.refused.Add(-1)
			}
		}
		return
	}
}
