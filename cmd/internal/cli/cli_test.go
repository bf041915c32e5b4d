package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/jackc/pgx/v5"
	"github.com/spf13/pflag"
)

// newTestFlagSet returns a flag set with the common flags, reading the
// environment from env and writing --help into the returned buffer.
func newTestFlagSet(env map[string]string) (*FlagSet, *Common, *bytes.Buffer) {
	fs := NewFlagSet("ffctl test", "", "A command for tests.")
	var out bytes.Buffer
	fs.Stdout = &out
	fs.Getenv = func(k string) string { return env[k] }
	return fs, AddCommon(fs), &out
}

func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{nil, ExitOK},
		{flag.ErrHelp, ExitOK},
		{errors.New("boom"), ExitFailure},
		{fmt.Errorf("connecting: %w", ff.ErrUnavailable), ExitFailure},
		{context.Canceled, ExitFailure},
		{Usagef("bad %s", "flag"), ExitUsage},
		{fmt.Errorf("wrapped: %w", Usagef("bad")), ExitUsage},
		{ff.Validationf("cursor", "malformed"), ExitUsage},
		{fmt.Errorf("verify: %w: run ffctl migrate", ff.ErrNotMigrated), ExitNotMigrated},
		// Not migrated wins over a usage error wrapped alongside it.
		{errors.Join(Usagef("x"), ff.ErrNotMigrated), ExitNotMigrated},
	} {
		if got := ExitCode(tc.err); got != tc.want {
			t.Errorf("ExitCode(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

func TestReport(t *testing.T) {
	var b bytes.Buffer
	if code := Report(&b, "ffctl x", nil); code != 0 || b.Len() != 0 {
		t.Errorf("Report(nil) = %d, wrote %q", code, b.String())
	}
	if code := Report(&b, "ffctl x", flag.ErrHelp); code != 0 || b.Len() != 0 {
		t.Errorf("Report(ErrHelp) = %d, wrote %q", code, b.String())
	}
	code := Report(&b, "ffctl x", Usagef("unexpected argument %q", "y"))
	if code != ExitUsage || b.String() != "ffctl x: unexpected argument \"y\"\nRun 'ffctl x --help' for usage.\n" {
		t.Errorf("Report(usage) = %d, wrote %q", code, b.String())
	}
	b.Reset()
	code = Report(&b, "ffctl x", fmt.Errorf("%w: run migrate", ff.ErrNotMigrated))
	if code != ExitNotMigrated || b.String() != "ffctl x: schema not migrated: run migrate\n" {
		t.Errorf("Report(not migrated) = %d, wrote %q", code, b.String())
	}
}

func TestParseDefaultsFromEnvironment(t *testing.T) {
	fs, c, _ := newTestFlagSet(map[string]string{
		"DATABASE_URL": "postgres://u@h:5432/db",
		"FF_SCHEMA":    "from_env",
	})
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if c.DatabaseURL != "postgres://u@h:5432/db" || c.Schema != "from_env" {
		t.Errorf("defaults = %q, %q; want the environment's", c.DatabaseURL, c.Schema)
	}
	if c.LogFormat != LogText || c.LogLevel != slog.LevelInfo {
		t.Errorf("log defaults = %q, %v; want text, INFO", c.LogFormat, c.LogLevel)
	}

	fs, c, _ = newTestFlagSet(map[string]string{"DATABASE_URL": "postgres://u@h/env", "FF_SCHEMA": "env"})
	err := fs.Parse([]string{"--database-url", "postgres://u@h/flag", "-schema=Flag_1", "--log-format=json", "--log-level", "debug"})
	if err != nil {
		t.Fatal(err)
	}
	if c.DatabaseURL != "postgres://u@h/flag" || c.Schema != "Flag_1" || c.LogFormat != LogJSON || c.LogLevel != slog.LevelDebug {
		t.Errorf("flags lost to the environment: %+v", c)
	}
}

func TestParseUsageErrors(t *testing.T) {
	env := map[string]string{"DATABASE_URL": "postgres://u@h/db"}
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string // in the message
	}{
		{[]string{"--schema", `x"; drop`}, env, "invalid schema"},
		{[]string{"--schema", "1abc"}, env, "invalid schema"},
		{[]string{"--schema", strings.Repeat("s", 47)}, env, "longer than"},
		{[]string{"--log-format", "xml"}, env, `"xml" is not a log format`},
		{[]string{"--log-level", "loud"}, env, "--log-level"},
		{[]string{"--nope"}, env, "not defined: --nope"},
		{[]string{"--schema"}, env, "needs an argument: --schema"},
		{[]string{"stray"}, env, `unexpected argument "stray"`},
		{nil, map[string]string{}, "no database given"},
		{[]string{"--database-url", "postgres://u@h:notaport/db"}, env, "--database-url"},
		{nil, map[string]string{"DATABASE_URL": "postgres://u@h/db", ClockOffsetEnv: "2"}, "$FF_CLOCK_OFFSET=\"2\": not a duration with a unit"},
	} {
		fs, _, _ := newTestFlagSet(tc.env)
		err := fs.Parse(tc.args)
		var ue *UsageError
		if !errors.As(err, &ue) || ExitCode(err) != ExitUsage {
			t.Errorf("Parse(%q) = %v, want a usage error", tc.args, err)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %q, want it to mention %q", tc.args, err, tc.want)
		}
	}
}

func TestParsePGEnvironmentIsADatabase(t *testing.T) {
	fs, c, _ := newTestFlagSet(map[string]string{"PGHOST": "/var/run/postgresql"})
	if err := fs.Parse(nil); err != nil || c.DatabaseURL != "" {
		t.Fatalf("Parse with only PGHOST = %v (url %q); want nil and an empty URL", err, c.DatabaseURL)
	}
}

func TestArgsAndAfterParse(t *testing.T) {
	fs := NewFlagSet("ffctl tail", "leases|completions", "Stream the outbox.")
	fs.Getenv = func(string) string { return "" }
	maxEvents := fs.Int("max-events", 0, "stop after `n` events")
	fs.AfterParse(func() error {
		if *maxEvents < 0 {
			return errors.New("--max-events must not be negative")
		}
		return nil
	})
	if err := fs.Parse([]string{"--max-events", "3", "leases"}); err != nil {
		t.Fatal(err)
	}
	if fs.NArg() != 1 || fs.Arg(0) != "leases" || *maxEvents != 3 || !fs.Explicit("max-events") || fs.Explicit("help") {
		t.Errorf("args %q, max %d, explicit %v", fs.Args(), *maxEvents, fs.Explicit("max-events"))
	}
	fs2 := NewFlagSet("ffctl tail", "leases|completions", "")
	max2 := fs2.Int("max-events", 0, "stop after `n` events")
	fs2.AfterParse(func() error {
		if *max2 < 0 {
			return errors.New("--max-events must not be negative")
		}
		return nil
	})
	if err := fs2.Parse([]string{"--max-events=-1"}); ExitCode(err) != ExitUsage {
		t.Errorf("AfterParse error = %v, want a usage error", err)
	}
	if fs2.Explicit("nope") {
		t.Error("Explicit of an unknown flag")
	}
}

func TestHelpExplainsEveryFlag(t *testing.T) {
	fs, _, out := newTestFlagSet(nil)
	fs.Duration("wait", 5*time.Second, "how long to `wait`")
	fs.Bool("dry-run", false, "print what would be done")
	for _, args := range [][]string{{"--help"}, {"-h"}, {"--schema", "ok", "--help"}} {
		out.Reset()
		err := fs.Parse(args)
		if !errors.Is(err, flag.ErrHelp) || ExitCode(err) != ExitOK {
			t.Fatalf("Parse(%q) = %v, want flag.ErrHelp (exit 0)", args, err)
		}
		help := out.String()
		if !strings.HasPrefix(help, "Usage: ffctl test [flags]\n\nA command for tests.\n") {
			t.Errorf("help starts %q", help)
		}
		fs.VisitAll(func(f *pflag.Flag) {
			if strings.TrimSpace(f.Usage) == "" {
				t.Errorf("flag --%s has no help text", f.Name)
			}
			if !strings.Contains(help, "  --"+f.Name) {
				t.Errorf("help does not list --%s:\n%s", f.Name, help)
			}
		})
		for _, want := range []string{"(default $DATABASE_URL)", "$FF_SCHEMA", "(default 5s)", "--wait wait", "text or json", "(default INFO)", "--help"} {
			if !strings.Contains(help, want) {
				t.Errorf("help lacks %q:\n%s", want, help)
			}
		}
		if strings.Contains(help, "--dry-run (default") {
			t.Errorf("help shows a zero default:\n%s", help)
		}
	}
}

func TestHelpNeverPrintsTheDatabasePassword(t *testing.T) {
	fs, _, out := newTestFlagSet(map[string]string{"DATABASE_URL": "postgres://u:hunter2@h/db"})
	_ = fs.Parse([]string{"--help"})
	if strings.Contains(out.String(), "hunter2") {
		t.Errorf("help shows the password:\n%s", out)
	}
}

func TestPoolConfig(t *testing.T) {
	c := &Common{DatabaseURL: "postgres://u@h:5432/db", Schema: "MySchema"}
	cfg, err := c.PoolConfig(PoolOptions{AppName: "fftest", MaxConns: 7, MinConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	rp := cfg.ConnConfig.RuntimeParams
	if rp["search_path"] != `"MySchema"` {
		t.Errorf("search_path = %q, want the quoted schema", rp["search_path"])
	}
	if rp["application_name"] != "fftest" {
		t.Errorf("application_name = %q", rp["application_name"])
	}
	if cfg.MaxConns != 7 || cfg.MinConns != 2 || cfg.ConnConfig.ConnectTimeout != 10*time.Second {
		t.Errorf("MaxConns %d MinConns %d ConnectTimeout %v", cfg.MaxConns, cfg.MinConns, cfg.ConnConfig.ConnectTimeout)
	}
	if m := cfg.ConnConfig.DefaultQueryExecMode; m != pgx.QueryExecModeCacheStatement {
		t.Errorf("query mode %s, want pgx's default (prepared statements) unless OneShot", m)
	}
	// A command that runs each statement once sends them unprepared.
	if cfg, err = c.PoolConfig(PoolOptions{OneShot: true}); err != nil {
		t.Fatal(err)
	}
	if m := cfg.ConnConfig.DefaultQueryExecMode; m != pgx.QueryExecModeExec {
		t.Errorf("OneShot: query mode %s, want exec", m)
	}

	// The URL's own settings win; no schema leaves search_path alone.
	c = &Common{DatabaseURL: "postgres://u@h/db?pool_max_conns=3&application_name=mine&connect_timeout=2&default_query_exec_mode=simple_protocol"}
	cfg, err = c.PoolConfig(PoolOptions{AppName: "fftest", MaxConns: 7, OneShot: true})
	if err != nil {
		t.Fatal(err)
	}
	rp = cfg.ConnConfig.RuntimeParams
	if _, ok := rp["search_path"]; ok {
		t.Errorf("search_path set without a schema: %q", rp["search_path"])
	}
	if rp["application_name"] != "mine" || cfg.MaxConns != 3 || cfg.ConnConfig.ConnectTimeout != 2*time.Second ||
		cfg.ConnConfig.DefaultQueryExecMode != pgx.QueryExecModeSimpleProtocol {
		t.Errorf("URL settings overridden: app %q MaxConns %d timeout %v query mode %s", rp["application_name"], cfg.MaxConns,
			cfg.ConnConfig.ConnectTimeout, cfg.ConnConfig.DefaultQueryExecMode)
	}

	c = &Common{DatabaseURL: "postgres://u@h/db", Schema: `x"; drop`}
	if _, err := c.PoolConfig(PoolOptions{}); ExitCode(err) != ExitUsage {
		t.Errorf("PoolConfig with a bad schema = %v, want a usage error", err)
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u:secret@h:5432/db?sslmode=disable": "postgres://u:xxxxx@h:5432/db?sslmode=disable",
		"postgres://u@h/db":                             "postgres://u@h/db",
		"host=h user=u password=secret dbname=db":       "host=h user=u password=xxxxx dbname=db",
		"": "(default connection from PG* variables)",
	} {
		if got := RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
	err := redactErr(errors.New("cannot parse postgres://u:secret@h: bad"), "postgres://u:secret@h")
	if strings.Contains(err.Error(), "secret") {
		t.Errorf("redactErr kept the password: %v", err)
	}
}

func TestLogger(t *testing.T) {
	var b bytes.Buffer
	NewLogger(&b, LogJSON, slog.LevelWarn).Info("hidden")
	NewLogger(&b, LogJSON, slog.LevelWarn).Warn("shown", "k", 1)
	var rec map[string]any
	if err := json.Unmarshal(b.Bytes(), &rec); err != nil {
		t.Fatalf("json log line %q: %v", b.String(), err)
	}
	if rec["msg"] != "shown" || rec["level"] != "WARN" || rec["k"] != float64(1) {
		t.Errorf("json record = %v", rec)
	}
	b.Reset()
	(&Common{LogFormat: LogText, LogLevel: slog.LevelDebug}).Logger(&b).Debug("hello", "k", "v")
	if !strings.Contains(b.String(), "level=DEBUG msg=hello k=v") {
		t.Errorf("text log line = %q", b.String())
	}
}

func TestSignalContext(t *testing.T) {
	ctx, stop := SignalContext(context.Background())
	defer stop()
	if _, ok := Interrupted(ctx); ok {
		t.Fatal("Interrupted before any signal")
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("SIGTERM did not cancel the context")
	}
	sig, ok := Interrupted(ctx)
	if !ok || sig != syscall.SIGTERM {
		t.Errorf("Interrupted = %v, %v; want SIGTERM", sig, ok)
	}
	if !errors.Is(context.Cause(ctx), context.Canceled) {
		t.Errorf("cause %v does not match context.Canceled", context.Cause(ctx))
	}
	child, cancel := context.WithCancel(ctx)
	defer cancel()
	if _, ok := Interrupted(child); !ok {
		t.Error("a child of an interrupted context is not Interrupted")
	}

	ctx2, stop2 := SignalContext(context.Background())
	stop2()
	if _, ok := Interrupted(ctx2); ok || ctx2.Err() == nil {
		t.Errorf("after stop: Interrupted = %v, err = %v; want false, cancelled", ok, ctx2.Err())
	}
}

func TestVersionOfBuildInfo(t *testing.T) {
	got := FormatVersion("ffworker", &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/ffriver/ffriver", Version: "v0.3.0"},
		Deps:      []*debug.Module{{Path: "github.com/riverqueue/river", Version: "v0.51.1"}},
		Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.time", Value: "2026-11-23T09:00:00Z"},
			{Key: "vcs.modified", Value: "true"}},
	})
	want := "ffworker v0.3.0\n  module:   github.com/ffriver/ffriver\n  commit:   abc123 (2026-11-23T09:00:00Z, modified)\n" +
		"  go:       go1.26.8\n  river:    v0.51.1\n"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	// The binaries' own module, built with the library beside it.
	got = FormatVersion("ffctl", &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/ffriver/ffriver/cmd", Version: "(devel)"},
		Deps: []*debug.Module{{Path: "github.com/ffriver/ffriver", Version: "v0.0.0-00010101000000-000000000000",
			Replace: &debug.Module{Path: "../"}}, {Path: "github.com/riverqueue/river", Version: "v0.51.2"},
			{Path: "riverqueue.com/riverui", Version: "v0.22.0"}},
	})
	want = "ffctl (devel)\n  module:   github.com/ffriver/ffriver/cmd\n  ffriver:  (devel)\n  commit:   unknown\n" +
		"  go:       go1.26.8\n  river:    v0.51.2\n  river ui: v0.22.0\n"
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if got := FormatVersion("ffctl", &debug.BuildInfo{}); !strings.Contains(got, "commit:   unknown") {
		t.Errorf("no VCS information:\n%s", got)
	}
}

func TestVersionFlag(t *testing.T) {
	fs := NewFlagSet("ffworker", "", "")
	var out strings.Builder
	fs.Stdout = &out
	fs.AddVersion()
	AddCommon(fs) // would refuse: no database given
	fs.Getenv = func(string) string { return "" }
	err := fs.Parse([]string{"--version"})
	if !errors.Is(err, ErrVersion) || ExitCode(err) != ExitOK {
		t.Fatalf("Parse(--version) = %v", err)
	}
	if !strings.HasPrefix(out.String(), "ffworker ") || !strings.Contains(out.String(), "go:       ") {
		t.Errorf("version output:\n%s", out.String())
	}
}

// --river-schema: the flag, else $FF_RIVER_SCHEMA, else --schema; a bad
// name is a usage error naming the flag.
func TestRiverSchemaFlag(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{map[string]string{"DATABASE_URL": "postgres://h/db"}, []string{"--schema", "ff"}, "ff"},
		{map[string]string{"DATABASE_URL": "postgres://h/db", "FF_SCHEMA": "ff"}, nil, "ff"},
		{map[string]string{"DATABASE_URL": "postgres://h/db", "FF_RIVER_SCHEMA": "app"}, []string{"--schema", "ff"}, "app"},
		{map[string]string{"DATABASE_URL": "postgres://h/db", "FF_RIVER_SCHEMA": "app"}, []string{"--river-schema", "riv"}, "riv"},
		{map[string]string{"DATABASE_URL": "postgres://h/db"}, nil, ""},
	} {
		fs, common, _ := newTestFlagSet(c.env)
		common.AddRiverSchema(fs)
		if err := fs.Parse(c.args); err != nil || common.RiverSchema != c.want {
			t.Errorf("%v with %v: RiverSchema = %q, %v; want %q", c.args, c.env, common.RiverSchema, err, c.want)
		}
	}
	fs, common, _ := newTestFlagSet(map[string]string{"DATABASE_URL": "postgres://h/db"})
	common.AddRiverSchema(fs)
	var ue *UsageError
	if err := fs.Parse([]string{"--river-schema", "a b"}); !errors.As(err, &ue) || !strings.Contains(err.Error(), "--river-schema") {
		t.Errorf("a bad --river-schema: %v, want a usage error naming the flag", err)
	}
}

// $FF_CLOCK_OFFSET shifts the clock a binary passes to ffriver, and its
// "started" line says so; without it the binary keeps the system clock.
func TestClockOffset(t *testing.T) {
	fs, c, _ := newTestFlagSet(map[string]string{"DATABASE_URL": "postgres://u@h/db", ClockOffsetEnv: "-2s"})
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if got := c.Clock().NowMs() - time.Now().UnixMilli(); got > -1900 || got < -2100 {
		t.Errorf("clock offset %d ms, want about -2000", got)
	}
	if got := fmt.Sprint(c.ClockAttrs()); !strings.Contains(got, "clock_offset -2s") {
		t.Errorf("ClockAttrs() = %s, want the offset named", got)
	}
	fs, c, _ = newTestFlagSet(map[string]string{"DATABASE_URL": "postgres://u@h/db"})
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if c.Clock() != nil || c.ClockAttrs() != nil {
		t.Errorf("without $%s: Clock() = %v, ClockAttrs() = %v, want nil (the system clock)", ClockOffsetEnv, c.Clock(), c.ClockAttrs())
	}
}
