package uiserver_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ffriver/ffriver/cmd/internal/uiserver"
	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/google/uuid"
)

// TestNoPageCanBeFramedByAnotherOrigin: every answer of the listener, for
// every route family of the execution view and of River UI, and the
// refusals of the guard and of basic auth, tells the browser that no page
// of another origin may frame it (X-Frame-Options: SAMEORIGIN for older
// browsers, Content-Security-Policy: frame-ancestors 'self'), so no other
// site can overlay it and steal a click (a framed cancel confirmation).
func TestNoPageCanBeFramedByAnotherOrigin(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv, st := serveView(t, uiserver.Options{User: "ada", Password: "pw"})
	flow, err := st.CreateFlow(ctx, uuid.Nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := st.Create(ctx, executions.CreateParams{Lane: "frames", FlowID: flow})
	if err != nil {
		t.Fatal(err)
	}
	leased, err := st.Create(ctx, executions.CreateParams{Lane: "frames-leased"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Claim(ctx, executions.ClaimParams{Lane: "frames-leased", WorkerID: "w", LeaseTTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	host := strings.TrimSuffix(strings.TrimPrefix(srv.URL, "http://"), "/")
	exec := "/ff/executions/" + url.PathEscape(id.String())
	form := map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": "http://" + host, "Sec-Fetch-Site": "same-origin"}

	for _, c := range []struct {
		name, method, path, host string
		auth                     bool
		header                   map[string]string
		body                     string
		want                     int
	}{
		{"view: /ff/ (redirect)", "GET", "/ff/", "", true, nil, "", http.StatusFound},
		{"view: assets", "GET", "/ff/assets/style.css", "", true, nil, "", http.StatusOK},
		{"view: executions list", "GET", "/ff/executions", "", true, nil, "", http.StatusOK},
		{"view: an execution", "GET", exec, "", true, nil, "", http.StatusOK},
		{"view: a flow", "GET", "/ff/flows/" + flow.String(), "", true, nil, "", http.StatusOK},
		{"view: cancel confirmation", "GET", exec + "/cancel", "", true, nil, "", http.StatusOK},
		{"view: revoke confirmation", "GET", "/ff/executions/" + url.PathEscape(leased.String()) + "/revoke", "", true, nil, "", http.StatusOK},
		{"view: cancel (the form's post)", "POST", exec + "/cancel", "", true, form, "confirm=yes", http.StatusSeeOther},
		{"view: an action that no longer applies", "POST", exec + "/cancel", "", true, form, "confirm=yes", http.StatusConflict},
		{"view: live page", "GET", "/ff/live", "", true, nil, "", http.StatusOK},
		{"view: live lease stream", "GET", "/ff/live/leases", "", true, nil, "", http.StatusOK},
		{"view: live completion stream", "GET", "/ff/live/completions", "", true, nil, "", http.StatusOK},
		{"view: backlog", "GET", "/ff/live/backlog", "", true, nil, "", http.StatusOK},
		{"view: bad input", "GET", "/ff/executions?limit=0", "", true, nil, "", http.StatusBadRequest},
		{"view: unknown execution", "GET", "/ff/executions/" + url.PathEscape(ff.NewExecutionID(3).String()), "", true, nil, "", http.StatusNotFound},
		{"view: unknown page", "GET", "/ff/nothing", "", true, nil, "", http.StatusNotFound},
		{"view: wrong method", "POST", "/ff/executions", "", true, form, "", http.StatusMethodNotAllowed},
		{"River UI: its page", "GET", "/", "", true, nil, "", http.StatusOK},
		{"River UI: a page of its app", "GET", "/jobs?state=completed", "", true, nil, "", http.StatusOK},
		{"River UI: its API", "GET", "/api/jobs?state=available&limit=5", "", true, nil, "", http.StatusOK},
		{"guard: another Host", "GET", "/ff/executions", "evil.example", true, nil, "", http.StatusForbidden},
		{"guard: a post from another origin", "POST", exec + "/cancel", "", true,
			map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"},
			"confirm=yes", http.StatusForbidden},
		{"basic auth: no credentials", "GET", "/ff/executions", "", false, nil, "", http.StatusUnauthorized},
	} {
		req, err := http.NewRequestWithContext(ctx, c.method, srv.URL+strings.TrimPrefix(c.path, "/"), strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		if c.host != "" {
			req.Host = c.host
		}
		if c.auth {
			req.SetBasicAuth("ada", "pw")
		}
		for k, v := range c.header {
			req.Header.Set(k, v)
		}
		code, h := headersOf(t, req)
		if code != c.want {
			t.Errorf("%s: %s %s answered %d, want %d", c.name, c.method, c.path, code, c.want)
		}
		if got := h.Get("X-Frame-Options"); got != "SAMEORIGIN" {
			t.Errorf("%s: %s %s (%d): X-Frame-Options %q, want SAMEORIGIN", c.name, c.method, c.path, code, got)
		}
		if got := h.Values("Content-Security-Policy"); !hasFrameAncestorsSelf(got) {
			t.Errorf("%s: %s %s (%d): Content-Security-Policy %q, want frame-ancestors 'self'", c.name, c.method, c.path, code, got)
		}
	}
}

// headersOf sends req without following redirects and returns the status
// and headers, without waiting for the body (a live stream never ends).
func headersOf(t *testing.T, req *http.Request) (int, http.Header) {
	t.Helper()
	ctx, cancel := context.WithCancel(req.Context())
	defer cancel()
	c := http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header
}

// hasFrameAncestorsSelf reports whether one of the policies limits framing
// to this origin.
func hasFrameAncestorsSelf(policies []string) bool {
	for _, p := range policies {
		for d := range strings.SplitSeq(p, ";") {
			if strings.Join(strings.Fields(d), " ") == "frame-ancestors 'self'" {
				return true
			}
		}
	}
	return false
}
