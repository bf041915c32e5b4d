package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/ffriver/ffriver/cmd/internal/cli"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/ffriver/ffriver/internal/testlog"
	"github.com/google/uuid"
)

// A --schema that does not exist is named as missing, with the database
// ffctl looked in, and exits 3 (not migrated) from every command that reads
// the store: it was reported as "the connection's search_path names no
// existing schema; pass a schema", a usage error (exit 2), though a schema
// had been passed (issue 40).
func TestMissingSchemaNamedAsMissing(t *testing.T) {
	t.Parallel()
	testdb.Connect(t, "").Close() // skip (fail with CI=true) without a database
	schema := "ff_missing_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
	var db string
	conn := testdb.Connect(t, "")
	if err := conn.QueryRow(context.Background(), `SELECT current_database()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	common := []string{"--database-url", testdb.URL(), "--schema", schema}
	for name, run := range map[string]func() (int, string){
		"status": func() (int, string) {
			var stderr testlog.Buffer
			return runStatus(context.Background(), common, io.Discard, &stderr), stderr.String()
		},
		"exec list": func() (int, string) {
			var stderr testlog.Buffer
			return runExec(context.Background(), append([]string{"list"}, common...), io.Discard, &stderr), stderr.String()
		},
		"exec get": func() (int, string) {
			var stderr testlog.Buffer
			return runExec(context.Background(), append([]string{"get", "{fp:0}:" + uuid.NewString()}, common...), io.Discard, &stderr), stderr.String()
		},
		"tail": func() (int, string) {
			var stderr testlog.Buffer
			return runTail(context.Background(), append([]string{"--idle-exit", "1m"}, common...), io.Discard, &stderr), stderr.String()
		},
	} {
		code, out := run()
		// The schema was given: the connection's search_path is not
		// what is missing (issue 40, newcomer trial).
		want := fmt.Sprintf("schema %q does not exist in database %q", schema, db)
		if code != cli.ExitNotMigrated || !strings.Contains(out, want) ||
			strings.Contains(out, "pass a schema") || strings.Contains(out, "search_path") {
			t.Errorf("ffctl %s --schema %s: exit %d, %q; want %d, with %q",
				name, schema, code, out, cli.ExitNotMigrated, want)
		}
	}
}
