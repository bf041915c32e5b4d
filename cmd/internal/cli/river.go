package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"time"

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
		err = serveThroughLostServer(ctx, d, pool, logger)
	}
	var pm *ff.PartitionMismatchError
	if errors.As(err, &pm) && pm.Option == "" {
		// The daemons' count comes from --partitions (AddPipelineFlags).
		pm.Option = "--partitions"
	}
	return ReportServe(stderr, name, logger, d.Flags.LogFormat == LogJSON, err)
}

// serveThroughLostServer runs d.Serve, and runs it again when it returns
// an error of a lost server (ff.ErrUnavailable: a connection cut off, only
// a standby answering a multi-host URL) while the server may come back:
// as a refused first connection is tried again (awaitServer), up to
// --startup-wait since the first of a streak of such returns, with the
// same backoff. A running process rides out a lost server by itself; what
// returns such an error is a start cut off half-way: a failover or a
// restart while the start read the schema (the lease checker's failovers
// stopped ffworker with "verify: reading ff_migration: unavailable:
// unexpected EOF", and with "looking for ff.tick jobs …: read only
// connection", leaving no worker to scan). Without --startup-wait (0), or
// for any other error, it returns at once.
func serveThroughLostServer(ctx context.Context, d Daemon, pool *pgxpool.Pool, logger *slog.Logger) error {
	var streak time.Time
	for try := 1; ; try++ {
		began := time.Now()
		err := d.Serve(ctx, pool, logger)
		if err == nil || ctx.Err() != nil || d.Flags.StartupWait <= 0 || !errors.Is(err, ff.ErrUnavailable) {
			return err
		}
		if streak.IsZero() || time.Since(began) >= d.Flags.StartupWait {
			streak, try = began, 1
		}
		if time.Since(streak) >= d.Flags.StartupWait {
			return fmt.Errorf("gave up after waiting %s (--startup-wait): %w", d.Flags.StartupWait, err)
		}
		logger.Warn("the server was lost while starting; starting again", "error", Scrub(err.Error()),
			"waited", time.Since(streak).Round(time.Second).String(), "startup_wait", d.Flags.StartupWait.String(), "tries", try)
		t := time.NewTimer(startupBackoff(try))
		select {
		case <-ctx.Done():
			// Stopped while it waited for the server: a clean stop, as
			// in awaitServer.
			t.Stop()
			logger.Info("stopped before the server came back", "error", Scrub(err.Error()))
			return nil
		case <-t.C:
		}
	}
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
