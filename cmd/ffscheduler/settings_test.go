package main

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/ffriver/ffriver"
	"github.com/ffriver/ffriver/cmd/internal/cli"
	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/ffriver/ffriver/internal/testlog"
)

// Issue 40, item 2: the first scheduler stores the settings it was given
// explicitly (never its defaults); a second one given another value says
// so at start, naming both, and runs the stored one, while storing what it
// was given that nobody stored yet.
func TestSchedulerStoresItsFlagsAndWarnsOnDisagreement(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, nil)
	start := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var stderr testlog.Buffer
		done := make(chan int, 1)
		go func() {
			done <- cli.Run(ctx, "ffscheduler", parse, append([]string{"--database-url", testdb.URL(), "--schema", db.Schema, "--ui-addr", "off"}, args...),
				io.Discard, &stderr, func(string) string { return "" })
		}()
		fftest.Await(t, 60*time.Second, "the started line", func() bool { return strings.Contains(stderr.String(), "ffscheduler started") })
		cancel()
		if code := <-done; code != cli.ExitOK {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
		return stderr.String()
	}
	first := start("--execution-retention", "5s")
	if strings.Contains(first, "disagrees") {
		t.Errorf("the first scheduler warned of a disagreement:\n%s", first)
	}
	second := start("--execution-retention", "168h", "--attempt-timeout-batch", "50")
	var warn string
	for _, line := range strings.Split(second, "\n") {
		if strings.Contains(line, "disagrees with the one stored in the schema") {
			warn = line
		}
	}
	for _, want := range []string{"level=WARN", "setting=execution_retention", "flag=--execution-retention", "given=168h0m0s", "stored=5s", "using=5s"} {
		if !strings.Contains(warn, want) {
			t.Errorf("the second scheduler's warning %q lacks %q:\n%s", warn, want, second)
		}
	}
	stored, err := ffriver.StoredSettings(context.Background(), db.Pool, db.Schema)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, st := range stored {
		got[st.Name] = st.Value
		if !strings.HasPrefix(st.SetBy, "ffscheduler on ") {
			t.Errorf("%s stored by %q, want the scheduler", st.Name, st.SetBy)
		}
	}
	if len(got) != 2 || got["execution_retention"] != "5s" || got["attempt_timeout.batch"] != "50" {
		t.Errorf("stored settings = %v, want the first's execution_retention 5s and the second's attempt_timeout.batch 50, no default", got)
	}
}
