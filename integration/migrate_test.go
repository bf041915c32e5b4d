// Package integration holds black-box tests: they build ffriver's binaries
// and drive them against a real Postgres (internal/testdb finds it; with
// CI=true a missing database fails the run instead of skipping).
package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/ffriver/ffriver/internal/testproc"
	"github.com/ffriver/ffriver/migrations"
)

// buildFFCtl builds cmd/ffctl into a temporary folder and returns its path.
func buildFFCtl(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	bins, err := testproc.Build(ctx, t.TempDir(), "ffctl")
	if err != nil {
		t.Fatal(err)
	}
	return bins["ffctl"]
}

// ffctlResult is what one run of the binary did.
type ffctlResult struct {
	code           int
	stdout, stderr string
}

// runFFCtl runs bin with args and env added to a copy of this process's
// environment from which every database setting was removed, so only what
// the test passes reaches the binary.
func runFFCtl(t *testing.T, bin string, env []string, args ...string) ffctlResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(testproc.Env(), env...)
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
		t.Fatalf("ffctl %s: %v\nstderr:\n%s", strings.Join(args, " "), err, res.stderr)
	}
	t.Logf("ffctl %s → exit %d\nstdout:\n%sstderr:\n%s", strings.Join(args, " "), res.code, res.stdout, res.stderr)
	return res
}

func (r ffctlResult) want(t *testing.T, code int, stdoutHas, stderrHas string) {
	t.Helper()
	if r.code != code {
		t.Errorf("exit code %d, want %d\nstdout:\n%sstderr:\n%s", r.code, code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, stdoutHas) {
		t.Errorf("stdout lacks %q:\n%s", stdoutHas, r.stdout)
	}
	if !strings.Contains(r.stderr, stderrHas) {
		t.Errorf("stderr lacks %q:\n%s", stderrHas, r.stderr)
	}
}

func TestFFCtlMigrate(t *testing.T) {
	t.Parallel()
	bin := buildFFCtl(t)
	ctx := t.Context()
	url := testdb.URL()
	def := fmt.Sprintf("(%d partitions)", ff.DefaultPartitions)

	t.Run("twice", func(t *testing.T) {
		db := testdb.New(t, &testdb.Options{NoMigrate: true})
		// ffctl creates a missing schema; testdb's cleanup drops it if exists.
		if _, err := db.Pool.Exec(ctx, `DROP SCHEMA "`+db.Schema+`"`); err != nil {
			t.Fatal(err)
		}
		first := runFFCtl(t, bin, nil, "migrate", "--database-url", url, "--schema", db.Schema)
		first.want(t, 0, "migrated schema "+db.Schema+" "+def, "")
		all, err := migrations.All()
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range all {
			if name := m.Name; !strings.Contains(first.stdout, name) {
				t.Errorf("first run does not report migration %04d_%s:\n%s", m.Version, name, first.stdout)
			}
		}
		if !strings.Contains(first.stdout, "river migrations applied:") {
			t.Errorf("first run does not report River's migrations:\n%s", first.stdout)
		}

		second := runFFCtl(t, bin, nil, "migrate", "--database-url", url, "--schema", db.Schema)
		second.want(t, 0, "schema "+db.Schema+" is up to date "+def+"; nothing to apply", "")

		if n, err := migrations.Verify(ctx, db.Pool, db.Schema, ff.DefaultPartitions); err != nil {
			t.Fatalf("Verify after ffctl migrate = %d, %v; want %s", n, err, def)
		}

		// The partition count is fixed at first migration: asking for
		// another is a mismatch (exit 3) that says what to pass, and
		// changes nothing.
		other := runFFCtl(t, bin, nil, "migrate", "--database-url", url, "--schema", db.Schema, "--partitions", "64")
		other.want(t, 3, "", "partition count mismatch: schema \""+db.Schema+"\" in database \"")
		other.want(t, 3, "", "was migrated with 256 partitions, this process was given 64 (--partitions): "+
			"the count is fixed at the first migration; drop --partitions or pass 256")
		if n, err := migrations.Verify(ctx, db.Pool, db.Schema, ff.DefaultPartitions); err != nil {
			t.Fatalf("Verify after the refused run = %d, %v; want %s", n, err, def)
		}
	})

	t.Run("partitions of a new schema, concurrently", func(t *testing.T) {
		db := testdb.New(t, &testdb.Options{NoMigrate: true})
		var wg sync.WaitGroup
		results := make([]ffctlResult, 3)
		for i := range results {
			wg.Go(func() {
				results[i] = runFFCtl(t, bin, nil, "migrate", "--database-url", url, "--schema", db.Schema, "--partitions", "64", "--log-format", "json")
			})
		}
		wg.Wait()
		migrated := 0
		for _, r := range results {
			r.want(t, 0, "(64 partitions)", "")
			if strings.Contains(r.stdout, "migrated schema") {
				migrated++
			}
			for _, line := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
				if line != "" && !strings.HasPrefix(line, "{") {
					t.Errorf("--log-format json wrote a non-JSON line: %q", line)
				}
			}
		}
		if migrated != 1 {
			t.Errorf("%d of 3 concurrent runs applied migrations, want exactly 1", migrated)
		}
		if n, err := migrations.Verify(ctx, db.Pool, db.Schema, 64); err != nil || n != 64 {
			t.Fatalf("Verify = %d, %v; want 64 partitions", n, err)
		}
	})

	t.Run("schema from FF_SCHEMA and from the search_path", func(t *testing.T) {
		fromEnv := testdb.New(t, &testdb.Options{NoMigrate: true})
		runFFCtl(t, bin, []string{"DATABASE_URL=" + url, "FF_SCHEMA=" + fromEnv.Schema}, "migrate").
			want(t, 0, "migrated schema "+fromEnv.Schema, "")
		if _, err := migrations.Verify(ctx, fromEnv.Pool, fromEnv.Schema, 0); err != nil {
			t.Errorf("FF_SCHEMA: %v", err)
		}

		fromPath := testdb.New(t, &testdb.Options{NoMigrate: true})
		sep := "?"
		if strings.Contains(url, "?") {
			sep = "&"
		}
		runFFCtl(t, bin, nil, "migrate", "--database-url", url+sep+"search_path="+fromPath.Schema).
			want(t, 0, "migrated schema "+fromPath.Schema, "")
		if _, err := migrations.Verify(ctx, fromPath.Pool, fromPath.Schema, 0); err != nil {
			t.Errorf("search_path: %v", err)
		}
	})

	t.Run("usage errors exit 2 and touch nothing", func(t *testing.T) {
		admin := testdb.Connect(t, "")
		defer admin.Close()
		adminSQL := &fftest.DB{TB: t, Ctx: ctx, Pool: admin}
		countLike := func() int { return adminSQL.Count(`SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'x"%'`) }
		before := countLike()
		r := runFFCtl(t, bin, nil, "migrate", "--database-url", url, "--schema", `x"; drop`)
		r.want(t, 2, "", `ffctl migrate: invalid schema: "x\"; drop": only letters, digits and underscores`)
		if !strings.Contains(r.stderr, "--help") {
			t.Errorf("usage error does not point at --help:\n%s", r.stderr)
		}
		if after := countLike(); after != before {
			t.Errorf("a schema was created for a rejected name (%d → %d)", before, after)
		}

		runFFCtl(t, bin, nil, "migrate").want(t, 2, "", "no database given")
		runFFCtl(t, bin, nil, "migrate", "--database-url", url, "--partitions", "0").want(t, 2, "", "invalid partitions")
		runFFCtl(t, bin, nil, "migrate", "--database-url", url, "--no-such-flag").want(t, 2, "", "not defined: --no-such-flag")
		runFFCtl(t, bin, nil, "migrate", "--database-url", url, "stray").want(t, 2, "", `unexpected argument "stray"`)
		runFFCtl(t, bin, nil, "no-such-command").want(t, 2, "", `unknown command "no-such-command"`)
		runFFCtl(t, bin, nil).want(t, 2, "", "migrate")
	})

	t.Run("unreachable database exits 1", func(t *testing.T) {
		// Port 1 on loopback: refused at once, nothing listens there.
		r := runFFCtl(t, bin, nil, "migrate", "--database-url", "postgres://ffriver:hunter2@127.0.0.1:1/none?connect_timeout=5", "--schema", "s")
		r.want(t, 1, "", "ffctl migrate: connecting to postgres://ffriver:xxxxx@127.0.0.1:1/none")
		if strings.Contains(r.stderr, "hunter2") {
			t.Errorf("the password leaked into the message:\n%s", r.stderr)
		}
		// Every form libpq accepts, malformed or failing (issue 11): the
		// binary fails and prints no password.
		for _, conn := range []string{
			"postgres://ffriver:hunter2@[::1:5432/none",
			"postgres://ffriver:hunter2%zz@127.0.0.1:1/none",
			"postgres://ffriver:hunter2 x@127.0.0.1:1/none",
			"postgres://ffriver@127.0.0.1:1/none?password=hunter2&connect_timeout=5",
			"host=127.0.0.1 port=1 user=ffriver password = hunter2 connect_timeout=5",
			"host=127.0.0.1 port=1 user=ffriver password='hunter2 x' connect_timeout=5",
		} {
			r := runFFCtl(t, bin, nil, "migrate", "--database-url", conn, "--schema", "s")
			if r.code == 0 || strings.Contains(r.stderr+r.stdout, "hunter2") || strings.Contains(r.stderr+r.stdout, "hunt") {
				t.Errorf("%q: exit %d, the password leaked or it succeeded:\n%s", conn, r.code, r.stderr)
			}
		}
	})

	t.Run("help", func(t *testing.T) {
		list := runFFCtl(t, bin, nil, "help")
		list.want(t, 0, "Commands:", "")
		// Every listed command explains itself and every flag, and exits 0.
		var names []string
		inList := false
		for _, line := range strings.Split(list.stdout, "\n") {
			switch {
			case line == "Commands:":
				inList = true
			case inList && strings.HasPrefix(line, "  "):
				if name := strings.Fields(line)[0]; name != "help" {
					names = append(names, name)
				}
			case inList:
				inList = false
			}
		}
		if len(names) == 0 || names[0] != "migrate" {
			t.Fatalf("help lists %q; want migrate first", names)
		}
		// A command with subcommands (ffctl exec) lists them; each of its
		// subcommands is held to what a command is.
		var commands []string
		for _, name := range names {
			h := runFFCtl(t, bin, nil, name, "--help")
			if !strings.Contains(h.stdout, "Usage: ffctl "+name+" <subcommand>") {
				commands = append(commands, name)
				continue
			}
			h.want(t, 0, "Subcommands:", "")
			inSubs := false
			for _, line := range strings.Split(h.stdout, "\n") {
				switch {
				case strings.HasPrefix(line, "Subcommands:"):
					inSubs = true
				case inSubs && strings.HasPrefix(line, "  "):
					commands = append(commands, name+" "+strings.Fields(line)[0])
				case inSubs:
					inSubs = false
				}
			}
		}
		for _, name := range commands {
			for _, args := range [][]string{append(strings.Fields(name), "--help"), append([]string{"help"}, strings.Fields(name)...)} {
				if strings.Contains(name, " ") && args[0] == "help" {
					continue // "ffctl help exec get" is not a form ffctl documents
				}
				h := runFFCtl(t, bin, nil, args...)
				h.want(t, 0, "Usage: ffctl "+name+" [flags]", "")
				lines := strings.Split(h.stdout, "\n")
				for i, line := range lines {
					if strings.HasPrefix(line, "  --") && (i+1 >= len(lines) || strings.TrimSpace(lines[i+1]) == "" || strings.HasPrefix(lines[i+1], "  --")) {
						t.Errorf("ffctl %s --help: flag %q has no help text", name, strings.TrimSpace(line))
					}
				}
				for _, flag := range []string{"--database-url", "--schema", "--log-format", "--log-level"} {
					if name == "version" {
						break // needs no database
					}
					if !strings.Contains(h.stdout, "  "+flag+" ") {
						t.Errorf("ffctl %s --help does not explain %s", name, flag)
					}
				}
			}
		}
		if !strings.Contains(runFFCtl(t, bin, nil, "migrate", "--help").stdout, "--partitions count") {
			t.Error("ffctl migrate --help does not explain --partitions")
		}
	})
}
