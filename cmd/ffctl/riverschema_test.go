package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/ffriver/ffriver/cmd/ffctl/internal/status"
	"github.com/ffriver/ffriver/cmd/internal/cli"
	"github.com/ffriver/ffriver/internal/testdb"
)

// The split layout on the command line (issue 24, item 4): River's tables
// in one schema, ffriver's in another. ffctl migrate puts each where
// --schema and --river-schema say; status and exec list refused the layout
// (exit 3, with a hint that made a second River) and now read River's
// tables in --river-schema, and without it say to pass it.
func TestCommandsTakeRiverSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	riv := testdb.New(t, &testdb.Options{NoMigrate: true})
	ffdb := testdb.New(t, &testdb.Options{NoMigrate: true})
	conn := []string{"--database-url", testdb.URL(), "--schema", ffdb.Schema}
	split := append(conn, "--river-schema", riv.Schema)

	if code := run(ctx, append([]string{"migrate"}, split...), &bytes.Buffer{}, &bytes.Buffer{}); code != cli.ExitOK {
		t.Fatalf("ffctl migrate %v: exit %d", split, code)
	}
	var inFF, inRiver int
	if err := ffdb.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE schemaname = $1), count(*) FILTER (WHERE schemaname = $2)
		FROM pg_tables WHERE tablename = 'river_job'`, ffdb.Schema, riv.Schema).Scan(&inFF, &inRiver); err != nil {
		t.Fatal(err)
	}
	if inFF != 0 || inRiver != 1 {
		t.Fatalf("river_job in ffriver's schema: %d, in --river-schema: %d; want 0 and 1", inFF, inRiver)
	}

	for _, c := range []struct {
		name string
		run  func(args []string, stdout, stderr *bytes.Buffer) int
	}{
		{"status", func(args []string, stdout, stderr *bytes.Buffer) int {
			return runStatus(ctx, append(args, "--format", "json"), stdout, stderr)
		}},
		{"exec list", func(args []string, stdout, stderr *bytes.Buffer) int {
			return runExec(ctx, append([]string{"list"}, args...), stdout, stderr)
		}},
	} {
		var stdout, stderr bytes.Buffer
		if code := c.run(conn, &stdout, &stderr); code != cli.ExitNotMigrated || !strings.Contains(stderr.String(), "--river-schema") ||
			strings.Count(strings.TrimSpace(stderr.String()), "\n") != 0 {
			t.Errorf("ffctl %s without --river-schema: exit %d, stderr %q; want %d and one line naming --river-schema",
				c.name, code, stderr.String(), cli.ExitNotMigrated)
		}
		stdout.Reset()
		stderr.Reset()
		if code := c.run(split, &stdout, &stderr); code != cli.ExitOK {
			t.Errorf("ffctl %s --river-schema %s: exit %d, stderr %s", c.name, riv.Schema, code, stderr.String())
		}
		if c.name == "status" {
			var r status.Report
			if err := json.Unmarshal(stdout.Bytes(), &r); err != nil || r.RiverSchema != riv.Schema {
				t.Errorf("status report's river_schema = %q (%v), want %s", r.RiverSchema, err, riv.Schema)
			}
		}
	}
}
