package uiserver_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/ffriver/ffriver/cmd/internal/uiserver"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
)

type noopArgs struct{}

func (noopArgs) Kind() string { return "uiserver_test.noop" }

// TestGuardAgainstRealRiverUI sends the attacks of issue 11 to the real River
// UI handler (riverui) serving a real job in Postgres: every one is refused
// and the job stays uncancelled; then River UI's own page cancels it.
func TestGuardAgainstRealRiverUI(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, nil)
	ctx := t.Context()
	client, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{Schema: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	res, err := client.Insert(ctx, noopArgs{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	jobID := res.Job.ID
	srv, err := uiserver.Start(ctx, client, uiserver.Options{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	served := strings.TrimSuffix(strings.TrimPrefix(srv.URL, "http://"), "/")
	_, port, _ := net.SplitHostPort(served)
	body := `{"ids":["` + itoa(jobID) + `"]}`

	send := func(method, path, host string, header map[string]string, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, srv.URL+strings.TrimPrefix(path, "/"), strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	state := func() rivertype.JobState {
		t.Helper()
		j, err := client.JobGet(context.WithoutCancel(ctx), jobID)
		if err != nil {
			t.Fatal(err)
		}
		return j.State
	}

	for _, c := range []struct {
		name, method, path, host string
		header                   map[string]string
		want                     int
	}{
		{"issue 11: text/plain, Origin and Host evil.example", "POST", "/api/jobs/cancel", "evil.example",
			map[string]string{"Content-Type": "text/plain", "Origin": "https://evil.example"}, 403},
		{"DNS rebinding: JSON, same-origin to the page, Host evil.example", "POST", "/api/jobs/cancel", "evil.example:" + port,
			map[string]string{"Content-Type": "application/json", "Origin": "http://evil.example:" + port, "Sec-Fetch-Site": "same-origin"}, 403},
		{"DNS rebinding read", "GET", "/api/jobs/" + itoa(jobID), "evil.example:" + port, nil, 403},
		{"loopback Host of another port", "POST", "/api/jobs/cancel", "127.0.0.1:1",
			map[string]string{"Content-Type": "application/json"}, 403},
		{"cross-site form post, Host right", "POST", "/api/jobs/cancel", served,
			map[string]string{"Content-Type": "text/plain", "Origin": "https://evil.example"}, 403},
		{"cross-site JSON by Sec-Fetch-Site", "POST", "/api/jobs/cancel", served,
			map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"}, 403},
		{"same-site page on another port", "POST", "/api/jobs/delete", served,
			map[string]string{"Content-Type": "application/json", "Sec-Fetch-Site": "same-site", "Origin": "http://127.0.0.1:3000"}, 403},
		{"Origin null", "POST", "/api/jobs/cancel", served,
			map[string]string{"Content-Type": "application/json", "Origin": "null"}, 403},
		{"no browser headers, text/plain", "POST", "/api/jobs/cancel", served,
			map[string]string{"Content-Type": "text/plain"}, 415},
		{"no browser headers, form", "POST", "/api/jobs/retry", "localhost:" + port,
			map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 415},
		{"no browser headers, no Content-Type", "POST", "/api/jobs/delete", served, nil, 415},
	} {
		code, text := send(c.method, c.path, c.host, c.header, body)
		if code != c.want {
			t.Errorf("%s: %d %s, want %d", c.name, code, strings.TrimSpace(text), c.want)
		}
		if s := state(); s != rivertype.JobStateAvailable {
			t.Fatalf("%s: the job is %s, want it still available", c.name, s)
		}
	}

	// What River UI's page sends: its JSON as text/plain, from its origin.
	code, text := send("POST", "/api/jobs/cancel", served, map[string]string{
		"Content-Type": "text/plain;charset=UTF-8", "Origin": "http://" + served, "Sec-Fetch-Site": "same-origin"}, body)
	if code != http.StatusOK || state() != rivertype.JobStateCancelled {
		t.Fatalf("River UI's own cancel: %d %s, job %s", code, text, state())
	}
	// A script's same-origin JSON request on a loopback name.
	code, text = send("POST", "/api/jobs/retry", "localhost:"+port, map[string]string{"Content-Type": "application/json"}, body)
	if code != http.StatusOK || state() != rivertype.JobStateAvailable {
		t.Fatalf("JSON retry: %d %s, job %s", code, text, state())
	}
	code, text = send("POST", "/api/jobs/cancel", "[::1]:"+port, map[string]string{
		"Content-Type": "application/json; charset=utf-8", "Origin": "http://[::1]:" + port}, body)
	if code != http.StatusOK || state() != rivertype.JobStateCancelled {
		t.Fatalf("JSON cancel: %d %s, job %s", code, text, state())
	}
	// The page and the reads still answer.
	for _, p := range []string{"/", "/api/jobs/" + itoa(jobID)} {
		if code, text := send("GET", p, served, nil, ""); code != http.StatusOK {
			t.Errorf("GET %s: %d %s", p, code, text)
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestGuardHosts: which Host headers the guard answers, with and without an
// allowed list, and on a listener bound to a non-loopback address.
func TestGuardHosts(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) })
	check := func(served net.Addr, allowed []string, cases map[string]bool) {
		t.Helper()
		g, err := uiserver.Guard(ok, served, allowed)
		if err != nil {
			t.Fatal(err)
		}
		for host, want := range cases {
			req, _ := http.NewRequest(http.MethodGet, "/", nil)
			req.Host = host
			w := httptest.NewRecorder()
			g.ServeHTTP(w, req)
			if got := w.Code == http.StatusTeapot; got != want {
				t.Errorf("served %v, allowed %q: Host %q answered %v, want %v (%d)", served, allowed, host, got, want, w.Code)
			}
		}
	}
	loop := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}
	check(loop, nil, map[string]bool{
		"127.0.0.1:8080": true, "LOCALHOST:8080": true, "[::1]:8080": true, "127.0.0.2:8080": true,
		"localhost": false, "127.0.0.1:8081": false, "evil.example:8080": false, "evil.example": false,
		"localhost.:8080": false, "": false, "10.0.0.5:8080": false,
	})
	check(loop, []string{"ui.example.com", "Ops.Internal:9000", "::1"}, map[string]bool{
		"ui.example.com": true, "UI.example.com:443": true, "ops.internal:9000": true, "ops.internal:8080": false,
		"[::1]:1234": true, "evil.example:8080": false,
	})
	check(&net.TCPAddr{IP: net.IPv4(10, 0, 0, 5), Port: 8080}, nil, map[string]bool{
		"10.0.0.5:8080": true, "localhost:8080": true, "10.0.0.6:8080": false, "sched.internal:8080": false,
	})
}

func TestParseAllowedHost(t *testing.T) {
	for in, want := range map[string]string{
		"UI.Example.com": "ui.example.com", "ops:9000": "ops:9000", "::1": "[::1]", "[::1]:80": "[::1]:80", " a ": "a",
		"": "", "http://x": "", "x/y": "", "x:0": "", "x:99999": "", "x:y": "", ":80": "", "u@x": "", "a b": "",
	} {
		got, err := uiserver.ParseAllowedHost(in)
		if (err != nil) != (want == "") || got != want {
			t.Errorf("ParseAllowedHost(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}
