package ffview_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/ffview"
	"github.com/ffriver/ffriver/internal/testdb"
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
