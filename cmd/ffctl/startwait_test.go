package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/ffriver/ffriver/cmd/internal/cli"
	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/ffriver/ffriver/internal/testgate"
	"github.com/ffriver/ffriver/internal/testlog"
)

// ffctl tail, a long run, waits at start while the server is starting up
// and tails once it accepts; a one-shot command (status) fails at once.
func TestTailWaitsForTheServerStatusDoesNot(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, nil)
	g := testgate.Start(t, testdb.URL())
	g.Refuse(testgate.StartingUp, "the database system is starting up")
	url := g.URL(testdb.URL())

	var stderr testlog.Buffer
	if code := runStatus(context.Background(), []string{"--database-url", url, "--schema", db.Schema}, io.Discard, &stderr); code != cli.ExitFailure ||
		!strings.Contains(stderr.String(), "starting up") || strings.Contains(stderr.String(), "waiting") {
		t.Errorf("ffctl status while the server starts: exit %d, %q; want %d at once, saying it is starting up", code, stderr.String(), cli.ExitFailure)
	}

	var tailErr testlog.Buffer
	done := make(chan int, 1)
	go func() {
		done <- runTail(context.Background(), []string{"--database-url", url, "--schema", db.Schema, "--idle-exit", "1s", "--startup-wait", "1m"},
			io.Discard, &tailErr)
	}()
	fftest.Await(t, 30*time.Second, "tail saying what it waits for after three refused tries", func() bool {
		return strings.Contains(tailErr.String(), "waiting for the server to accept a connection") && g.Refused() >= 3 || len(done) > 0
	})
	select {
	case code := <-done:
		t.Fatalf("tail exited %d while the server was starting up: %s", code, tailErr.String())
	default:
	}
	g.Forward()
	if code := <-done; code != cli.ExitOK || !strings.Contains(tailErr.String(), "the server accepted the connection") {
		t.Errorf("tail once the server accepts: exit %d, %s", code, tailErr.String())
	}
}
