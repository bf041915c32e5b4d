// Package clitest holds the binaries' shared command-line tests: what
// ffscheduler and ffworker must both say about the same mistakes.
package clitest

import (
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/ffriver/ffriver/cmd/internal/cli"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/ffriver/ffriver/internal/testlog"
)

// Parse is a binary's flag parser, as cli.Run takes it.
type Parse func(args []string, stdout io.Writer, getenv func(string) string) (cli.Daemon, error)

// StartMistakes checks that the binary name, run through parse with extra
// flags before its own, names what it was given when it refuses to start:
// a schema that does not exist (and its database), a partition count that
// is not the schema's (and the fix), an unknown completion shell. Each is
// on stderr with its exit code, nothing is on stdout, and no message
// mentions search_path.
func StartMistakes(t *testing.T, name string, parse Parse, extra ...string) {
	t.Helper()
	db := testdb.New(t, &testdb.Options{Partitions: 4})
	var dbName string
	if err := db.Pool.QueryRow(t.Context(), `SELECT current_database()`).Scan(&dbName); err != nil {
		t.Fatal(err)
	}
	noEnv := func(string) string { return "" }
	missing := "nc_missing_" + db.Schema[len(db.Schema)-8:]
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--schema", missing}, cli.ExitNotMigrated, fmt.Sprintf("schema %q does not exist in database %q", missing, dbName)},
		{[]string{"--schema", db.Schema, "--partitions", "16"}, cli.ExitNotMigrated,
			fmt.Sprintf("%s: partition count mismatch: schema %q in database %q was migrated with 4 partitions, "+
				"this process was given 16 (--partitions): the count is fixed at the first migration; drop --partitions or pass 4", name, db.Schema, dbName)},
		{[]string{"completion", "tcsh"}, cli.ExitUsage, `unsupported shell "tcsh": completion scripts exist for bash, zsh, fish and powershell`},
	} {
		args := c.args
		if args[0] != "completion" {
			args = append(append([]string{"--database-url", testdb.URL()}, extra...), args...)
		}
		var stdout, stderr testlog.Buffer
		code := cli.Run(t.Context(), name, parse, args, &stdout, &stderr, noEnv)
		if code != c.code || !strings.Contains(stderr.String(), c.want) || strings.Contains(stderr.String(), "search_path") ||
			stdout.String() != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want %d with %q", c.args, code, stdout.String(), stderr.String(), c.code, c.want)
		}
	}
}
