package integration

import (
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/ffriver/ffriver/internal/testgate"
)

// waitingLine is what ffworker and ffscheduler log while they wait at
// start for the server to let them in.
const waitingLine = "waiting for the server to accept a connection"

// TestBinariesWaitForTheServerAtStart (issue 37, item 1): started while
// the server refuses them for a reason that passes, ffworker and
// ffscheduler keep trying, say what they wait for (not at every try), and
// start once the server lets them; past --startup-wait they exit 1, a stop
// while they wait is a clean stop (exit 0), and a failure that does not
// pass exits at once. The refusals come from a gate in front of the shared
// server (or a port where nothing listens yet): no real slot is taken.
func TestBinariesWaitForTheServerAtStart(t *testing.T) {
	t.Parallel()
	// Each subtest reserves what its binary holds once it connects: a
	// reservation here would be held until the parallel subtests end,
	// while they wait for the parallel slots of tests that wait for it.
	db := testdb.New(t, nil)
	schedBin, workerBin := buildPipelineBinaries(t)
	// closedURL is the test server's URL on a loopback port where nothing
	// listens, and that address.
	closedURL := func(t *testing.T) (string, string) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		_ = ln.Close()
		u, err := url.Parse(testdb.URL())
		if err != nil {
			t.Fatal(err)
		}
		u.Host = addr
		return u.String(), addr
	}

	t.Run("a full server, then one that accepts", func(t *testing.T) {
		t.Parallel()
		testdb.Reserve(t, testdb.WorkerConns) // the worker's pool (docs/development.md)
		g := testgate.Start(t, testdb.URL())
		g.Refuse(testgate.TooManyClients, "sorry, too many clients already")
		start := time.Now()
		w := startProc(t, "ffworker", workerBin, "--database-url", g.URL(testdb.URL()), "--schema", db.Schema,
			"--metrics-addr", "127.0.0.1:0", "--startup-wait", "2m")
		fftest.Await(t, 30*time.Second, "the worker tried three times and said what it waits for", func() bool {
			return g.Refused() >= 3 && strings.Contains(w.Output(), waitingLine) || w.Exited()
		})
		if w.Exited() {
			t.Fatalf("ffworker exited %d while the server was full:\n%s", w.Code(), w.Output())
		}
		out := w.Output()
		if n, limit := strings.Count(out, waitingLine), 1+int(time.Since(start)/(10*time.Second)); n > limit {
			t.Errorf("%d waiting lines after %d tries in %s, want at most %d (one about every 10 s):\n%s", n, g.Refused(), time.Since(start), limit, out)
		}
		for _, want := range []string{"max_connections is reached", "ffworker's pool takes up to 22 connections; lower --concurrency and --scan-concurrency"} {
			if !strings.Contains(out, want) {
				t.Errorf("the waiting line does not say %q:\n%s", want, out)
			}
		}

		g.Forward()
		addr := awaitMetricsAddr(t, w)
		fftest.Await(t, 30*time.Second, "ffworker ready", func() bool {
			code, _ := get(t, addr, "/readyz")
			return code == http.StatusOK
		})
		if !strings.Contains(w.Output(), "ffworker started") {
			t.Errorf("ready without its started line:\n%s", w.Output())
		}
		if code := w.signal(syscall.SIGTERM, 40*time.Second); code != 0 {
			t.Errorf("ffworker exit %d after SIGTERM, want 0", code)
		}
	})

	t.Run("nothing listens, then the server comes", func(t *testing.T) {
		t.Parallel()
		testdb.Reserve(t, testdb.SchedulerConns) // the scheduler's pool (docs/development.md)
		u, addr := closedURL(t)
		s := startProc(t, "ffscheduler", schedBin, "--database-url", u, "--schema", db.Schema, "--ui-addr", "off", "--startup-wait", "2m")
		fftest.Await(t, 30*time.Second, "the scheduler saying what it waits for", func() bool {
			return strings.Contains(s.Output(), waitingLine) && strings.Contains(s.Output(), "connection refused") || s.Exited()
		})
		if s.Exited() {
			t.Fatalf("ffscheduler exited %d while nothing listened:\n%s", s.Code(), s.Output())
		}
		testgate.StartOn(t, addr, testdb.URL())
		fftest.Await(t, 60*time.Second, "ffscheduler started", func() bool { return strings.Contains(s.Output(), "ffscheduler started") })
		if code := s.signal(syscall.SIGTERM, 40*time.Second); code != 0 {
			t.Errorf("ffscheduler exit %d after SIGTERM, want 0", code)
		}
	})

	t.Run("past --startup-wait it exits 1", func(t *testing.T) {
		t.Parallel()
		u, _ := closedURL(t)
		w := startProc(t, "ffworker", workerBin, "--database-url", u, "--schema", db.Schema, "--startup-wait", "1s")
		if code := w.wait(30 * time.Second); code != 1 {
			t.Errorf("exit %d, want 1", code)
		}
		out := w.Output()
		if !strings.Contains(out, waitingLine) || !strings.Contains(out, "ffworker: gave up after waiting 1s (--startup-wait)") {
			t.Errorf("the output does not say it waited, then gave up:\n%s", out)
		}
	})

	t.Run("stopped while it waits it exits 0", func(t *testing.T) {
		t.Parallel()
		u, _ := closedURL(t)
		w := startProc(t, "ffworker", workerBin, "--database-url", u, "--schema", db.Schema, "--startup-wait", "2m")
		fftest.Await(t, 30*time.Second, "the waiting line", func() bool { return strings.Contains(w.Output(), waitingLine) || w.Exited() })
		if code := w.signal(syscall.SIGTERM, 10*time.Second); code != 0 {
			t.Errorf("exit %d after SIGTERM while waiting, want 0:\n%s", code, w.Output())
		}
	})

	t.Run("an unknown database exits at once", func(t *testing.T) {
		t.Parallel()
		u, err := url.Parse(testdb.URL())
		if err != nil {
			t.Fatal(err)
		}
		u.Path = "/ff_no_such_database"
		w := startProc(t, "ffworker", workerBin, "--database-url", u.String(), "--schema", db.Schema, "--startup-wait", "2m")
		if code := w.wait(30 * time.Second); code != 1 || !strings.Contains(w.Output(), `database "ff_no_such_database" does not exist`) ||
			strings.Contains(w.Output(), waitingLine) {
			t.Errorf("exit %d, want 1 at once, saying the database does not exist:\n%s", code, w.Output())
		}
	})
}
