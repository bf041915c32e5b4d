package ffview_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ffriver/ffriver"
	"github.com/ffriver/ffriver/cmd/internal/ffview"
	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/internal/outboxretention"
	"github.com/ffriver/ffriver/internal/pipeline"
	"github.com/ffriver/ffriver/outbox"
	"github.com/ffriver/ffriver/subscribe"
)

// sseEvent is one server-sent event as a client parses it.
type sseEvent struct {
	ID, Event, Data string
	hasID           bool
}

// sseClient reads one event stream over real HTTP.
type sseClient struct {
	t      *testing.T
	resp   *http.Response
	cancel context.CancelFunc
	events chan sseEvent
	done   chan error
}

// openSSE GETs path on srv with the Last-Event-ID header (when lastID is
// not empty) and fails the test unless it answers 200 with an event stream.
func openSSE(t *testing.T, srv *httptest.Server, path, lastID string) *sseClient {
	t.Helper()
	c, code, body := trySSE(t, srv, path, lastID)
	if code != http.StatusOK {
		t.Fatalf("GET %s (Last-Event-ID %q): %d, want 200: %s", path, lastID, code, body)
	}
	return c
}

// trySSE GETs path; on 200 it returns the stream, else the status and body.
func trySSE(t *testing.T, srv *httptest.Server, path, lastID string) (*sseClient, int, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "text/event-stream")
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		cancel()
		t.Fatalf("GET %s: %v", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		return nil, resp.StatusCode, string(b)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("GET %s: Content-Type %q, want text/event-stream", path, ct)
	}
	c := &sseClient{t: t, resp: resp, cancel: cancel, events: make(chan sseEvent, 1024), done: make(chan error, 1)}
	go c.read()
	t.Cleanup(c.close)
	return c, http.StatusOK, ""
}

func (c *sseClient) read() {
	sc := bufio.NewScanner(c.resp.Body)
	var ev sseEvent
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if ev.Event != "" || ev.Data != "" {
				c.events <- ev
			}
			ev = sseEvent{}
		case strings.HasPrefix(line, ":"), strings.HasPrefix(line, "retry:"):
		case strings.HasPrefix(line, "id: "):
			ev.ID, ev.hasID = strings.TrimPrefix(line, "id: "), true
		case strings.HasPrefix(line, "event: "):
			ev.Event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			ev.Data = strings.TrimPrefix(line, "data: ")
		}
	}
	err := sc.Err()
	if err == nil {
		err = io.EOF
	}
	c.done <- err
	close(c.events)
}

// close hangs up, as a browser leaving the page does.
func (c *sseClient) close() {
	c.cancel()
	c.resp.Body.Close()
}

// next returns the next event, failing after d.
func (c *sseClient) next(d time.Duration) sseEvent {
	c.t.Helper()
	select {
	case ev, ok := <-c.events:
		if !ok {
			c.t.Fatalf("the stream ended: %v", <-c.done)
		}
		return ev
	case <-time.After(d):
		c.t.Fatalf("no event within %s", d)
	}
	return sseEvent{}
}

// ended waits up to d for the server to end the stream.
func (c *sseClient) ended(d time.Duration) bool {
	deadline := time.After(d)
	for {
		select {
		case _, ok := <-c.events:
			if !ok {
				return true
			}
		case <-deadline:
			return false
		}
	}
}

// leaseData decodes a lease event's data.
type leaseData struct {
	EventID     int64  `json:"event_id"`
	Type        string `json:"type"`
	ExecutionID string `json:"execution_id"`
	Worker      string `json:"worker"`
}

func decodeLease(t *testing.T, ev sseEvent) leaseData {
	t.Helper()
	if ev.Event != "lease" {
		t.Fatalf("event %q (%s), want a lease event", ev.Event, ev.Data)
	}
	var d leaseData
	if err := json.Unmarshal([]byte(ev.Data), &d); err != nil {
		t.Fatalf("lease event data %q: %v", ev.Data, err)
	}
	if _, err := subscribe.ParseCursor(ev.ID); err != nil || !ev.hasID || ev.ID == "" {
		t.Fatalf("lease event id %q is not a stream cursor: %v", ev.ID, err)
	}
	return d
}

// newLiveEnv is newEnv with the view served over real HTTP, as event
// streams need.
func newLiveEnv(t *testing.T) (*env, *httptest.Server) {
	t.Helper()
	e := newEnv(t)
	srv := httptest.NewServer(e.view)
	t.Cleanup(srv.Close)
	return e, srv
}

// claim takes a lease on id's lane as worker.
func (e *env) claim(worker string) executions.Lease {
	e.t.Helper()
	return e.ClaimOneWith(executions.ClaimParams{Lane: "lane-a", WorkerID: worker, WorkerInstanceID: worker, LeaseTTL: time.Minute})
}

// The lease stream delivers what the store does as it happens, each event
// with its cursor as id; a client that went away and comes back with the
// last id it saw (as EventSource does) gets exactly the events it missed,
// and one that comes back with the "ready" id of a stream that had sent
// nothing gets everything since it first connected.
func TestLiveLeasesArriveAndResumeWithoutLoss(t *testing.T) {
	t.Parallel()
	e, srv := newLiveEnv(t)

	first := openSSE(t, srv, "/ff/live/leases", "")
	ready := first.next(10 * time.Second)
	if ready.Event != "ready" || !ready.hasID || ready.ID == "" || !strings.Contains(ready.Data, `"resumed":false`) {
		t.Fatalf("first message %+v, want ready with the start cursor as id", ready)
	}

	id := e.Create(executions.CreateParams{Namespace: "ns-live"})
	lease := e.claim("worker-1")
	acq := first.next(10 * time.Second)
	got := decodeLease(t, acq)
	if got.Type != ff.LeaseAcquired || got.ExecutionID != id.String() || got.Worker != "worker-1" {
		t.Fatalf("first lease event %+v, want acquired of %s by worker-1", got, id)
	}
	first.close()

	// While nobody listens: renew, then complete (renewed, revoked).
	lease, err := e.store.Renew(e.ctx, lease, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.store.Complete(e.ctx, lease, nil); err != nil {
		t.Fatal(err)
	}
	acquired := acq.ID

	again := openSSE(t, srv, "/ff/live/leases", acquired)
	if r := again.next(10 * time.Second); r.Event != "ready" || r.ID != acquired || !strings.Contains(r.Data, `"resumed":true`) {
		t.Fatalf("resumed stream's first message %+v, want ready with id %s", r, acquired)
	}
	var types []string
	for range 2 {
		d := decodeLease(t, again.next(10*time.Second))
		if d.ExecutionID != id.String() {
			t.Fatalf("event of %s, want %s", d.ExecutionID, id)
		}
		types = append(types, d.Type)
	}
	if strings.Join(types, ",") != ff.LeaseRenewed+","+ff.LeaseRevoked {
		t.Fatalf("resumed after the acquired event: %v, want renewed then revoked", types)
	}

	// From the ready id: all three, the acquired first.
	whole := openSSE(t, srv, "/ff/live/leases", ready.ID)
	whole.next(10 * time.Second) // ready
	types = nil
	for range 3 {
		types = append(types, decodeLease(t, whole.next(10*time.Second)).Type)
	}
	if strings.Join(types, ",") != ff.LeaseAcquired+","+ff.LeaseRenewed+","+ff.LeaseRevoked {
		t.Fatalf("resumed after the ready id: %v, want acquired, renewed, revoked", types)
	}
	// ?after= is the same position (what the page uses for a new EventSource).
	viaQuery := openSSE(t, srv, "/ff/live/leases?after="+acquired, "")
	viaQuery.next(10 * time.Second)
	if d := decodeLease(t, viaQuery.next(10*time.Second)); d.Type != ff.LeaseRenewed {
		t.Fatalf("?after= the acquired event: %+v, want the renewed event", d)
	}
}

// The completion stream carries outcomes with the execution and its flow.
func TestLiveCompletions(t *testing.T) {
	t.Parallel()
	e, srv := newLiveEnv(t)
	c := openSSE(t, srv, "/ff/live/completions?namespace=ns-b", "")
	if r := c.next(10 * time.Second); r.Event != "ready" {
		t.Fatalf("first message %+v, want ready", r)
	}
	other := e.Create(executions.CreateParams{Namespace: "ns-a"})
	id := e.Create(executions.CreateParams{Namespace: "ns-b"})
	for _, x := range []ff.ExecutionID{other, id} {
		if err := e.store.Cancel(e.ctx, x, executions.CancelParams{}); err != nil {
			t.Fatal(err)
		}
	}
	ev := c.next(10 * time.Second)
	var d struct {
		Outcome     string `json:"outcome"`
		ExecutionID string `json:"execution_id"`
		Namespace   string `json:"namespace"`
	}
	if err := json.Unmarshal([]byte(ev.Data), &d); err != nil || ev.Event != "completion" {
		t.Fatalf("event %+v: %v", ev, err)
	}
	if d.Outcome != ff.OutcomeCancelled || d.ExecutionID != id.String() || d.Namespace != "ns-b" {
		t.Fatalf("completion %+v, want %s cancelled in ns-b only (the namespace filter)", d, id)
	}
}

// A cursor the stream cannot resume from answers 400 naming the problem,
// before any stream opens; so do unknown parameters.
func TestLiveBadCursorIs400(t *testing.T) {
	t.Parallel()
	e, srv := newLiveEnv(t)
	// ahead is a batch cursor of a server whose transaction ids are 2^40 on:
	// the batch between the snapshots 2^40:2^40: and 2^40:2^40+5:, at
	// (xact 2^40+1, event 3).
	const ahead = "048180808080200300808080808020000000000500"
	// lost is a cursor of this stream at a tick of timeline 1 this server
	// never held (ticks lost in a failover or a crash): the batch between
	// 1:1: and 1:2:, its newer snapshot at tick 2^40 + 999,999.
	lost := append([]byte{0x05, 1, byte(len(e.db.Name))}, e.db.Name...)
	lost = append(lost, 0, 0, 0, 1, 0, 0)
	lost = binary.AppendUvarint(lost, 1<<40+999_999)
	lost = append(lost, 0, 1, 0)
	for _, tc := range []struct {
		path, header, want string
	}{
		{"/ff/live/leases", "not-hex", "Last-Event-ID"},
		{"/ff/live/leases", "ff00", "unknown prefix"},
		{"/ff/live/completions", "0301", "wrong length"},
		{"/ff/live/leases", "  ", "Last-Event-ID"},
		{"/ff/live/leases?after=", "", "after"},
		{"/ff/live/leases?after=xyz", "", "after"},
		{"/ff/live/leases?cursor=00", "", "unknown parameter"},
		{"/ff/live/leases?namespace=", "", "namespace"},
		{"/ff/live/leases?namespace=a%00b", "", "NUL"},
		{"/ff/live/leases", ahead, "another server"},
		{"/ff/live/leases", hex.EncodeToString(lost), "is beyond this server"},
		{"/ff/live?x=1", "", "unknown parameter"},
		{"/ff/live/backlog?x=1", "", "unknown parameter"},
	} {
		_, code, body := trySSE(t, srv, tc.path, tc.header)
		if code != http.StatusBadRequest || !strings.Contains(body, tc.want) {
			t.Errorf("GET %s with Last-Event-ID %q: %d, want 400 saying %q: %.300s", tc.path, tc.header, code, tc.want, body)
		}
	}
}

// Streams are bounded: one more than MaxLiveStreams answers 503; a client
// that goes away frees its stream at once, and closing the view ends the
// streams it serves.
func TestLiveStreamsAreBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	view, err := ffview.New(e.store, ffview.Options{MaxLiveStreams: 1})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(view)
	t.Cleanup(srv.Close)

	a := openSSE(t, srv, "/ff/live/leases", "")
	a.next(10 * time.Second)
	_, code, body := trySSE(t, srv, "/ff/live/completions", "")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "live streams are open") {
		t.Fatalf("a second stream with MaxLiveStreams 1: %d, want 503 saying why: %.300s", code, body)
	}
	a.close()
	var b *sseClient
	fftest.Await(t, 10*time.Second, "the stream of a client that went away is freed", func() bool {
		b, code, _ = trySSE(t, srv, "/ff/live/completions", "")
		return code == http.StatusOK
	})
	b.next(10 * time.Second)
	view.Close()
	if !b.ended(10 * time.Second) {
		t.Fatal("View.Close did not end the open stream")
	}
	if _, code, _ := trySSE(t, srv, "/ff/live/leases", ""); code != http.StatusServiceUnavailable {
		t.Fatalf("a stream after Close: %d, want 503", code)
	}
}

// The live page renders each scanner's backlog and oldest overdue age (as
// ffctl status reads them), and /ff/live/backlog serves the same as JSON.
func TestLiveBacklog(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	svc, err := ffriver.New(e.ctx, e.db.Pool, ffriver.Config{Schema: e.db.Name, Clock: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	view, err := ffview.New(e.store, ffview.Options{Pipeline: pipeline.Of(svc)})
	if err != nil {
		t.Fatal(err)
	}
	e.Create(executions.CreateParams{})
	if _, err := e.store.Claim(e.ctx, executions.ClaimParams{Lane: "lane-a", WorkerID: "w", LeaseTTL: time.Second}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(90 * time.Second) // the lease expired 89 s ago

	rec := httptest.NewRecorder()
	view.ServeHTTP(rec, httptest.NewRequestWithContext(e.ctx, http.MethodGet, "/ff/live/backlog", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("backlog: %d %s", rec.Code, rec.Body)
	}
	var b struct {
		Available bool `json:"available"`
		Scanners  []struct {
			Name            string `json:"name"`
			Due             int64  `json:"due"`
			OldestOverdueMs int64  `json:"oldest_overdue_ms"`
			OldestOverdue   string `json:"oldest_overdue"`
		} `json:"scanners"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &b); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range b.Scanners {
		if s.Due > 0 {
			found = true
			if s.Due != 1 || s.OldestOverdueMs != 89_000 || s.OldestOverdue != "1m29s" {
				t.Errorf("scanner %+v, want 1 due, overdue 89 s", s)
			}
		}
	}
	if !b.Available || !found {
		t.Fatalf("backlog %s: want one scanner with the expired lease due", rec.Body)
	}

	rec = httptest.NewRecorder()
	view.ServeHTTP(rec, httptest.NewRequestWithContext(e.ctx, http.MethodGet, "/ff/live", nil))
	page := response{Code: rec.Code, Body: rec.Body.String()}
	page.want(t, http.StatusOK, `id="backlog"`, "1m29s", `id="live-leases"`, `id="live-completions"`, "/ff/assets/live.js")

	// Without a pipeline the page says the backlog is not available.
	e.get("/ff/live").want(t, http.StatusOK, "no scanners configured")
	// ?namespace= narrows both streams.
	e.get("/ff/live?namespace=tenant+b").want(t, http.StatusOK,
		`data-src="/ff/live/leases?namespace=tenant&#43;b"`, `data-src="/ff/live/completions?namespace=tenant&#43;b"`, `value="tenant b"`)
	e.get("/ff/live?namespace=%00").want(t, http.StatusBadRequest, "NUL")
}

// A cursor whose following events retention deleted cannot resume without
// a hole: the stream opens only to say so (an "ff-error" message naming
// the deleted events, which a browser can read) and ends.
func TestLiveGapSaysWhatWasLost(t *testing.T) {
	t.Parallel()
	e, srv := newLiveEnv(t)
	c := openSSE(t, srv, "/ff/live/leases", "")
	c.next(10 * time.Second) // ready
	e.Create(executions.CreateParams{})
	lease := e.claim("w")
	acquired := c.next(10 * time.Second)
	decodeLease(t, acquired)
	if err := e.store.Complete(e.ctx, lease, nil); err != nil {
		t.Fatal(err)
	}
	c.close()

	tx, err := e.db.Pool.Begin(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(e.ctx) }()
	if n, err := outboxretention.Trim(e.ctx, tx, dbutil.Schema(e.store.Schema()), outboxretention.TrimParams{Table: outbox.LeaseTable, CutoffMs: t0 + 1, NowMs: e.store.NowMs(), Limit: 1000}); err != nil || n != 2 {
		t.Fatalf("trimming the lease outbox: %d, %v; want the 2 events", n, err)
	}
	if err := tx.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}

	gap := openSSE(t, srv, "/ff/live/leases", acquired.ID)
	ev := gap.next(10 * time.Second)
	if ev.Event != "ff-error" || !strings.Contains(ev.Data, "deleted before the stream read them") || !strings.Contains(ev.Data, `"gap":true`) {
		t.Fatalf("resuming after events retention deleted: %+v, want an ff-error saying so", ev)
	}
	if !gap.ended(10 * time.Second) {
		t.Fatal("the stream went on after the gap")
	}
}
