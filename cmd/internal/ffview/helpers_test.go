package ffview_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ffriver/ffriver"
	"github.com/ffriver/ffriver/cmd/internal/ffview"
	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/ffriver/ffriver/scanners"
)

// t0 is the fixture clock's start: a fixed instant so timestamps are exact.
const t0 = int64(1_800_000_000_000)

// env is one test's schema, store and view.
type env struct {
	t     *testing.T
	ctx   context.Context
	db    *testdb.DB
	store *executions.Store
	clock *ff.ManualClock
	view  *ffview.View
}

// newEnv migrates a schema of its own and builds a View on it.
func newEnv(t *testing.T) *env {
	t.Helper()
	db := testdb.New(t, &testdb.Options{MaxConns: 4})
	clock := ff.NewManualClock(t0)
	st, err := executions.Open(t.Context(), db.Pool, executions.Config{Schema: db.Schema, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	v, err := ffview.New(st, ffview.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, ctx: t.Context(), db: db, store: st, clock: clock, view: v}
}

// newPipelineEnv is newEnv with ffriver's whole pipeline running on the
// schema (a scheduler process: ticks, scans, item jobs, the flow cascade,
// scanners every 50 ms) on the manual clock: River jobs act on the
// executions as in production.
func newPipelineEnv(t *testing.T) *env {
	t.Helper()
	db := testdb.New(t, &testdb.Options{MaxConns: 12})
	clock := ff.NewManualClock(t0)
	// The manual clock never moves here, so a scanner's sweep (once per
	// Sweep of the store's clock, which is how a due row behind a scan
	// cursor is found again) would never come: without cursors every scan
	// reads its partitions from the beginning. (With them, TestFlowPage
	// waited 90 s for a sibling cancel in two of about fifty runs; that a
	// row left behind a cursor was the cause is the likeliest reading, not
	// a proven one.)
	fast := map[string]scanners.Settings{}
	for _, s := range scanners.Builtins(scanners.BuiltinOptions{}) {
		fast[s.Name()] = scanners.Settings{Interval: 50 * time.Millisecond, Sweep: scanners.NoSweep}
	}
	svc, err := ffriver.New(t.Context(), db.Pool, ffriver.Config{Schema: db.Schema, Clock: clock, Scanners: fast})
	if err != nil {
		t.Fatal(err)
	}
	p, err := svc.NewProcess(t.Context(), ffriver.ProcessOptions{Role: ffriver.Scheduler, ShutdownTimeout: 10 * time.Second,
		Client: ffriver.ClientOptions{ScanWorkers: 2, ApplyWorkers: 2, TestOnly: true}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop() })
	v, err := ffview.New(svc.Store(), ffview.Options{RiverUI: "/riverui/"})
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, ctx: t.Context(), db: db, store: svc.Store(), clock: clock, view: v}
}

// leaseOn leases the one waiting execution of lane for worker.
func (e *env) leaseOn(lane, worker string, ttl time.Duration) executions.Lease {
	e.t.Helper()
	leases, err := e.store.Claim(e.ctx, executions.ClaimParams{Lane: lane, WorkerID: worker, WorkerInstanceID: worker + "-1", LeaseTTL: ttl})
	if err != nil || len(leases) != 1 {
		e.t.Fatalf("claim on %s: %d leases, %v", lane, len(leases), err)
	}
	return leases[0]
}

// await waits until the execution is in state.
func (e *env) await(id ff.ExecutionID, state string) {
	e.t.Helper()
	fftest.Await(e.t, 90*time.Second, id.String()+" "+state, func() bool {
		x, err := e.store.Get(e.ctx, id)
		return err == nil && x.PublicState == state
	})
}

// create makes an execution (lane "lane-a" unless p says).
func (e *env) create(p executions.CreateParams) ff.ExecutionID {
	e.t.Helper()
	if p.Lane == "" {
		p.Lane = "lane-a"
	}
	id, err := e.store.Create(e.ctx, p)
	if err != nil {
		e.t.Fatal(err)
	}
	return id
}

// response is one answer of the view.
type response struct {
	Code int
	Body string
	Loc  string
}

// get sends GET target (a path with its query) to the view.
func (e *env) get(target string) response {
	e.t.Helper()
	return e.do(httptest.NewRequestWithContext(e.ctx, http.MethodGet, target, nil))
}

// post sends a form POST to the view (as the browser does from the
// confirmation page; uiserver.Guard's checks are uiserver's tests).
func (e *env) post(target string, form url.Values) response {
	e.t.Helper()
	r := httptest.NewRequestWithContext(e.ctx, http.MethodPost, target, strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return e.do(r)
}

func (e *env) do(r *http.Request) response {
	e.t.Helper()
	w := httptest.NewRecorder()
	e.view.ServeHTTP(w, r)
	res := w.Result()
	b, _ := io.ReadAll(res.Body)
	return response{Code: res.StatusCode, Body: string(b), Loc: res.Header.Get("Location")}
}

// want fails unless the response has code and contains every string.
func (r response) want(t *testing.T, code int, contains ...string) {
	t.Helper()
	if r.Code != code {
		t.Fatalf("status %d, want %d; body:\n%s", r.Code, code, r.Body)
	}
	for _, s := range contains {
		if !strings.Contains(r.Body, s) {
			t.Errorf("body lacks %q:\n%s", s, r.Body)
		}
	}
}
