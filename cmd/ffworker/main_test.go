package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/ffriver/ffriver/cmd/internal/cli"
	"github.com/ffriver/ffriver/cmd/internal/clitest"
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
		{[]string{"--concurrency", "-1"}, "--concurrency -1 is outside the allowed range 0..10000"},
		{[]string{"--scan-concurrency", "10001"}, "--scan-concurrency"},
		{[]string{"--concurrency", "0", "--scan-concurrency", "0"}, "both 0"},
		{[]string{"--job-timeout", "0s"}, "--job-timeout 0s is outside the allowed range 100ms..24h0m0s"},
		{[]string{"--shutdown-timeout", "-1s"}, "--shutdown-timeout"},
		{[]string{"--shutdown-timeout", "0s"}, "--shutdown-timeout"},
		{[]string{"--tick-stale-after", "-1s"}, "--tick-stale-after -1s is outside the allowed range 1s..24h0m0s (or 0 to disable)"},
		{[]string{"--tick-stale-after", "1ms"}, "--tick-stale-after"},
		{[]string{"--partitions", "-3"}, "--partitions"},
		{[]string{"--metrics-addr", "nope"}, "--metrics-addr"},
	} {
		var stdout, stderr bytes.Buffer
		code := cli.Run(context.Background(), "ffworker", parse, c.args, &stdout, &stderr, getenv)
		lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
		if code != cli.ExitUsage || !strings.Contains(lines[0], c.want) || len(lines) != 2 {
			t.Errorf("%q: exit %d, stderr %q; want %d and one sentence with %q", c.args, code, stderr.String(), cli.ExitUsage, c.want)
		}
	}
	for _, args := range [][]string{nil, {"--tick-stale-after", "0"}, {"--job-timeout", "100ms", "--shutdown-timeout", "1h", "--concurrency", "0"}} {
		if _, err := parse(args, io.Discard, getenv); err != nil {
			t.Errorf("%q: %v", args, err)
		}
	}
}

// TestBadConnStringsNeverPrintThePassword runs ffworker's main path with
// malformed or unreachable connection strings of each form: no password in
// what it prints, the lines of its (short) wait for an unreachable server
// included.
func TestBadConnStringsNeverPrintThePassword(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ conn, pw string }{
		{"postgres://u:Secr3tPW@[::1:5432/db", "Secr3tPW"},
		{"postgres://u:Secr3tPW%zz@127.0.0.1:1/db", "Secr3tPW"},
		{"postgres://u:Secr3t PW@127.0.0.1:1/db", "Secr3t PW"},
		{"postgres://u@127.0.0.1:1/db?password=Secr3tPW&connect_timeout=2", "Secr3tPW"},
		{"host=127.0.0.1 port=1 password = Secr3tPW", "Secr3tPW"},
		{"host=127.0.0.1 port=1 password='Secr3t PW' connect_timeout=2", "Secr3t PW"},
	} {
		var stdout, stderr bytes.Buffer
		code := cli.Run(context.Background(), "ffworker", parse, []string{"--database-url", c.conn, "--log-level", "debug", "--startup-wait", "300ms"}, &stdout, &stderr, getenv)
		if code == cli.ExitOK || strings.Contains(stderr.String()+stdout.String(), c.pw) {
			t.Errorf("%q: exit %d, printed:\n%s", c.conn, code, stderr.String())
		}
	}
}

// --river-schema (issue 24, item 4): parsed, defaulting to --schema.
func TestRiverSchemaFlag(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--schema", "ff"}, "ff"},
		{[]string{"--schema", "ff", "--river-schema", "app"}, "app"},
	} {
		d, err := parse(c.args, io.Discard, getenv)
		if err != nil || d.Flags.RiverSchema != c.want {
			t.Errorf("%q: RiverSchema %q, %v; want %q", c.args, d.Flags.RiverSchema, err, c.want)
		}
	}
}

// A newcomer's mistakes get a sentence that says what to do (issue 40, item
// 4): the unit a bare number lacks, the flag a misspelt one means; and the
// shell completion script and answers come from the flags.
func TestNewcomerMistakesAndCompletion(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--job-timeout", "30"}, `invalid value "30" for flag --job-timeout: a duration needs a unit: "30s"`},
		{[]string{"--concurency", "4"}, "not defined: --concurency (did you mean --concurrency?)"},
	} {
		var stderr bytes.Buffer
		code := cli.Run(context.Background(), "ffworker", parse, c.args, io.Discard, &stderr, getenv)
		if code != cli.ExitUsage || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%q: exit %d, stderr %q; want %d with %q", c.args, code, stderr.String(), cli.ExitUsage, c.want)
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"completion", "bash"}, "__start_ffworker"},
		{[]string{"__complete", "--job-t"}, "--job-timeout\t"},
		{[]string{"__complete", "--log-format", ""}, "json\n"},
	} {
		var stdout, stderr bytes.Buffer
		if code := cli.Run(context.Background(), "ffworker", parse, c.args, &stdout, &stderr, getenv); code != cli.ExitOK ||
			!strings.Contains(stdout.String(), c.want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want %d with %q", c.args, code, stdout.String(), stderr.String(), cli.ExitOK, c.want)
		}
	}
}

// A newcomer's start-up mistakes get messages that name what was given
// (issue 40): a --schema that does not exist is missing under its name (not
// "no schema of the connection's search_path"), a --partitions other than
// the schema's is a partition count mismatch (not "schema not migrated"),
// both exit 3; completion for a shell without a script is a usage error.
func TestStartMistakesNameWhatWasGiven(t *testing.T) {
	t.Parallel()
	clitest.StartMistakes(t, "ffworker", parse)
}
