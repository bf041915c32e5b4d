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
	"fmt"
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
	groupLanes      int
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
	fs.IntVar(&o.applyConc, "concurrency", ffriver.DefaultApplyWorkers(), "`workers` for the apply queue: per-item jobs in flight at once (expire, promote and deadline\n"+
		"items share transactions, so they need few connections); default from the machine: the group\n"+
		"lanes × 256, four groups of 64 (1024 on 2 cores, 2048 on 16)")
	fs.IntVar(&o.groupLanes, "group-lanes", 0, "group `lanes`: transactions of grouped items per kind at once (0: from the machine, GOMAXPROCS/2 within 4..32,\n"+
		fmt.Sprintf("%d here)", ffriver.DefaultGroupLanes()))
	fs.IntVar(&o.scanConc, "scan-concurrency", 2, "`workers` for the scan queue (ticks and partition scans); 0: none")
	o.filter, o.partitions = cli.AddPipelineFlags(fs)
	fs.DurationVar(&o.jobTimeout, "job-timeout", apply.DefaultJobTimeout, "`duration` after which River cancels an ffriver job (keep equal to ffscheduler's)")
	fs.DurationVar(&o.staleAfter, "tick-stale-after", 30*time.Second, "warn when no tick was inserted for this `duration` (no scheduler alive); 0 disables")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 30*time.Second,
		"on SIGINT/SIGTERM, wait this `duration` for running jobs, then cancel them\n(a cancelled job rolls back and is retried)")
	fs.StringVar(&o.id, "id", "", "River client `id`, unique per process (default ffworker@<host>_<start time>)")
	fs.AfterParse(func() error {
		if err := cli.FirstError(cli.CheckInt("concurrency", o.applyConc, 0, 10000), cli.CheckInt("scan-concurrency", o.scanConc, 0, 10000),
			cli.CheckInt("group-lanes", o.groupLanes, 0, 1000)); err != nil {
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
	return cli.Daemon{Flags: o.common, Pool: cli.PoolOptions{AppName: "ffworker", MaxConns: ffriver.PoolConnsWithLanes(o.scanConc, o.applyConc, o.groupLanes),
		SizeFlags: "--concurrency and --scan-concurrency"}, Serve: o.serve}, err
}

// --concurrency's default is ffriver.DefaultApplyWorkers: the machine's
// group lanes (ffriver.DefaultGroupLanes, GOMAXPROCS/2 within 4..32) times
// four groups of 64, 256, so that every lane has a full group in its
// transaction and the next ones waiting (defaults.go has the sweeps behind
// it). ffctl bench tune sweeps the neighbours. The pool is
// ffriver.PoolConnsWithLanes: one connection per item job up to
// max(16, 2 × lanes) (grouped items share their lane's transaction), one
// per scan worker, and 4 for River's fetches, completions and notifier: 22
// up to 16 cores, which keeps a scheduler and four ffworkers within
// Postgres' default max_connections of 100.

// serve runs the process: ffriver's run path (ffriver.Run).
func (o *options) serve(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) error {
	tel, err := o.telemetry.Start(ctx, "ffworker", logger)
	if err != nil {
		return err
	}
	defer cli.StopTelemetry(tel, logger)
	return ffriver.Run(ctx, pool, ffriver.Config{
		Schema: o.common.Schema, RiverSchema: o.common.RiverSchema, Partitions: ff.Partitions(*o.partitions), Filter: *o.filter, JobTimeout: o.jobTimeout, GroupLanes: o.groupLanes,
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
