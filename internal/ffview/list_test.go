package ffview_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/ffriver/ffriver/executions"
)

func TestRootRedirectsToExecutions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.get("/ff/")
	if r.Code != http.StatusFound || r.Loc != "/ff/executions" {
		t.Fatalf("GET /ff/: %d to %q, want 302 to /ff/executions", r.Code, r.Loc)
	}
	e.get("/ff/nothing-here").want(t, http.StatusNotFound, "no page at /ff/nothing-here")
	e.get("/ff/assets/style.css").want(t, http.StatusOK, "ffview")
}

func TestExecutionsListFilters(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.create(executions.CreateParams{Lane: "lane-a", Namespace: "ns-one"})
	b := e.create(executions.CreateParams{Lane: "lane-b", Namespace: "ns-two"})

	r := e.get("/ff/executions")
	r.want(t, http.StatusOK, a.String(), b.String(), `href="/ff/live"`, "River UI")
	r = e.get("/ff/executions?lane=lane-b")
	r.want(t, http.StatusOK, b.String())
	if strings.Contains(r.Body, a.String()) {
		t.Errorf("lane=lane-b lists %s of lane-a", a)
	}
	r = e.get("/ff/executions?namespace=ns-one")
	r.want(t, http.StatusOK, a.String())
	if strings.Contains(r.Body, b.String()) {
		t.Errorf("namespace=ns-one lists %s of ns-two", b)
	}
	e.get("/ff/executions?state=completed").want(t, http.StatusOK, "No execution matches.")
}

func TestExecutionsListBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for target, msg := range map[string]string{
		"/ff/executions?colour=red":                       `unknown parameter &#34;colour&#34;`,
		"/ff/executions?state=sleeping":                   `&#34;sleeping&#34; is not a state`,
		"/ff/executions?limit=1000000":                    "not a page size in 1..400",
		"/ff/executions?limit=-1":                         "not a page size in 1..400",
		"/ff/executions?flow=not-a-uuid":                  "is not a flow UUID",
		"/ff/executions?lane=a&lane=b":                    "given 2 times",
		"/ff/executions?lane=" + strings.Repeat("x", 300): "lane",
	} {
		e.get(target).want(t, http.StatusBadRequest, msg)
	}
}
