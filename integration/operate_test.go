package integration

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/ffriver/ffriver/internal/testproc"
)

// TestVersion: every binary prints its version, its Go version and the River
// and River UI versions it was built with, and exits 0 without a database.
func TestVersion(t *testing.T) {
	t.Parallel()
	info, ok := debug.ReadBuildInfo()
	if !ok {
		t.Fatal("no build information in the test binary")
	}
	deps := map[string]string{}
	for _, d := range info.Deps {
		deps[d.Path] = d.Version
	}
	// River UI is a requirement of the binaries' module only: its version
	// is the workspace's, as the go command resolves it for the binaries.
	uiVersion, err := exec.CommandContext(t.Context(), "go", "list", "-m", "-f", "{{.Version}}", "riverqueue.com/riverui").Output()
	if err != nil || len(bytes.TrimSpace(uiVersion)) == 0 {
		t.Fatalf("go list -m riverqueue.com/riverui: %q, %v", uiVersion, err)
	}
	deps["riverqueue.com/riverui"] = string(bytes.TrimSpace(uiVersion))
	bins, err := testproc.Build(t.Context(), t.TempDir(), "ffctl", "ffscheduler", "ffworker")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"ffctl", "ffscheduler", "ffworker"} {
		bin := bins[name]
		args := [][]string{{"--version"}}
		if name == "ffctl" {
			args = append(args, []string{"version"})
		}
		for _, a := range args {
			r := runFFCtl(t, bin, nil, a...)
			if r.code != 0 {
				t.Errorf("%s %s: exit %d", name, a[0], r.code)
			}
			for _, want := range []string{
				name + " ", "module:   github.com/ffriver/ffriver/cmd\n", "ffriver:  (devel)\n", "commit:   ", "go:       " + runtime.Version(),
				"river:    " + deps["github.com/riverqueue/river"],
			} {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("%s %s does not say %q:\n%s", name, a[0], want, r.stdout)
				}
			}
			if name != "ffworker" && !strings.Contains(r.stdout, "river ui: "+deps["riverqueue.com/riverui"]) {
				t.Errorf("%s %s does not name River UI's version:\n%s", name, a[0], r.stdout)
			}
		}
	}
}

// TestQuietByDefault: at the default log level a running worker logs its
// lifecycle, not River's per-queue "Producer job counts" every 5 s; with
// --log-level debug it does. The debug worker starts after the default one,
// so by the time it has logged the line the default one has run longer.
func TestQuietByDefault(t *testing.T) {
	t.Parallel()
	testdb.Reserve(t, testdb.BinariesConns+2) // its binaries and a stream (docs/development.md)
	schedBin, workerBin := buildPipelineBinaries(t)
	db := testdb.New(t, &testdb.Options{Partitions: 16})
	// River logs a producer's counts only while it works jobs: the ticks
	// of this scheduler go to the workers (it works only the apply queue).
	startProc(t, "ffscheduler", schedBin, append(dbArgs(db), "--ui-addr", "off", "--scan-concurrency", "0", "--apply-concurrency", "1")...)
	quiet := startProc(t, "ffworker-default", workerBin, append(dbArgs(db), "--id", "quiet", "--tick-stale-after", "0")...)
	awaitOutput(t, quiet, "ffworker started", 30*time.Second)
	chatty := startProc(t, "ffworker-debug", workerBin, append(dbArgs(db), "--id", "chatty", "--tick-stale-after", "0", "--log-level", "debug")...)
	awaitOutput(t, chatty, "Producer job counts", 60*time.Second)
	if code := quiet.signal(syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Errorf("default worker exit %d", code)
	}
	out := quiet.Output()
	if strings.Contains(out, "Producer job counts") {
		t.Errorf("the default level logs River's producer counts:\n%s", out)
	}
	for _, want := range []string{"ffworker started", "stopped"} {
		if !strings.Contains(out, want) {
			t.Errorf("the default level does not log %q:\n%s", want, out)
		}
	}
}

// TestRefusalJSON: with --log-format json a refusal is one JSON log line,
// and nothing else is printed.
func TestRefusalJSON(t *testing.T) {
	t.Parallel()
	testdb.Reserve(t, 4) // its binaries and streams (docs/development.md)
	_, workerBin := buildPipelineBinaries(t)
	bare := testdb.New(t, &testdb.Options{NoMigrate: true})
	p := startProc(t, "ffworker-json", workerBin, append(dbArgs(bare), "--log-format", "json")...)
	if code := p.wait(20 * time.Second); code != 3 {
		t.Errorf("exit %d, want 3", code)
	}
	out := strings.TrimSpace(p.Output())
	var line map[string]any
	if strings.Count(out, "not migrated") != 1 || strings.Contains(out, "\n") || json.Unmarshal([]byte(out), &line) != nil || line["level"] != "ERROR" {
		t.Errorf("want the refusal as one JSON error line, got:\n%s", out)
	}
}

// awaitOutput waits until p has printed want.
func awaitOutput(t *testing.T, p *proc, want string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !strings.Contains(p.Output(), want) {
		select {
		case <-p.Done():
			t.Fatalf("%s exited (%d) before printing %q:\n%s", p.name, p.Code(), want, p.Output())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not print %q within %s:\n%s", p.name, want, within, p.Output())
		}
	}
}

// TestFFCtlMigrateDryRun: --dry-run and --show-sql say what a migration
// would apply and change nothing in the schema; after the real migration a
// dry run has nothing left to apply.
func TestFFCtlMigrateDryRun(t *testing.T) {
	t.Parallel()
	bin := buildFFCtl(t)
	db := testdb.New(t, &testdb.Options{NoMigrate: true})
	schemaSQL := &fftest.DB{TB: t, Ctx: t.Context(), Pool: db.Pool}
	catalog := func() string {
		return schemaSQL.Strings(`SELECT coalesce(string_agg(c.relname || ':' || c.relkind::text, ',' ORDER BY c.relname), '')
			FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1`, db.Schema)[0]
	}
	before := catalog()
	args := []string{"migrate", "--database-url", testdb.URL(), "--schema", db.Schema}
	dry := runFFCtl(t, bin, nil, append(args, "--dry-run")...)
	if dry.code != 0 {
		t.Fatalf("--dry-run: exit %d", dry.code)
	}
	for _, want := range []string{"nothing was changed", "river migration 001", "ffriver migration 0001_core", "record 256 partitions"} {
		if !strings.Contains(dry.stdout, want) {
			t.Errorf("--dry-run does not say %q:\n%s", want, dry.stdout)
		}
	}
	if strings.Contains(dry.stdout, "CREATE TABLE") {
		t.Errorf("--dry-run printed SQL:\n%s", dry.stdout)
	}
	sql := runFFCtl(t, bin, nil, append(args, "--show-sql", "--partitions", "16")...)
	if sql.code != 0 || !strings.Contains(sql.stdout, "CREATE TABLE") || !strings.Contains(sql.stdout, "-- ffriver migration 0005_scan_cursors") ||
		!strings.Contains(sql.stdout, "record 16 partitions") {
		t.Errorf("--show-sql: exit %d:\n%s", sql.code, sql.stdout)
	}
	if after := catalog(); after != before {
		t.Fatalf("a dry run changed the schema: before %q, after %q", before, after)
	}
	if r := runFFCtl(t, bin, nil, args...); r.code != 0 {
		t.Fatalf("migrate: exit %d", r.code)
	}
	migrated := catalog()
	again := runFFCtl(t, bin, nil, append(args, "--dry-run")...)
	if again.code != 0 || !strings.Contains(again.stdout, "is up to date (256 partitions); nothing would be applied") {
		t.Errorf("dry run after migrating: exit %d:\n%s", again.code, again.stdout)
	}
	if other := runFFCtl(t, bin, nil, append(args, "--dry-run", "--partitions", "64")...); other.code != 3 {
		t.Errorf("dry run with another partition count: exit %d, want 3", other.code)
	}
	if catalog() != migrated {
		t.Error("a dry run changed the migrated schema")
	}
}
