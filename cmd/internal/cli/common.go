package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/internal/redact"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Log formats accepted by --log-format.
const (
	LogText = "text"
	LogJSON = "json"
)

// Common holds the flags every ffriver binary takes. AddCommon registers them
// on a FlagSet; after Parse the fields hold the values, with the environment's
// defaults filled in and checked.
type Common struct {
	// DatabaseURL: --database-url, else $DATABASE_URL.
	DatabaseURL string
	// Schema: --schema, else $FF_SCHEMA, else "" (the connection's
	// search_path decides). Always a valid identifier after Parse.
	Schema string
	// RiverSchema: --river-schema, else $FF_RIVER_SCHEMA, else Schema;
	// set only on commands that registered the flag (AddRiverSchema).
	RiverSchema string
	// LogFormat: LogText or LogJSON.
	LogFormat string
	// LogLevel: --log-level.
	LogLevel slog.Level
	// StartupWait: --startup-wait, else $FF_STARTUP_WAIT, else
	// DefaultStartupWait; set only on commands that registered the flag
	// (AddStartupWait), else 0: OpenPool fails at once.
	StartupWait time.Duration
	// ClockOffset: $FF_CLOCK_OFFSET (fault testing only, no flag): how far
	// this process's clock is shifted from the system clock (Clock).
	ClockOffset time.Duration
}

// ClockOffsetEnv names the environment variable that shifts a binary's
// clock, every *_ms timestamp it writes and every due time it compares, by
// a duration ("1500ms", "-2s"). It is for fault testing: the lease checker
// runs binaries whose clocks disagree, as the hosts of a real deployment's
// processes do. A binary with an offset says so when it starts.
const ClockOffsetEnv = "FF_CLOCK_OFFSET"

// Clock returns the process's clock for ffriver.Config.Clock: nil (the
// system clock) without an offset.
func (c *Common) Clock() ff.Clock {
	if c.ClockOffset == 0 {
		return nil
	}
	return offsetClock(c.ClockOffset)
}

// ClockAttrs are the attributes of a binary's "started" line that name
// its clock offset: none without one.
func (c *Common) ClockAttrs() []any {
	if c.ClockOffset == 0 {
		return nil
	}
	return []any{"clock_offset", c.ClockOffset.String(), "clock_offset_from", "$" + ClockOffsetEnv}
}

// offsetClock is the system clock shifted by itself.
type offsetClock time.Duration

func (o offsetClock) NowMs() int64 { return time.Now().Add(time.Duration(o)).UnixMilli() }

// AddCommon registers --database-url, --schema, --log-format and --log-level
// on fs and returns where their values land after fs.Parse.
func AddCommon(fs *FlagSet) *Common {
	c := &Common{LogFormat: LogText, LogLevel: slog.LevelInfo}
	// The URL may carry a password: its default is read after parsing, so the
	// help never prints it.
	fs.StringVar(&c.DatabaseURL, "database-url", "",
		"Postgres connection `url`, e.g. postgres://user@host:5432/db (default $DATABASE_URL)")
	fs.StringVar(&c.Schema, "schema", "",
		"Postgres `schema` holding ffriver's tables (and River's, unless --river-schema): letters, digits\nand underscores "+
			"(default $FF_SCHEMA, else the first schema of the connection's search_path)")
	fs.Var(&logFormatValue{&c.LogFormat}, "log-format", "log line `format` on stderr: text or json")
	fs.TextVar(&c.LogLevel, "log-level", slog.LevelInfo, "lowest `level` logged: debug, info, warn or error")
	fs.CompleteValues("log-format", LogText, LogJSON)
	fs.CompleteValues("log-level", "debug", "info", "warn", "error")
	fs.AfterParse(func() error {
		if c.DatabaseURL == "" {
			c.DatabaseURL = fs.Getenv("DATABASE_URL")
		}
		if c.Schema == "" {
			c.Schema = fs.Getenv("FF_SCHEMA")
		}
		addSecrets(redact.Secrets(c.DatabaseURL))
		addSecrets([]string{fs.Getenv("PGPASSWORD")})
		if v := fs.Getenv(ClockOffsetEnv); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				return Usagef("$%s=%q: not a duration with a unit, such as 1500ms or -2s", ClockOffsetEnv, v)
			}
			c.ClockOffset = d
		}
		return c.check(fs.Getenv)
	})
	return c
}

// AddRiverSchema registers --river-schema on fs, for a command that
// reads or writes River's tables: the schema of River's tables when they
// are not in --schema (an application's own River: ffriver.Config.RiverSchema).
// Call it after AddCommon; after fs.Parse, c.RiverSchema holds the flag,
// else $FF_RIVER_SCHEMA, else c.Schema.
func (c *Common) AddRiverSchema(fs *FlagSet) {
	fs.StringVar(&c.RiverSchema, "river-schema", "",
		"Postgres `schema` holding River's tables, when they are not in --schema (an application's\n"+
			"own River; ffriver.Config.RiverSchema) (default $FF_RIVER_SCHEMA, else --schema)")
	fs.AfterParse(func() error {
		if c.RiverSchema == "" {
			c.RiverSchema = fs.Getenv("FF_RIVER_SCHEMA")
		}
		if c.RiverSchema == "" {
			c.RiverSchema = c.Schema
		}
		if _, err := dbutil.ParseSchema(c.RiverSchema); err != nil {
			return &UsageError{Err: fmt.Errorf("--river-schema: %w", err)}
		}
		return nil
	})
}

func (c *Common) check(getenv func(string) string) error {
	if _, err := dbutil.ParseSchema(c.Schema); err != nil {
		return &UsageError{Err: err}
	}
	if c.DatabaseURL == "" && getenv("PGHOST") == "" && getenv("PGSERVICE") == "" && getenv("PGDATABASE") == "" {
		return Usagef("no database given: pass --database-url or set DATABASE_URL (scripts/devdb.sh prints one for a local server)")
	}
	if _, err := pgxpool.ParseConfig(c.DatabaseURL); err != nil {
		// pgx's message can quote the URL; say what is wrong without it.
		return Usagef("--database-url %s: %v", RedactURL(c.DatabaseURL), redactErr(err, c.DatabaseURL))
	}
	return nil
}

type logFormatValue struct{ p *string }

func (v *logFormatValue) String() string {
	if v == nil || v.p == nil {
		return ""
	}
	return *v.p
}

func (v *logFormatValue) Set(s string) error {
	switch s {
	case LogText, LogJSON:
		*v.p = s
		return nil
	}
	return fmt.Errorf("%q is not a log format: use text or json", s)
}

// Logger returns a logger writing c.LogFormat lines at c.LogLevel and above
// to w (normally os.Stderr).
func (c *Common) Logger(w io.Writer) *slog.Logger {
	return NewLogger(w, c.LogFormat, c.LogLevel)
}

// NewLogger returns a text or JSON slog logger on w.
// Every line has the passwords of the connection strings parsed by AddCommon
// masked (see Scrub).
func NewLogger(w io.Writer, format string, level slog.Leveler) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		return scrubAttr(a)
	}}
	if format == LogJSON {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// PoolOptions tune OpenPool. A pool_max_conns (or other pool_ setting) in the
// URL wins over these.
type PoolOptions struct {
	// AppName is the application_name the server shows in pg_stat_activity
	// (unless the URL sets one).
	AppName string
	// MaxConns of the pool (default: pgx's, the larger of 4 and the CPU count).
	MaxConns int32
	// MinConns kept open (default 0).
	MinConns int32
	// SizeFlags names the flags that size the pool ("--concurrency and
	// --scan-concurrency"), for the explanation of a refused connection.
	SizeFlags string
	// OneShot says the command runs each statement once (ffctl status):
	// the pool sends them unprepared (UnpreparedStatements), unless the
	// URL sets default_query_exec_mode.
	OneShot bool
	// Logger, when set, hears (at most once a minute) why the server
	// refused the pool a connection: which limit, how many connections it
	// allows and who holds them (see ConnLimitError).
	Logger *slog.Logger
}

// PoolConfig builds the pool configuration OpenPool uses: c.DatabaseURL, with
// search_path set to c.Schema when one is given, so unqualified SQL finds
// ffriver's tables (River gets the schema through its Config.Schema).
func (c *Common) PoolConfig(o PoolOptions) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(c.DatabaseURL)
	if err != nil {
		return nil, Usagef("--database-url %s: %v", RedactURL(c.DatabaseURL), redactErr(err, c.DatabaseURL))
	}
	s, err := dbutil.ParseSchema(c.Schema)
	if err != nil {
		return nil, &UsageError{Err: err}
	}
	if s != "" {
		// Quoted, so a mixed-case name is not folded to lower case.
		cfg.ConnConfig.RuntimeParams["search_path"] = s.Ident()
	}
	if o.AppName != "" && cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = o.AppName
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = 10 * time.Second
	}
	if !strings.Contains(c.DatabaseURL, "pool_max_conns") && o.MaxConns > 0 {
		cfg.MaxConns = o.MaxConns
	}
	if !strings.Contains(c.DatabaseURL, "pool_min_conns") && o.MinConns > 0 {
		cfg.MinConns = min(o.MinConns, cfg.MaxConns)
	}
	if !strings.Contains(c.DatabaseURL, "pool_max_conn_idle_time") {
		cfg.MaxConnIdleTime = 5 * time.Minute
	}
	if o.OneShot && !strings.Contains(c.DatabaseURL, "default_query_exec_mode") {
		UnpreparedStatements(cfg)
	}
	if o.Logger != nil && cfg.ConnConfig.Tracer == nil {
		cfg.ConnConfig.Tracer = &connLimitTracer{logger: o.Logger, opts: o, max: cfg.MaxConns}
	}
	return cfg, nil
}

// UnpreparedStatements makes the pool of cfg send each statement in one
// round trip, unprepared, with its parameters typed by their Go types
// (pgx.QueryExecModeExec), for a command that runs each statement once.
// pgx's default prepares a statement the first time a connection runs it,
// a round trip of its own, which only a statement run again pays back: a
// report on a new connection (ffctl status) ran 42 of them, 10–14 % of its
// time (ffctl bench scale, 1,000,000 executions).
func UnpreparedStatements(cfg *pgxpool.Config) {
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
}

// OpenPool opens a pool (see PoolConfig) and checks that the server answers.
// A server that does not answer is an ff.ErrUnavailable (exit code 1).
// With c.StartupWait set (AddStartupWait), a refusal that passes by itself
// (no free slot, the server starting up or shutting down, nothing
// listening) is tried again for up to that long, saying on o.Logger what
// it waits for; any other failure is returned at once.
func (c *Common) OpenPool(ctx context.Context, o PoolOptions) (*pgxpool.Pool, error) {
	cfg, err := c.PoolConfig(o)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, dbutil.MapErr(redactErr(err, c.DatabaseURL), "connecting to "+RedactURL(c.DatabaseURL))
	}
	// A refusal before the pool is open is the start's to explain, not the
	// running process's (connLimitTracer).
	tracer, _ := cfg.ConnConfig.Tracer.(*connLimitTracer)
	if tracer != nil {
		tracer.starting.Store(true)
	}
	if err := c.awaitServer(ctx, pool, cfg, o); err != nil {
		pool.Close()
		return nil, err
	}
	if tracer != nil {
		tracer.starting.Store(false)
	}
	return pool, nil
}

// firstConnError explains err, the failure of the first connection of a
// pool with configuration cfg: a refusal for want of a slot as a
// *ConnLimitError, a failure explainConnect recognises as one sentence (a
// *ConnectError), anything else as pgx said it; each prefixed with the
// (redacted) URL.
func (c *Common) firstConnError(cfg *pgxpool.Config, o PoolOptions, err error) error {
	doing := "connecting to " + RedactURL(c.DatabaseURL)
	if isConnLimit(err) {
		return dbutil.MapErr(redactErr(connLimitError(o, cfg.MaxConns, err), c.DatabaseURL), doing)
	}
	var ce *ConnectError
	if errors.As(explainConnect(&cfg.ConnConfig.Config, err), &ce) {
		// One sentence; the chain is in Unwrap (and the debug line).
		ce.Err = redactErr(ce.Err, c.DatabaseURL)
		return fmt.Errorf("%s: %w", doing, ce)
	}
	return dbutil.MapErr(redactErr(err, c.DatabaseURL), doing)
}

// ResolveSchema returns c.Schema, or the pool's current_schema() when it is
// empty: the name to give River's Config.Schema and ffriver's packages.
func (c *Common) ResolveSchema(ctx context.Context, pool *pgxpool.Pool) (string, error) {
	s, err := dbutil.Schema(c.Schema).Resolve(ctx, pool)
	return string(s), err
}

// RedactURL returns u with every password in it replaced by "xxxxx", for
// logs and messages, in each form libpq accepts (redact.ConnString).
func RedactURL(u string) string {
	if u == "" {
		return "(default connection from PG* variables)"
	}
	return redact.ConnString(u)
}

// redactErr hides every password of the connection string u that err's
// message may repeat (pgx's errors quote the connection string, and
// url.Parse's quote it whole).
func redactErr(err error, u string) error {
	if err == nil {
		return nil
	}
	msg := redact.Scrub(err.Error(), redact.Secrets(u))
	if msg == err.Error() {
		return err
	}
	return redactedError{msg: msg, err: err}
}

type redactedError struct {
	msg string
	err error
}

func (e redactedError) Error() string { return e.msg }
func (e redactedError) Unwrap() error { return e.err }
