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
	"github.com/ffriver/ffriver/scanners"
	"github.com/ffriver/ffriver/workers"
)

// t0 is the fixture clock's start: a fixed instant so timestamps are exact.
const t0 = fftest.StartMs

// env is one test's kit (fftest.Kit: Create, AwaitPublicState, …, its
// Await methods waiting 90 s) and a view on its store, with the short
// names these tests use for the kit's parts.
type env struct {
	*fftest.Kit
	t     *testing.T
	ctx   context.Context
	db    *fftest.Schema
	store *executions.Store
	clock *ff.ManualClock
	view  *ffview.View
}

// newEnv migrates a schema of its own and builds a View on it.
func newEnv(t *testing.T) *env {
	t.Helper()
	k := fftest.New(t, &fftest.KitOptions{Schema: fftest.Options{MaxConns: 4}})
	v, err := ffview.New(k.Store, ffview.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return envOf(t, k, v)
}

// envOf is the env of k and v.
func envOf(t *testing.T, k *fftest.Kit, v *ffview.View) *env {
	k.Within = 90 * time.Second
	return &env{Kit: k, t: t, ctx: t.Context(), db: k.Schema, store: k.Store, clock: k.Clock, view: v}
}

// newPipelineEnv is newEnv with ffriver's whole pipeline running on the
// schema (a scheduler process: ticks, scans, item jobs, the flow cascade,
// scanners every 50 ms) on the manual clock: River jobs act on the
// executions as in production.
func newPipelineEnv(t *testing.T) *env {
	t.Helper()
	s := fftest.NewSchema(t, &fftest.Options{MaxConns: 12})
	clock := ff.NewManualClock(t0)
	// The manual clock never moves here, so a scanner's sweep (once per
	// Sweep of the store's clock, which is how a due row behind a scan
	// cursor is found again) would never come: without cursors every scan
	// reads its partitions from the beginning. (With them, TestFlowPage
	// waited 90 s for a sibling cancel in two of about fifty runs. A row
	// left behind a cursor was once the likeliest reading; a proven cause,
	// since fixed, is that the test waited for the last fan member created,
	// which its two claims completed in about one run in 25.)
	fast := map[string]workers.Settings{}
	for _, b := range scanners.Builtins(scanners.BuiltinOptions{}) {
		s := b.Scanner
		fast[s.Name()] = workers.Settings{Interval: 50 * time.Millisecond, Sweep: workers.NoSweep}
	}
	svc, err := ffriver.New(t.Context(), s.Pool, ffriver.Config{Schema: s.Name, Clock: clock, Scanners: fast})
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
	return envOf(t, fftest.On(t, s, svc.Store(), clock), v)
}

// leaseOn leases the one waiting execution of lane for worker (instance
// worker-1).
func (e *env) leaseOn(lane, worker string, ttl time.Duration) executions.Lease {
	e.t.Helper()
	return e.ClaimOneWith(executions.ClaimParams{Lane: lane, WorkerID: worker, LeaseTTL: ttl})
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
