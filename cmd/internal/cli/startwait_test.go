package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/ffriver/ffriver/internal/testgate"
	"github.com/ffriver/ffriver/internal/testlog"
	"github.com/jackc/pgx/v5/pgconn"
)

// closedAddr returns a loopback address where nothing listens.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// withURL returns the test server's URL with its host, user or database
// replaced (where not empty).
func withURL(t *testing.T, host, user, db string) string {
	t.Helper()
	u, err := url.Parse(testdb.URL())
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		u.Host = host
	}
	if user != "" {
		u.User = url.User(user)
	}
	if db != "" {
		u.Path = "/" + db
	}
	return u.String()
}

// refusingRole creates a login role with CONNECTION LIMIT 0, whose every
// connection the server refuses with 53300 without using a slot, and
// returns its name ("" and a skip where roles cannot be created, outside
// CI).
func refusingRole(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	admin := testdb.Connect(t, "")
	var buf [4]byte
	_, _ = rand.Read(buf[:])
	role := "ff_startwait_" + hex.EncodeToString(buf[:])
	if _, err := admin.Exec(ctx, `CREATE ROLE `+role+` LOGIN CONNECTION LIMIT 0`); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("creating a role with a connection limit: %v", err)
		}
		t.Skipf("cannot create a role here: %v", err)
	}
	t.Cleanup(func() { _, _ = admin.Exec(context.Background(), `DROP ROLE IF EXISTS `+role) })
	return role
}

// Which first-connection failures a start-up waits out and which it
// reports at once, each as the server (or the network) really produces it:
// the real server for an unknown database or role and a role's connection
// limit, a closed port, a port that closes at once, and a gate speaking
// the server's protocol for the refusals the shared server cannot be made
// to give (full, starting up, a wrong password: it trusts every login).
func TestWhichRefusalsWait(t *testing.T) {
	t.Parallel()
	connect := func(u string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := pgconn.Connect(ctx, u)
		if err == nil {
			_ = c.Close(ctx)
			return errors.New("connected")
		}
		return err
	}
	gated := func(code, message string) string {
		g := testgate.Start(t, testdb.URL())
		g.Refuse(code, message)
		return g.URL(testdb.URL())
	}
	closing, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = closing.Close() })
	go func() {
		for {
			c, err := closing.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()

	for _, c := range []struct {
		name string
		url  string
		wait bool
	}{
		{"nothing listens (connection refused)", withURL(t, closedAddr(t), "", ""), true},
		{"the port closes the connection", withURL(t, closing.Addr().String(), "", ""), true},
		{"the port closes the connection, sslmode=prefer", withURL(t, closing.Addr().String(), "", "") + "&sslmode=prefer", true},
		{"max_connections reached (53300)", gated(testgate.TooManyClients, "sorry, too many clients already"), true},
		{"only reserved slots left (53300)", gated(testgate.TooManyClients, "remaining connection slots are reserved for roles with the SUPERUSER attribute"), true},
		{"starting up (57P03)", gated(testgate.StartingUp, "the database system is starting up"), true},
		{"shutting down (57P01)", gated("57P01", "terminating connection due to administrator command"), true},
		{"wrong password (28P01)", gated(testgate.BadPassword, `password authentication failed for user "postgres"`), false},
		{"no server writable (a standby being promoted)", withURL(t, "", "", "") +
			"&target_session_attrs=read-write&options=-c%20default_transaction_read_only%3Don", true},
		{"unknown database (3D000)", withURL(t, "", "", "ff_no_such_database"), false},
		{"unknown role (28000)", withURL(t, "", "ff_no_such_role", ""), false},
	} {
		err := connect(c.url)
		if got := passesByItself(err); got != c.wait {
			t.Errorf("%s: %v: waits %t, want %t", c.name, err, got, c.wait)
		}
	}
	if !passesByItself(connect(withURL(t, "", refusingRole(t), ""))) {
		t.Errorf("a role's CONNECTION LIMIT reached (53300): does not wait")
	}
}

// A start-up against a full server waits, logs what it waits for once
// rather than at each try (with the sizing sentence of the connection
// limit), and opens the pool once the server lets it.
func TestStartupWaitsForAFullServer(t *testing.T) {
	t.Parallel()
	g := testgate.Start(t, testdb.URL())
	g.Refuse(testgate.TooManyClients, "sorry, too many clients already")
	var logs testlog.Buffer
	c := &Common{DatabaseURL: g.URL(testdb.URL()), StartupWait: time.Minute}
	opts := PoolOptions{AppName: "ffworker", MaxConns: 22, SizeFlags: "--concurrency and --scan-concurrency",
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		pool, err := c.OpenPool(context.Background(), opts)
		if err == nil {
			err = pool.Ping(context.Background())
			pool.Close()
		}
		done <- err
	}()
	fftest.Await(t, 30*time.Second, "three refused tries", func() bool { return g.Refused() >= 3 || len(done) > 0 })
	select {
	case err := <-done:
		t.Fatalf("OpenPool returned while the server was full: %v", err)
	default:
	}
	waiting := strings.Count(logs.String(), "waiting for the server to accept a connection")
	if limit := 1 + int(time.Since(start)/StartupReportInterval); waiting < 1 || waiting > limit {
		t.Errorf("%d waiting lines after %d tries in %s, want 1 to %d:\n%s", waiting, g.Refused(), time.Since(start), limit, logs.String())
	}
	for _, want := range []string{"max_connections is reached", "ffworker's pool takes up to 22 connections; lower --concurrency and --scan-concurrency"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the waiting line does not say %q:\n%s", want, logs.String())
		}
	}

	g.Forward()
	if err := <-done; err != nil {
		t.Fatalf("OpenPool once the server accepts: %v", err)
	}
	if !strings.Contains(logs.String(), "the server accepted the connection") {
		t.Errorf("no line says the wait is over:\n%s", logs.String())
	}
}

// The wait is bounded: past --startup-wait the start fails with the last
// refusal, exit code 1; a failure that does not pass fails at once, without
// a waiting line, whatever the bound; and 0 fails at once.
func TestStartupWaitBounds(t *testing.T) {
	t.Parallel()
	open := func(u string, wait time.Duration) (logged string, err error) {
		var logs testlog.Buffer
		c := &Common{DatabaseURL: u, StartupWait: wait}
		pool, err := c.OpenPool(context.Background(), PoolOptions{AppName: "ffworker", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err == nil {
			pool.Close()
		}
		return logs.String(), err
	}

	closed := withURL(t, closedAddr(t), "", "")
	logs, err := open(closed, 300*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "gave up after waiting 300ms (--startup-wait)") ||
		!strings.Contains(err.Error(), "connection refused") || ExitCode(err) != ExitFailure || !errors.Is(err, ff.ErrUnavailable) {
		t.Errorf("past the bound: %v (exit %d); want the refusal after \"gave up after waiting 300ms\", exit %d", err, ExitCode(err), ExitFailure)
	}
	if n := strings.Count(logs, "waiting for the server to accept a connection"); n != 1 || !strings.Contains(logs, "connection refused") {
		t.Errorf("%d waiting lines, want one that says why:\n%s", n, logs)
	}

	logs, err = open(closed, 0)
	if err == nil || strings.Contains(err.Error(), "gave up") || logs != "" {
		t.Errorf("--startup-wait 0: %v, logged %q; want the refusal at once, nothing logged", err, logs)
	}

	g := testgate.Start(t, testdb.URL())
	g.Refuse(testgate.BadPassword, `password authentication failed for user "postgres"`)
	for _, u := range []string{withURL(t, "", "", "ff_no_such_database"), g.URL(testdb.URL())} {
		logs, err := open(u, time.Hour)
		if err == nil || strings.Contains(err.Error(), "gave up") || strings.Contains(logs, "waiting") {
			t.Errorf("%s: %v, logged %q; want the failure at once, nothing logged", u, err, logs)
		}
	}
	if g.Refused() != 1 {
		t.Errorf("a wrong password was tried %d times, want once", g.Refused())
	}
}

// An interrupted wait ends at once with an error that says so.
func TestStartupWaitInterrupted(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	var logs testlog.Buffer
	done := make(chan error, 1)
	go func() {
		c := &Common{DatabaseURL: withURL(t, closedAddr(t), "", ""), StartupWait: time.Hour}
		_, err := c.OpenPool(ctx, PoolOptions{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		done <- err
	}()
	fftest.Await(t, 30*time.Second, "the waiting line", func() bool {
		return strings.Contains(logs.String(), "waiting for the server") || len(done) > 0
	})
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "stopped while waiting") {
		t.Errorf("cancelled wait: %v; want context.Canceled, saying it stopped while waiting", err)
	}
}

// --startup-wait: 5m by default, $FF_STARTUP_WAIT when the flag is not
// given, 0 allowed, anything negative or unparsable a usage error.
func TestStartupWaitFlag(t *testing.T) {
	for _, c := range []struct {
		env  string
		args []string
		want time.Duration
		err  string
	}{
		{"", nil, DefaultStartupWait, ""},
		{"30s", nil, 30 * time.Second, ""},
		{"30s", []string{"--startup-wait", "2m"}, 2 * time.Minute, ""},
		{"", []string{"--startup-wait", "0"}, 0, ""},
		{"", []string{"--startup-wait", "-1s"}, 0, "--startup-wait -1s is outside the allowed range 0s..24h0m0s"},
		{"soon", nil, 0, `$FF_STARTUP_WAIT "soon" is not a duration`},
	} {
		fs, common, _ := newTestFlagSet(map[string]string{"DATABASE_URL": "postgres://u@h/db", "FF_STARTUP_WAIT": c.env})
		common.AddStartupWait(fs)
		err := fs.Parse(c.args)
		var ue *UsageError
		switch {
		case c.err != "" && (!errors.As(err, &ue) || !strings.Contains(err.Error(), c.err)):
			t.Errorf("env %q, %q: %v; want a usage error saying %q", c.env, c.args, err, c.err)
		case c.err == "" && (err != nil || common.StartupWait != c.want):
			t.Errorf("env %q, %q: %s, %v; want %s", c.env, c.args, common.StartupWait, err, c.want)
		}
	}
	// A command that does not register it does not wait.
	fs, common, _ := newTestFlagSet(map[string]string{"DATABASE_URL": "postgres://u@h/db", "FF_STARTUP_WAIT": "1m"})
	if err := fs.Parse(nil); err != nil || common.StartupWait != 0 {
		t.Errorf("without AddStartupWait: %s, %v; want 0", common.StartupWait, err)
	}
}
