package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/ffriver/ffriver/cmd/internal/cli"
	"github.com/ffriver/ffriver/cmd/internal/clitest"
	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/ffriver/ffriver/internal/testlog"
)

func getenv(k string) string {
	if k == "DATABASE_URL" {
		return "postgres://u@127.0.0.1:1/db"
	}
	return ""
}

// TestBadFlagValues: every bad value is a usage error (exit 2) whose one
// sentence names the flag and its allowed range; none falls back to the
// default.
func TestBadFlagValues(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--attempt-timeout-interval", "0s"}, "--attempt-timeout-interval 0s is outside the allowed range 10ms..24h0m0s"},
		{[]string{"--attempt-timeout-interval", "-1s"}, "--attempt-timeout-interval"},
		{[]string{"--delayed-promoter-interval", "1ns"}, "--delayed-promoter-interval"},
		{[]string{"--dependency-interval", "48h"}, "--dependency-interval"},
		{[]string{"--attempt-timeout-batch", "0"}, "--attempt-timeout-batch 0 is outside the allowed range 1..100000"},
		{[]string{"--outbox-retention-batch", "-5"}, "--outbox-retention-batch"},
		{[]string{"--edge-cancel-dispatcher-batch", "1000001"}, "--edge-cancel-dispatcher-batch"},
		{[]string{"--outbox-retention", "-1h"}, "--outbox-retention -1h0m0s is outside the allowed range 1s.."},
		{[]string{"--outbox-retention", "0s"}, "--outbox-retention"},
		{[]string{"--execution-retention", "0s"}, "--execution-retention 0s is outside the allowed range 1s.."},
		{[]string{"--execution-retention", "-1s"}, "--execution-retention"},
		{[]string{"--execution-retention", "never"}, "--execution-retention"},
		{[]string{"--execution-retention-batch", "0"}, "--execution-retention-batch"},
		{[]string{"--job-timeout", "0s"}, "--job-timeout 0s is outside the allowed range 100ms..24h0m0s"},
		{[]string{"--rescue-after", "0s"}, "--rescue-after"},
		{[]string{"--completed-retention", "-1s"}, "--completed-retention"},
		{[]string{"--shutdown-timeout", "0s"}, "--shutdown-timeout 0s is outside the allowed range 100ms..1h0m0s"},
		{[]string{"--scan-concurrency", "-1"}, "--scan-concurrency -1 is outside the allowed range 0..10000"},
		{[]string{"--apply-concurrency", "10001"}, "--apply-concurrency"},
		{[]string{"--partitions", "-1"}, "--partitions -1 is outside the allowed range 0..32767"},
		{[]string{"--partitions", "99999"}, "--partitions"},
		{[]string{"--ui-allowed-hosts", "http://x"}, "--ui-allowed-hosts"},
		{[]string{"--ui-allowed-hosts", "a,,b"}, "--ui-allowed-hosts"},
		{[]string{"--metrics-addr", "nope"}, "--metrics-addr"},
	} {
		var stdout, stderr bytes.Buffer
		code := cli.Run(context.Background(), "ffscheduler", parse, c.args, &stdout, &stderr, getenv)
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		if code != cli.ExitUsage || !strings.Contains(lines[0], c.want) || len(lines) != 2 {
			t.Errorf("%q: exit %d, stderr %q; want %d and one sentence with %q", c.args, code, stderr.String(), cli.ExitUsage, c.want)
		}
	}
}

// TestGoodFlagValues: the edges of the ranges are accepted.
func TestGoodFlagValues(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		nil,
		{"--attempt-timeout-interval", "10ms", "--attempt-timeout-batch", "1", "--outbox-retention", "1s"},
		{"--dependency-interval", "24h", "--dependency-batch", "100000", "--partitions", "0", "--shutdown-timeout", "1h"},
		{"--job-timeout", "2s", "--rescue-after", "3s", "--ui-allowed-hosts", "ui.example.com,ops:9000"},
		{"--execution-retention", "forever"},
		{"--execution-retention", "1s", "--execution-retention-interval", "1m"},
	} {
		if _, err := parse(args, io.Discard, getenv); err != nil {
			t.Errorf("%q: %v", args, err)
		}
	}
}

// A second scheduler on a host finds River UI's default address taken: it
// warns and carries on without River UI, and its started line says so
// instead of claiming the address.
func TestStartedLineSaysUINotServed(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", defaultUIAddr)
	if err == nil {
		defer ln.Close()
	} // else something else holds it: taken either way
	db := testdb.New(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr testlog.Buffer
	done := make(chan int, 1)
	go func() {
		done <- cli.Run(ctx, "ffscheduler", parse, []string{"--database-url", testdb.URL(), "--schema", db.Schema}, io.Discard, &stderr, func(string) string { return "" })
	}()
	fftest.Await(t, 60*time.Second, "the started line", func() bool { return strings.Contains(stderr.String(), "ffscheduler started") })
	cancel()
	if code := <-done; code != cli.ExitOK {
		t.Errorf("exit %d: %s", code, stderr.String())
	}
	var started string
	for _, line := range strings.Split(stderr.String(), "\n") {
		if strings.Contains(line, "ffscheduler started") {
			started = line
		}
	}
	if !strings.Contains(started, "not served") || strings.Contains(started, "ui="+defaultUIAddr) {
		t.Errorf("started line %q: want it to say River UI is not served", started)
	}
}

// The split layout (issue 24, item 4): ffriver's tables in --schema,
// River's in --river-schema. Without the flag the scheduler refuses with
// one line that names it; with it, its ticks land in River's schema.
func TestRiverSchemaFlag(t *testing.T) {
	t.Parallel()
	riv := testdb.New(t, &testdb.Options{NoMigrate: true})
	db := testdb.New(t, &testdb.Options{RiverSchema: riv.Schema})
	args := []string{"--database-url", testdb.URL(), "--schema", db.Schema, "--ui-addr", "off"}
	noEnv := func(string) string { return "" }
	var stderr testlog.Buffer
	if code := cli.Run(context.Background(), "ffscheduler", parse, args, io.Discard, &stderr, noEnv); code != cli.ExitNotMigrated ||
		!strings.Contains(stderr.String(), "--river-schema") || strings.Count(strings.TrimSpace(stderr.String()), "\n") != 0 {
		t.Errorf("without --river-schema: exit %d, stderr %q; want %d and one line naming --river-schema", code, stderr.String(), cli.ExitNotMigrated)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		done <- cli.Run(ctx, "ffscheduler", parse, append(args, "--river-schema", riv.Schema), io.Discard, &stderr, noEnv)
	}()
	fftest.Await(t, 90*time.Second, "a tick in River's schema", func() bool {
		var n int
		err := riv.Pool.QueryRow(context.Background(), `SELECT count(*) FROM `+riv.Schema+`.river_job WHERE kind = 'ff.tick'`).Scan(&n)
		return err == nil && n > 0
	})
	cancel()
	if code := <-done; code != cli.ExitOK {
		t.Errorf("exit %d: %s", code, stderr.String())
	}
}

// A newcomer's start-up mistakes get messages that name what was given
// (issue 40): a --schema that does not exist is missing under its name (not
// "no schema of the connection's search_path"), a --partitions other than
// the schema's is a partition count mismatch (not "schema not migrated"),
// both exit 3; completion for a shell without a script is a usage error.
func TestStartMistakesNameWhatWasGiven(t *testing.T) {
	t.Parallel()
	clitest.StartMistakes(t, "ffscheduler", parse, "--ui-addr", "off")
}
