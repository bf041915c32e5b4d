package uiserver_test

import (
	"bufio"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ffriver/ffriver/cmd/internal/ffview"
	"github.com/ffriver/ffriver/cmd/internal/uiserver"
	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

// TestShutdownEndsLiveStreams: the view's live event streams never end by
// themselves, yet Shutdown ends them and returns at once rather than after
// its 5 s timeout, and the browser sees its stream end.
func TestShutdownEndsLiveStreams(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv, _ := serveView(t, uiserver.Options{})

	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"ff/live/leases", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /ff/live/leases: %d", resp.StatusCode)
	}
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() && !strings.HasPrefix(lines.Text(), "event: ready") {
	}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		for lines.Scan() {
		}
	}()

	start := time.Now()
	srv.Shutdown()
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Shutdown with a live stream open took %s: it waited for the stream", d)
	}
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the live stream did not end at Shutdown")
	}
}

// serveView serves River UI and the execution view of a schema of the
// test's own on a free loopback port, as ffscheduler does, with o's auth.
func serveView(t *testing.T, o uiserver.Options) (*uiserver.Server, *executions.Store) {
	t.Helper()
	db := testdb.New(t, &testdb.Options{MaxConns: 4})
	ctx := t.Context()
	client, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{Schema: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	st, err := executions.Open(ctx, db.Pool, executions.Config{Schema: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	view, err := ffview.New(st, ffview.Options{})
	if err != nil {
		t.Fatal(err)
	}
	o.Addr, o.View = "127.0.0.1:0", view
	srv, err := uiserver.Start(ctx, client, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	return srv, st
}
