package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/ffriver/ffriver/cmd/internal/cli"
)

// TestBadFlagValues: ffctl's numeric flags refuse values outside their range
// with a usage error (exit 2) naming the flag, instead of a default.
func TestBadFlagValues(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://u@127.0.0.1:1/db")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"exec", "get", "--events", "0", "{fp:1}:5f0c0e6c-8d5b-4c1e-9a53-3c0e8f7a1b2c"}, "--events 0 is outside the allowed range 1..10000"},
		{[]string{"exec", "get", "--events", "-2", "{fp:1}:5f0c0e6c-8d5b-4c1e-9a53-3c0e8f7a1b2c"}, "--events"},
		{[]string{"exec", "list", "--limit", "0"}, "--limit"},
		{[]string{"tail", "--max-events", "-1"}, "--max-events"},
		{[]string{"tail", "--idle-exit", "-1s"}, "--idle-exit"},
		{[]string{"migrate", "--partitions", "0"}, "partitions"},
		{[]string{"status", "--tick-stale-after", "10ms"}, "--tick-stale-after 10ms is outside the allowed range 1s..24h0m0s"},
	} {
		var stderr bytes.Buffer
		var code int
		switch c.args[0] {
		case "exec":
			code = runExec(context.Background(), c.args[1:], &bytes.Buffer{}, &stderr)
		case "tail":
			code = runTail(context.Background(), c.args[1:], &bytes.Buffer{}, &stderr)
		default:
			code = run(context.Background(), c.args, &bytes.Buffer{}, &stderr)
		}
		if code != cli.ExitUsage || (stderr.Len() > 0 && !strings.Contains(stderr.String(), c.want)) {
			t.Errorf("%q: exit %d, stderr %q; want %d naming %q", c.args, code, stderr.String(), cli.ExitUsage, c.want)
		}
	}
	for _, args := range [][]string{
		{"bench", "--apply-workers", "-1", "outbox"},
		{"bench", "--fetch-cooldown", "-1s", "outbox"},
		{"bench", "--fetch-poll-interval", "-1s", "outbox"},
		{"bench", "--group-size", "-1", "outbox"},
	} {
		if code := run(context.Background(), args, &bytes.Buffer{}, &bytes.Buffer{}); code != cli.ExitUsage {
			t.Errorf("%q: exit %d, want %d", args, code, cli.ExitUsage)
		}
	}
}
