package cli

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strconv"

	"github.com/ffriver/ffriver/ff"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ReportServe ends a long-running binary and returns its exit code. A
// refusal to start on an unmigrated schema is said once: with JSON logs as
// an error log line (so it lands in the process's structured logs), else as
// Report's plain line; any other error is reported like Report.
func ReportServe(stderr io.Writer, command string, logger *slog.Logger, logJSON bool, err error) int {
	code := ExitCode(err)
	if err != nil && code == ExitNotMigrated && logJSON {
		logger.Error(command+" refusing to start", "error", err)
		return code
	}
	return Report(stderr, command, err)
}

// Daemon is a long-running binary once its flags are parsed (ffscheduler,
// ffworker).
type Daemon struct {
	// Flags are the common flags (database, schema, logging).
	Flags *Common
	// Pool are the options of its pool.
	Pool PoolOptions
	// Serve runs until ctx is done.
	Serve func(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) error
}

// Main is the main function of a long-running binary called name: it
// parses os.Args with parse, runs the Daemon until SIGINT or SIGTERM (Run)
// and exits with Run's code.
func Main(name string, parse func(args []string, stdout io.Writer, getenv func(string) string) (Daemon, error)) {
	ctx, stop := SignalContext(context.Background())
	code := Run(ctx, name, parse, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// Run parses args, opens the Daemon's pool (waiting for the server up to
// --startup-wait when the Daemon's flags registered it: AddStartupWait),
// calls its Serve with the flags' logger, and ends like ReportServe (a
// usage error like Report), returning the exit code. A stop (ctx done)
// while it waits for the server is a clean stop, ExitOK.
func Run(ctx context.Context, name string, parse func(args []string, stdout io.Writer, getenv func(string) string) (Daemon, error),
	args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	d, err := parse(args, stdout, getenv)
	if err != nil {
		return Report(stderr, name, err)
	}
	logger := d.Flags.Logger(stderr)
	if d.Pool.Logger == nil {
		d.Pool.Logger = logger
	}
	pool, err := d.Flags.OpenPool(ctx, d.Pool)
	if err != nil && ctx.Err() != nil {
		// Stopped (SIGINT/SIGTERM) while it waited for the server: a clean
		// stop, like one after the start.
		logger.Info(name+" stopped before the server accepted a connection", "error", Scrub(err.Error()))
		return ExitOK
	}
	if err == nil {
		defer pool.Close()
		err = d.Serve(ctx, pool, logger)
	}
	return ReportServe(stderr, name, logger, d.Flags.LogFormat == LogJSON, err)
}

// AddPipelineFlags adds the flags ffscheduler and ffworker share about the
// pipeline they run: the scanner filter (--namespace, --instance-tag) and
// --partitions.
func AddPipelineFlags(fs *FlagSet) (filter *ff.Filter, partitions *int) {
	filter = AddFilter(fs, "scanner filter: only executions of this `namespace`. ffscheduler carries its filter\n"+
		"in the tick and scan jobs; ffworker works only the jobs of the same filter",
		"scanner filter: only executions whose tag `key=value` matches (as --namespace)")
	partitions = fs.Int("partitions", 0, "expected partition `count` (0.."+strconv.Itoa(ff.MaxPartitions)+"); 0 accepts the schema's")
	fs.AfterParse(func() error { return CheckInt("partitions", *partitions, 0, ff.MaxPartitions) })
	return filter, partitions
}
