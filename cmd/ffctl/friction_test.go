package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ffriver/ffriver/cmd/internal/cli"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/ffriver/ffriver/internal/testproc"
	"github.com/ffriver/ffriver/subscribe"
)

// ffctlResult is what one run of the built ffctl printed and its exit code.
type ffctlResult struct {
	code           int
	stdout, stderr string
}

// runBuilt runs the ffctl binary bin with args (and the test's
// environment), for at most a minute.
func runBuilt(t *testing.T, bin string, args ...string) ffctlResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = testproc.Env()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := ffctlResult{stdout: stdout.String(), stderr: stderr.String()}
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exitErr) && exitErr.ExitCode() >= 0:
		res.code = exitErr.ExitCode()
	default:
		t.Fatalf("ffctl %q: %v\nstderr:\n%s", args, err, res.stderr)
	}
	return res
}

// TestNewcomerFrictionThroughTheBinary runs the built ffctl through the
// mistakes and habits of a newcomer (issue 40, item 4): flags after a
// positional argument, a misspelt flag or command, a duration without a
// unit, shell completion, and a made-up upstream cursor, which used to be
// accepted (the tail then waited for events it would skip).
func TestNewcomerFrictionThroughTheBinary(t *testing.T) {
	t.Parallel()
	bins, err := testproc.Build(t.Context(), t.TempDir(), "ffctl")
	if err != nil {
		t.Fatal(err)
	}
	bin := bins["ffctl"]
	db := testdb.New(t, nil)
	url := testdb.URL()

	check := func(res ffctlResult, code int, stdoutHas, stderrHas string, args ...string) {
		t.Helper()
		if res.code != code || !strings.Contains(res.stdout, stdoutHas) || !strings.Contains(res.stderr, stderrHas) {
			t.Errorf("ffctl %q: exit %d\nstdout:\n%s\nstderr:\n%s\nwant exit %d, stdout with %q, stderr with %q",
				args, res.code, res.stdout, res.stderr, code, stdoutHas, stderrHas)
		}
	}
	run := func(code int, stdoutHas, stderrHas string, args ...string) ffctlResult {
		t.Helper()
		res := runBuilt(t, bin, args...)
		check(res, code, stdoutHas, stderrHas, args...)
		return res
	}

	// Flags after the positional argument are flags, not arguments.
	run(cli.ExitFailure, "", `no consumer "nobody" of the leases stream`,
		"consumer", "drop", "nobody", "--database-url", url, "--schema", db.Schema, "--stream", "leases")
	run(cli.ExitOK, "", "", "exec", "list", "--database-url", url, "--schema", db.Schema, "--format", "json")

	// A misspelt flag or command names the one meant.
	run(cli.ExitUsage, "", "flag provided but not defined: --shema (did you mean --schema?)",
		"consumer", "drop", "nobody", "--shema", db.Schema)
	run(cli.ExitUsage, "", `unknown command "statsu" (did you mean status?)`, "statsu")
	run(cli.ExitUsage, "", `unknown subcommand "gte" (did you mean get?)`, "exec", "gte")

	// A duration needs a unit, and the message says which.
	run(cli.ExitUsage, "", `invalid value "30" for flag --idle-exit: a duration needs a unit: "30s"`,
		"tail", "--database-url", url, "--schema", db.Schema, "--idle-exit", "30")

	// Help, generated from the flags, whichever way it is asked for.
	for _, args := range [][]string{{"help", "consumer", "drop"}, {"consumer", "drop", "--help"}, {"consumer", "drop", "-h"}} {
		run(cli.ExitOK, "Usage: ffctl consumer drop [flags] NAME", "", args...)
	}
	run(cli.ExitOK, "ffctl completion bash|zsh|fish|powershell", "", "help")

	// Shell completion: the scripts, and the answers they ask ffctl for.
	run(cli.ExitOK, "__start_ffctl", "", "completion", "bash")
	run(cli.ExitOK, "#compdef ffctl", "", "completion", "zsh")
	run(cli.ExitOK, "complete -c ffctl", "", "completion", "fish")
	// A shell without a script is a usage error naming those with one; it
	// printed the command's help and exited 0 (issue 40).
	run(cli.ExitUsage, "", `unsupported shell "tcsh": completion scripts exist for bash, zsh, fish and powershell`,
		"completion", "tcsh")

	// A --schema that does not exist is said to be missing under its name,
	// from every command that reads the store, tail included (issue 40).
	missing := "nc_missing_" + db.Schema[len(db.Schema)-8:]
	var dbName string
	if err := db.Pool.QueryRow(t.Context(), `SELECT current_database()`).Scan(&dbName); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"status"}, {"exec", "list"}, {"tail", "--idle-exit", "1m"}} {
		res := run(cli.ExitNotMigrated, "", fmt.Sprintf("schema %q does not exist in database %q", missing, dbName),
			append(args, "--database-url", url, "--schema", missing)...)
		if strings.Contains(res.stderr, "search_path") {
			t.Errorf("ffctl %q --schema %s speaks of the search_path:\n%s", args, missing, res.stderr)
		}
	}
	if res := run(cli.ExitOK, "status\t", "", "__complete", "st"); strings.Contains(res.stdout, "tail") {
		t.Errorf("completions of st list tail:\n%s", res.stdout)
	}
	run(cli.ExitOK, "revoke\t", "", "__complete", "exec", "re")
	res := run(cli.ExitOK, "--cursor-file\t", "", "__complete", "tail", "--schema", "x", "--cur")
	if !strings.Contains(res.stdout, "--cursor\t") {
		t.Errorf("completions of tail --cur lack --cursor:\n%s", res.stdout)
	}
	run(cli.ExitOK, "--stream\t", "", "__complete", "consumer", "drop", "NAME", "--str")

	// A made-up upstream cursor (an event id the outbox never handed out)
	// is refused at once, on the command line and in a cursor file.
	made := subscribe.Cursor{EventID: 1_000_000, Legacy: true}.String()
	const refused = "no stream of this server can have produced it"
	run(cli.ExitFailure, "", refused, "tail", "--database-url", url, "--schema", db.Schema, "--cursor", made, "--idle-exit", "1m")
	file := filepath.Join(t.TempDir(), "cursor")
	if err := os.WriteFile(file, []byte(made+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run(cli.ExitFailure, "", refused, "tail", "--database-url", url, "--schema", db.Schema, "--cursor-file", file, "--idle-exit", "1m")
}
