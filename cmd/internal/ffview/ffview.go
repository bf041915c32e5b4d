// Package ffview is ffriver's execution view: server-rendered pages beside
// River UI that show what River UI cannot, executions rather than jobs.
//
// Pages (all under /ff/, see View.routes):
//
//	GET  /ff/                         redirects to /ff/executions
//	GET  /ff/executions               the executions, filtered and keyset-paginated
//	GET  /ff/executions/{id}          one execution ({fp:N}:<uuid>)
//	GET  /ff/flows/{flow}             one flow as a graph
//	GET  /ff/executions/{id}/cancel   the confirmation form of a cancel
//	POST /ff/executions/{id}/cancel   cancel (executions.Store.Cancel)
//	GET  /ff/executions/{id}/revoke   the confirmation form of a revoke
//	POST /ff/executions/{id}/revoke   revoke (executions.Store.Revoke)
//	GET  /ff/live                     the lease and completion streams as delivered (live.go)
//	GET  /ff/live/leases, /completions server-sent events from package subscribe
//	GET  /ff/live/backlog             each scanner's backlog as JSON
//	GET  /ff/assets/...               the embedded stylesheet and scripts
//
// The pages are html/template files embedded in the binary (templates/),
// each rendered inside one shared layout (templates/layout.html) whose
// navigation links the executions, the live page and River UI. There is no
// frontend build step.
//
// Bad input (a malformed id, an unknown query parameter, a page size out of
// range) answers 400 with a sentence naming the problem, an unknown
// execution or flow 404, a method a page does not take 405, an action on
// an execution in the wrong state 409, an unreachable database 503; only
// another failure of the database answers 500.
//
// The view has no authentication of its own: uiserver serves it on River
// UI's listener behind the same Guard and basic auth.
package ffview

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/internal/pipeline"
	"github.com/jackc/pgx/v5/pgxpool"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed assets
var assetFS embed.FS

// Prefix is the path the view is served under.
const Prefix = "/ff/"

// Options tune New.
type Options struct {
	// RiverUI is the path of River UI's root on the same server (default
	// "/"): the navigation links it and a River job links to
	// RiverUI+"jobs/ID".
	RiverUI string
	// RiverSchema holds River's tables (river_job), when not the store's
	// schema (ffriver.Config.RiverSchema; a River client's Config.Schema).
	RiverSchema string
	// Logger receives the failures answered with 500 (default: discarded).
	Logger *slog.Logger
	// Pipeline, when set, gives the live page each scanner's backlog (as
	// `ffctl status` reads it); without it the page says it has none.
	Pipeline *pipeline.Pipeline
	// MaxLiveStreams bounds the live page's event streams open at once
	// (default DefaultMaxLiveStreams; each holds two database connections).
	MaxLiveStreams int
}

// View serves the execution pages. It is an http.Handler for the paths
// under Prefix; build one with New.
type View struct {
	store  *executions.Store
	pool   *pgxpool.Pool
	schema dbutil.Schema
	// riverSchema holds river_job (the store's schema unless told).
	riverSchema dbutil.Schema
	riverUI     string
	log         *slog.Logger
	pages       map[string]*template.Template
	mux         *http.ServeMux
	live        *liveHub
}

// New returns the view of store's executions: it reads through store (and
// its pool, for River's river_job and the flow tables of the same schema)
// and acts through store's operator actions.
func New(store *executions.Store, o Options) (*View, error) {
	if store == nil {
		return nil, errors.New("ffview: a store is required")
	}
	v := &View{store: store, pool: store.Pool(), schema: dbutil.Schema(store.Schema()), riverUI: o.RiverUI, log: o.Logger}
	if v.riverUI == "" {
		v.riverUI = "/"
	}
	if !strings.HasPrefix(v.riverUI, "/") || !strings.HasSuffix(v.riverUI, "/") {
		return nil, fmt.Errorf("ffview: River UI path %q must begin and end with /", o.RiverUI)
	}
	if v.log == nil {
		v.log = slog.New(slog.DiscardHandler)
	}
	v.riverSchema = v.schema
	if o.RiverSchema != "" {
		rs, err := dbutil.ParseSchema(o.RiverSchema)
		if err != nil {
			return nil, fmt.Errorf("ffview: River schema: %w", err)
		}
		v.riverSchema = rs
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	v.pages = pages
	if v.live, err = newLiveHub(o); err != nil {
		return nil, err
	}
	v.mux = http.NewServeMux()
	v.routes(v.mux)
	return v, nil
}

// ServeHTTP implements http.Handler.
func (v *View) ServeHTTP(w http.ResponseWriter, r *http.Request) { v.mux.ServeHTTP(w, r) }

// parsePages parses every page of templates/ (but the layout) with the
// layout: page NAME is templates/NAME.html, which defines "title" and
// "content".
func parsePages() (map[string]*template.Template, error) {
	layout, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html")
	if err != nil {
		return nil, fmt.Errorf("ffview: layout: %w", err)
	}
	names, err := fs.Glob(templateFS, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("ffview: %w", err)
	}
	pages := map[string]*template.Template{}
	for _, n := range names {
		name := strings.TrimSuffix(path.Base(n), ".html")
		if name == "layout" {
			continue
		}
		t, err := template.Must(layout.Clone()).ParseFS(templateFS, n)
		if err != nil {
			return nil, fmt.Errorf("ffview: page %s: %w", name, err)
		}
		pages[name] = t
	}
	return pages, nil
}

// layoutData is what the layout renders: the page's own data is .Page.
type layoutData struct {
	// Title of the page (also the <h1>).
	Title string
	// Nav is the navigation entry to mark current: "executions", "live".
	Nav     string
	RiverUI string
	Page    any
}

// render writes page name (templates/NAME.html) in the layout with status.
// nav is the navigation entry to mark ("executions", "live" or "").
// The page is rendered into a buffer first, so a template failure answers
// 500 instead of half a page.
func (v *View) render(w http.ResponseWriter, r *http.Request, status int, name, nav, title string, page any) {
	t, ok := v.pages[name]
	if !ok {
		v.serverError(w, r, fmt.Errorf("no page template %q", name))
		return
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout.html", layoutData{Title: title, Nav: nav, RiverUI: v.riverUI, Page: page}); err != nil {
		v.serverError(w, r, fmt.Errorf("rendering %s: %w", name, err))
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = buf.WriteTo(w)
}

// errorPage is the data of templates/error.html.
type errorPage struct {
	Status  int
	Message string
}

// fail answers status with message on the error page.
func (v *View) fail(w http.ResponseWriter, r *http.Request, status int, message string) {
	v.render(w, r, status, "error", "", http.StatusText(status), errorPage{Status: status, Message: message})
}

// failErr answers err: 400 for invalid input, 404 for an unknown
// execution or flow, 409 for an action on an execution in the wrong state,
// 503 when the database is unavailable, else 500 (logged).
func (v *View) failErr(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, ff.ErrValidation):
		v.fail(w, r, http.StatusBadRequest, err.Error())
	case errors.Is(err, ff.ErrNotFound):
		v.fail(w, r, http.StatusNotFound, err.Error())
	case errors.Is(err, ff.ErrNotActive), errors.Is(err, ff.ErrLeaseHeld), errors.Is(err, ff.ErrStaleLease):
		v.fail(w, r, http.StatusConflict, err.Error())
	case errors.Is(err, ff.ErrUnavailable):
		v.log.Warn("ffview: database unavailable", "path", r.URL.Path, "error", err)
		v.fail(w, r, http.StatusServiceUnavailable, err.Error())
	default:
		v.serverError(w, r, err)
	}
}

// serverError logs err and answers 500 in plain text (the layout itself may
// be what failed).
func (v *View) serverError(w http.ResponseWriter, r *http.Request, err error) {
	v.log.Error("ffview: request failed", "method", r.Method, "path", r.URL.Path, "error", err)
	http.Error(w, "internal error: "+err.Error(), http.StatusInternalServerError)
}

// funcs are the template functions every page may use.
var funcs = template.FuncMap{
	"ms":     fmtMs,
	"msp":    fmtMsPtr,
	"deref":  derefStr,
	"policy": policyText,
}

// policyText describes an edge group's policy: "all_of", "any_of
// (cancel_remaining)", "quorum 2 (let_run)".
func policyText(p executions.EdgePolicy) string {
	switch p.Kind {
	case executions.PolicyQuorum:
		return fmt.Sprintf("quorum %d (%s)", p.K, p.OnSatisfied)
	case executions.PolicyAnyOf:
		return "any_of (" + p.OnSatisfied + ")"
	}
	return p.Kind
}

// timeFormat is how pages print times (UTC, milliseconds).
const timeFormat = "2006-01-02 15:04:05.000"

// fmtMs prints a *_ms timestamp.
func fmtMs(ms int64) string { return time.UnixMilli(ms).UTC().Format(timeFormat) }

// fmtMsPtr prints a nullable *_ms timestamp, "–" when NULL.
func fmtMsPtr(ms *int64) string {
	if ms == nil {
		return "–"
	}
	return fmtMs(*ms)
}

// derefStr prints a nullable text column, "–" when NULL or empty.
func derefStr(s *string) string {
	if s == nil || *s == "" {
		return "–"
	}
	return *s
}
