package ffview_test

import (
	"html"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
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

func TestExecutionsListIDAndPages(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var ids []ff.ExecutionID
	for range 5 {
		ids = append(ids, e.create(executions.CreateParams{Lane: "lane-p"}))
		e.clock.Advance(time.Millisecond)
	}
	other := e.create(executions.CreateParams{Lane: "lane-q"})

	// By whole id and by the beginning of its UUID.
	r := e.get("/ff/executions?id=" + url.QueryEscape(ids[2].String()))
	r.want(t, http.StatusOK, ids[2].String())
	if n := strings.Count(r.Body, `href="/ff/executions/%7bfp:`); n != 1 {
		t.Errorf("id filter lists %d executions, want 1", n)
	}
	e.get("/ff/executions?id="+ids[3].UUID.String()[:8]).want(t, http.StatusOK, ids[3].String())

	// Two per page, newest first, following the Next links to the end.
	var seen []string
	target := "/ff/executions?lane=lane-p&limit=2"
	for pages := 0; target != ""; pages++ {
		if pages > 3 {
			t.Fatal("more than 3 pages of 5 executions at 2 a page")
		}
		r := e.get(target)
		r.want(t, http.StatusOK)
		if strings.Contains(r.Body, other.String()) {
			t.Errorf("lane-p lists %s of lane-q", other)
		}
		var onPage []string
		for _, id := range ids {
			if strings.Contains(r.Body, id.String()) {
				onPage = append(onPage, id.String())
			}
		}
		slices.SortFunc(onPage, func(a, b string) int { return strings.Index(r.Body, a) - strings.Index(r.Body, b) })
		seen = append(seen, onPage...)
		target = ""
		if m := nextLink.FindStringSubmatch(r.Body); m != nil {
			target = html.UnescapeString(m[1])
			if !strings.Contains(target, "lane=lane-p") || !strings.Contains(target, "limit=2") {
				t.Errorf("next page %q lost the filter", target)
			}
		}
		if pages > 0 && !strings.Contains(r.Body, `id="first"`) {
			t.Errorf("page %d has no link to the first page", pages+1)
		}
	}
	want := []string{ids[4].String(), ids[3].String(), ids[2].String(), ids[1].String(), ids[0].String()}
	if !slices.Equal(seen, want) {
		t.Errorf("pages listed %v, want %v", seen, want)
	}
}

var nextLink = regexp.MustCompile(`<a href="([^"]+)" id="next">`)

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
		"/ff/executions?id=ab":                            "at least 4 hexadecimal digits",
		"/ff/executions?id=zzzz":                          "not the beginning of a UUID",
		"/ff/executions?id=%7Bfp:99999%7D:ab":             "not a partition number",
		"/ff/executions?id=%7Bfp:300%7D:abcd":             "partition 300 is outside",
		"/ff/executions?after=garbage":                    "want &lt;created_at_ms&gt;.&lt;partition&gt;.&lt;uuid&gt;",
		"/ff/executions?after=1.2.3":                      "not a UUID",
	} {
		e.get(target).want(t, http.StatusBadRequest, msg)
	}
}
