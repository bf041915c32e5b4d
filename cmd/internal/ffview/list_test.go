package ffview_test

import (
	"html"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ffriver/ffriver/cmd/internal/ffview"
	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/jackc/pgx/v5/pgxpool"
)

func TestRootRedirectsToExecutions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.get("/ff/")
	if r.Code != http.StatusFound || r.Loc != "/ff/executions" {
		t.Fatalf("GET /ff/: %d to %q, want 302 to /ff/executions", r.Code, r.Loc)
	}
	e.get("/ff/nothing-here").want(t, http.StatusNotFound, "no page at /ff/nothing-here")
	for _, m := range []string{http.MethodDelete, http.MethodPost, http.MethodPut} {
		r := e.do(httptest.NewRequestWithContext(e.ctx, m, "/ff/executions", nil))
		r.want(t, http.StatusMethodNotAllowed, m+" is not an action on /ff/executions")
	}
	e.do(httptest.NewRequestWithContext(e.ctx, http.MethodDelete, "/ff/nothing", nil)).want(t, http.StatusNotFound, "no page at /ff/nothing")
	e.get("/ff/assets/style.css").want(t, http.StatusOK, "ffview")
}

func TestExecutionsListFilters(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.Create(executions.CreateParams{Lane: "lane-a", Namespace: "ns-one"})
	b := e.Create(executions.CreateParams{Lane: "lane-b", Namespace: "ns-two"})

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
		ids = append(ids, e.Create(executions.CreateParams{Lane: "lane-p"}))
		e.clock.Advance(time.Millisecond)
	}
	other := e.Create(executions.CreateParams{Lane: "lane-q"})

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

// With the database gone (its address refusing connections), a page
// answers 503 saying so, not 500.
func TestDatabaseUnavailable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.Create(executions.CreateParams{})

	// The view's own pool goes through a proxy the test then shuts.
	cfg, err := pgxpool.ParseConfig(testdb.URL())
	if err != nil {
		t.Fatal(err)
	}
	target := net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port)))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				_ = c.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, c, up)
			mu.Unlock()
			go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
			go func() { _, _ = io.Copy(c, up); _ = c.Close() }()
		}
	}()
	addr := ln.Addr().(*net.TCPAddr)
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = "127.0.0.1", uint16(addr.Port)
	cfg.ConnConfig.RuntimeParams["search_path"] = e.db.Name
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(e.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	st, err := executions.Open(e.ctx, pool, executions.Config{Schema: e.db.Name})
	if err != nil {
		t.Fatal(err)
	}
	v, err := ffview.New(st, ffview.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e.view = v
	e.get(execPath(id)).want(t, http.StatusOK, id.String())

	_ = ln.Close()
	mu.Lock()
	for _, c := range conns {
		_ = c.Close()
	}
	mu.Unlock()
	pool.Reset()
	e.get("/ff/executions").want(t, http.StatusServiceUnavailable, "unavailable")
	e.get(execPath(id)).want(t, http.StatusServiceUnavailable, "unavailable")
}
