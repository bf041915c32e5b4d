package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ffriver/ffriver/cmd/ffctl/internal/demo"
	"github.com/ffriver/ffriver/cmd/internal/cli"
	"github.com/ffriver/ffriver/internal/testdb"
)

func TestDemoDuration(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Duration{
		"":      demo.DefaultDuration,
		" 45 ":  45 * time.Second,
		"90s":   90 * time.Second,
		"2m":    2 * time.Minute,
		"1m30s": 90 * time.Second,
	} {
		if got, err := demoDuration(in); err != nil || got != want {
			t.Errorf("demoDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"0", "-3", "soon", "-1s", "0s"} {
		if got, err := demoDuration(in); cli.ExitCode(err) != cli.ExitUsage {
			t.Errorf("demoDuration(%q) = %v, %v; want a usage error", in, got, err)
		}
	}
}

func TestDemoUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--duration", "0s"}, nil, "--duration"},
		{[]string{"--duration", "-5s"}, nil, "--duration"},
		{[]string{"--grace", "-1s"}, nil, "--grace"},
		{nil, map[string]string{"DEMO_DURATION": "a while"}, "DEMO_DURATION"},
		{[]string{"--ui-addr", "0.0.0.0:8080"}, nil, "loopback"},
		{[]string{"--ui-addr", "nonsense"}, nil, "loopback"},
		{[]string{"extra"}, nil, "unexpected argument"},
	} {
		var stdout, stderr bytes.Buffer
		env := map[string]string{"DATABASE_URL": "postgres://u@127.0.0.1:1/none"}
		for k, v := range tc.env {
			env[k] = v
		}
		code := runDemo(context.Background(), tc.args, &stdout, &stderr, func(k string) string { return env[k] })
		if code != cli.ExitUsage || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("demo %q (env %v): exit %d, stderr %q; want exit %d mentioning %q", tc.args, tc.env, code, stderr.String(), cli.ExitUsage, tc.want)
		}
	}
	// An explicit --duration replaces DEMO_DURATION, even a malformed one:
	// the next mistake reported is the UI address.
	var stderr bytes.Buffer
	env := map[string]string{"DATABASE_URL": "postgres://u@127.0.0.1:1/none", "DEMO_DURATION": "a while"}
	code := runDemo(context.Background(), []string{"--duration", "5s", "--ui-addr", "10.0.0.1:80"}, io.Discard, &stderr,
		func(k string) string { return env[k] })
	if code != cli.ExitUsage || strings.Contains(stderr.String(), "DEMO_DURATION") || !strings.Contains(stderr.String(), "loopback") {
		t.Errorf("--duration with a bad DEMO_DURATION: exit %d, stderr %q", code, stderr.String())
	}
	var stdout bytes.Buffer
	if code := runDemo(context.Background(), []string{"--help"}, &stdout, io.Discard, func(string) string { return "" }); code != cli.ExitOK ||
		!strings.Contains(stdout.String(), "ffdemo_") || !strings.Contains(stdout.String(), "--keep") {
		t.Errorf("--help: exit %d, %q", code, stdout.String())
	}
}

func TestDemoUnreachableDatabase(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	getenv := func(string) string { return "" }
	code := runDemo(context.Background(), []string{"--database-url", "postgres://u@127.0.0.1:1/none?connect_timeout=2"}, &stdout, &stderr, getenv)
	if code != cli.ExitFailure {
		t.Fatalf("exit %d, want %d; stderr %q", code, cli.ExitFailure, stderr.String())
	}
	msg := stderr.String()
	for _, want := range []string{"ffctl demo: connecting to postgres://u@127.0.0.1:1/none", "make demo"} {
		if !strings.Contains(msg, want) {
			t.Errorf("stderr %q lacks %q", msg, want)
		}
	}
	if stdout.Len() != 0 {
		t.Errorf("stdout %q, want nothing", stdout.String())
	}
}

// demoOutput collects the demo's stdout and hands out River UI's URL as
// soon as the demo prints it.
type demoOutput struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	url  chan string
	sent bool
}

var uiLine = regexp.MustCompile(`River UI\s+(http://\S+/)\n`)

func (o *demoOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.buf.Write(p)
	if !o.sent {
		if m := uiLine.FindSubmatch(o.buf.Bytes()); m != nil {
			o.sent = true
			o.url <- string(m[1])
		}
	}
	return len(p), nil
}

func (o *demoOutput) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// TestDemo runs the demo for a few seconds against the test database: it
// must exit 0, serve River UI while it runs, show every lease event type
// and the cancelled and skipped outcomes (every outcome, in fact) with
// non-zero counts from the streams, and drop its schema.
func TestDemo(t *testing.T) {
	t.Parallel()
	testdb.Reserve(t, 20)          // its River clients and pools (docs/development.md)
	admin := testdb.Connect(t, "") // skips without a database (fails with CI=true)
	defer admin.Close()

	out := &demoOutput{url: make(chan string, 1)}
	var stderr bytes.Buffer
	env := map[string]string{"DATABASE_URL": testdb.URL(), "TERM": "dumb"}
	done := make(chan int, 1)
	start := time.Now()
	go func() {
		// A grace long enough for a busy machine: the demo stops as soon as
		// every event type was seen, so it costs nothing on a quiet one.
		done <- runDemo(context.Background(), []string{"--duration", "6s", "--grace", "5m", "--ui-addr", "127.0.0.1:0"}, out, &stderr,
			func(k string) string { return env[k] })
	}()

	var code int
	uiStatus := 0
	var viewURL string
	select {
	case url := <-out.url:
		client := &http.Client{Timeout: 5 * time.Second}
		resp, err := client.Get(url)
		if err != nil {
			t.Errorf("GET %s while the demo runs: %v", url, err)
		} else {
			uiStatus = resp.StatusCode
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if !bytes.Contains(body, []byte("River")) {
				t.Errorf("GET %s: the page does not look like River UI: %.200s", url, body)
			}
		}
		// The execution view beside it, on the same listener, lists the
		// demo's executions once its workload has created some (the URL is
		// printed before the first is), at the latest before the demo ends.
		listed, last, ended := false, "", false
		for !listed && !ended {
			resp, err := client.Get(url + "ff/executions")
			if err != nil {
				last = err.Error()
			} else {
				body, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				last = fmt.Sprintf("%d: %.300s", resp.StatusCode, body)
				listed = resp.StatusCode == http.StatusOK && bytes.Contains(body, []byte(`id="executions"`))
			}
			if !listed {
				select {
				case code = <-done:
					ended = true
				case <-time.After(100 * time.Millisecond): // polling a page: there is no event to await
				}
			}
		}
		if !listed {
			t.Errorf("GET %sff/executions never listed the demo's executions while it ran; last answer %s", url, last)
		}
		viewURL = url + "ff/executions"
		if !ended {
			code = <-done
		}
	case code = <-done:
		t.Errorf("the demo ended without printing River UI's URL")
	}
	elapsed := time.Since(start)
	stdout := out.String()
	t.Logf("demo ran %s; stdout:\n%s\nstderr:\n%s", elapsed.Round(time.Millisecond), stdout, stderr.String())
	if code != cli.ExitOK {
		t.Fatalf("exit %d, want 0; stderr: %s", code, stderr.String())
	}
	if uiStatus != http.StatusOK {
		t.Errorf("River UI answered %d, want 200", uiStatus)
	}
	if viewURL != "" && !regexp.MustCompile(`(?m)^  executions  `+regexp.QuoteMeta(viewURL)+` `).MatchString(stdout) {
		t.Errorf("the demo did not print the execution view's URL %s", viewURL)
	}

	summary := stdout[strings.Index(stdout, "\nSummary: "):]
	counts := map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)^(leases|completions)\s+(\w+)\s+(\d+)`).FindAllStringSubmatch(summary, -1) {
		n, _ := strconv.Atoi(m[3])
		counts[m[1]+" "+m[2]] = n
	}
	for _, typ := range demo.LeaseTypes() {
		if counts["leases "+typ] <= 0 {
			t.Errorf("summary: lease event %q count %d, want > 0", typ, counts["leases "+typ])
		}
	}
	for _, o := range demo.Outcomes() {
		if counts["completions "+o] <= 0 {
			t.Errorf("summary: completion %q count %d, want > 0", o, counts["completions "+o])
		}
	}
	for _, want := range []string{"attempt_timeout", "edge_cancel_dispatcher", "Every lease event type and every completion outcome"} {
		if !strings.Contains(summary, want) {
			t.Errorf("summary lacks %q", want)
		}
	}

	m := regexp.MustCompile(`Schema (` + demo.SchemaPrefix + `[0-9a-f]+) dropped`).FindStringSubmatch(stdout)
	if m == nil {
		t.Fatal("the demo did not say it dropped its schema")
	}
	var exists bool
	if err := admin.QueryRow(context.Background(), `SELECT to_regnamespace($1) IS NOT NULL`, m[1]).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Errorf("schema %s still exists", m[1])
	}
}
