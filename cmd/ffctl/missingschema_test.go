package main

import (
	"context"
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
	} {
		code, out := run()
		if code != cli.ExitNotMigrated || !strings.Contains(out, schema) || !strings.Contains(out, `"`+db+`"`) ||
			strings.Contains(out, "pass a schema") {
			t.Errorf("ffctl %s --schema %s: exit %d, %q; want %d, naming the schema as missing in database %q",
				name, schema, code, out, cli.ExitNotMigrated, db)
		}
	}
}
