// Command ffworker works ffriver's jobs: the per-item actions of the apply
// queue (expire an attempt, promote a delayed execution, expire a deadline,
// dispatch or reconcile a cancel group, trim the outbox) and, with
// --scan-concurrency, partition scans too. Scale it out freely: it never
// becomes River's leader (LeaderElectionDisabled) and fetches only ffriver's
// job kinds (FetchOnlyKnownKinds), so it can share a River schema with other
// applications.
//
// Scanner filter: --namespace and --instance-tag select which jobs this
// worker fetches. The filter is chosen where scans are scheduled (ffscheduler
// carries it in its tick and scan jobs, which scan with it in SQL); each
// filter has its own pair of queues, so a worker started with a filter works
// only the jobs of a scheduler started with the same filter, and a worker
// without one works only unfiltered jobs. A worker whose filter no scheduler
// schedules logs a warning, as does any worker when no tick has been
// inserted for --tick-stale-after (no scheduler alive).
//
// At start, while the server refuses for a reason that passes (every
// connection slot taken, starting up or shutting down, nothing listening
// while it restarts), it keeps trying for up to --startup-wait (default
// 5m, $FF_STARTUP_WAIT), logging what it waits for about every 10 s.
//
// Exit codes: 0 stopped cleanly (SIGINT/SIGTERM, also while it waits to
// start), 1 runtime failure (also the server still refusing after
// --startup-wait), 2 usage error, 3 schema not migrated or with another
// partition count.
package main

import (
	"context"
	"io"
	"log/slog"
	"time"

	"github.com/ffriver/ffriver"
	"github.com/ffriver/ffriver/cmd/internal/cli"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/apply"
	"github.com/jackc/pgx/v5/pgxpool"
)

const summary = `ffworker works ffriver's per-item actions (and, with --scan-concurrency,
partition scans) scheduled by ffscheduler. Run as many as needed; none ever
leads River.

At start it waits up to --startup-wait while the server refuses for a reason
that passes (no free connection slot, starting up, restarting).

Exit codes: 0 clean stop, 1 failure (also the server still refusing after
--startup-wait), 2 usage error, 3 schema not migrated.`

func main() { cli.Main("ffworker", parse) }

type options struct {
	common          *cli.Common
	telemetry       *cli.Telemetry
	applyConc       int
	scanConc        int
	filter          *ff.Filter
	partitions      *int
	jobTimeout      time.Duration
	staleAfter      time.Duration
	shutdownTimeout time.Duration
	id              string
}

func parse(args []string, stdout io.Writer, getenv func(string) string) (cli.Daemon, error) {
	fs := cli.NewFlagSet("ffworker", "", summary)
	fs.Stdout = stdout
	fs.Getenv = getenv
	fs.AddVersion()
	o := &options{common: cli.AddCommon(fs)}
	o.common.AddRiverSchema(fs)
	o.common.AddStartupWait(fs)
	o.telemetry = cli.AddTelemetry(fs)
	fs.IntVar(&o.applyConc, "concurrency", defaultConcurrency, "`workers` for the apply queue: per-item jobs in flight at once (expire, promote and deadline\n"+
		"items share transactions, so they need few connections); on 2 cores 128 drained about 1.5x\n"+
		"what 64 did and 256 no more: on bigger machines raise it, or run more ffworkers, and raise\n"+
		"Postgres' max_connections for the pools")
	fs.IntVar(&o.scanConc, "scan-concurrency", 2, "`workers` for the scan queue (ticks and partition scans); 0: none")
	o.filter, o.partitions = cli.AddPipelineFlags(fs)
	fs.DurationVar(&o.jobTimeout, "job-timeout", apply.DefaultJobTimeout, "`duration` after which River cancels an ffriver job (keep equal to ffscheduler's)")
	fs.DurationVar(&o.staleAfter, "tick-stale-after", 30*time.Second, "warn when no tick was inserted for this `duration` (no scheduler alive); 0 disables")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 30*time.Second,
		"on SIGINT/SIGTERM, wait this `duration` for running jobs, then cancel them\n(a cancelled job rolls back and is retried)")
	fs.StringVar(&o.id, "id", "", "River client `id`, unique per process (default ffworker@<host>_<start time>)")
	fs.AfterParse(func() error {
		if err := cli.FirstError(cli.CheckInt("concurrency", o.applyConc, 0, 10000), cli.CheckInt("scan-concurrency", o.scanConc, 0, 10000)); err != nil {
			return err
		}
		if o.applyConc == 0 && o.scanConc == 0 {
			return cli.Usagef("--concurrency and --scan-concurrency are both 0: nothing to work")
		}
		if o.staleAfter != 0 {
			if err := cli.CheckDuration("tick-stale-after", o.staleAfter, time.Second, 24*time.Hour); err != nil {
				return cli.Usagef("%w (or 0 to disable)", err)
			}
		}
		return cli.FirstError(
			cli.CheckDuration("job-timeout", o.jobTimeout, 100*time.Millisecond, 24*time.Hour),
			cli.CheckDuration("shutdown-timeout", o.shutdownTimeout, 100*time.Millisecond, time.Hour),
		)
	})
	err := fs.Parse(args)
	return cli.Daemon{Flags: o.common, Pool: cli.PoolOptions{AppName: "ffworker", MaxConns: poolSize(o.applyConc, o.scanConc),
		SizeFlags: "--concurrency and --scan-concurrency"}, Serve: o.serve}, err
}

// defaultConcurrency is --concurrency's default, chosen by ffctl bench
// expire on the 2-core reference machine (23 Nov 2026, two runs each, the
// engine's default groups of 64 and 2 lanes): 64 workers drained 2,914 and
// 2,625 leases/s, 128 drained 4,475 and 3,838, 256 drained 3,894 and 4,522.
// A worker mostly waits (for its group's transaction, its job's fetch and
// completion), and with 64 all of a process's jobs fit in one group, so one
// lane worked while the other idled; 128 fill both lanes. Grouped items
// share a transaction, so the jobs in flight need far fewer connections
// (ffriver.PoolConns).
const defaultConcurrency = 128

// poolSize is the connections of an ffworker's pool, ffriver.PoolConns: up
// to 16 for the item jobs (the grouped kinds use at most
// apply.DefaultGroupLanes each; the others one per job, waiting for a
// connection beyond that), one per scan worker, and 4 for River's fetches,
// completions and notifier. It keeps a few ffworkers within Postgres'
// default max_connections of 100.
func poolSize(apply, scan int) int32 { return ffriver.PoolConns(scan, apply) }

// serve runs the process: ffriver's run path (ffriver.Run).
func (o *options) serve(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) error {
	tel, err := o.telemetry.Start(ctx, "ffworker", logger)
	if err != nil {
		return err
	}
	defer cli.StopTelemetry(tel, logger)
	return ffriver.Run(ctx, pool, ffriver.Config{
		Schema: o.common.Schema, RiverSchema: o.common.RiverSchema, Partitions: ff.Partitions(*o.partitions), Filter: *o.filter, JobTimeout: o.jobTimeout,
		MeterProvider: tel.MeterProvider(), TracerProvider: tel.TracerProvider(), Clock: o.common.Clock(),
	}, ffriver.RunOptions{
		BeforeStart: func(p *ffriver.Process) (func(), error) {
			tel.SetReady(p.Ready)
			return nil, nil
		},
		Name: "ffworker", Logger: logger, Started: append([]any{"apply_concurrency", o.applyConc, "scan_concurrency", o.scanConc}, o.common.ClockAttrs()...),
		Process: ffriver.ProcessOptions{Role: ffriver.Worker, ShutdownTimeout: o.shutdownTimeout, TickStaleAfter: o.staleAfter,
			Client: ffriver.ClientOptions{ScanWorkers: o.scanConc, ApplyWorkers: o.applyConc, ID: o.id}},
	})
}
