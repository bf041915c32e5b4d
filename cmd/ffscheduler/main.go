// Command ffscheduler is ffriver's scheduler: the one River client that may
// become River's leader. While it leads it inserts every scanner's periodic
// ff.tick job and runs River's maintenance (rescuer, cleaner, scheduler); it
// registers every ffriver job kind, so the rescuer never discards a stuck
// ffriver job as unknown. It also works the scan queue (ticks and partition
// scans are cheap reads), and with --apply-concurrency the apply queue too.
// Run two for failover: River elects one leader, the other takes over within
// River's leader TTL (about 15 s after a crash, at once after a clean stop).
//
// It serves River UI on --ui-addr (default 127.0.0.1:8080; "off" disables
// it). A non-loopback address needs --ui-user and --ui-password (or
// FF_UI_USER and FF_UI_PASSWORD) and then requires HTTP basic auth: River
// UI can cancel, retry and delete jobs. Everywhere, River UI answers only
// requests whose Host names it (the address listened on, localhost and the
// loopback IPs of its port, and --ui-allowed-hosts), refuses state-changing
// requests from other origins, and wants JSON (uiserver.Guard). The same
// listener serves the execution view under /ff/ (cmd/internal/ffview:
// executions, their timelines, flows, cancel and revoke) behind the same
// guard and basic auth. When the default address is taken
// (a second scheduler on the same host) the UI is skipped with a warning;
// an address given explicitly that cannot be bound is an error.
//
// The settings every process of a schema must agree on (the retentions,
// each scanner's interval and batch) are stored in the schema
// (ffriver.Config.StoreSettings): a flag given explicitly is stored when
// the schema holds no value for it yet, and a stored value wins over a
// flag, with a warning at start naming both. ffctl config changes them.
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
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/ffriver/ffriver"
	"github.com/ffriver/ffriver/cmd/internal/cli"
	"github.com/ffriver/ffriver/cmd/internal/ffview"
	"github.com/ffriver/ffriver/cmd/internal/uiserver"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/apply"
	"github.com/ffriver/ffriver/internal/pipeline"
	"github.com/ffriver/ffriver/internal/settings"
	"github.com/ffriver/ffriver/scanners"
	"github.com/ffriver/ffriver/workers"
	"github.com/jackc/pgx/v5/pgxpool"
)

const defaultUIAddr = "127.0.0.1:8080"

// The allowed ranges of the flags: a value outside is a usage error, never
// a silent fallback to the default.
const (
	minInterval   = settings.MinInterval
	maxInterval   = settings.MaxInterval
	maxBatch      = settings.MaxBatch
	maxRetention  = cli.MaxRetention
	minJobTimeout = 100 * time.Millisecond
	maxJobTimeout = 24 * time.Hour
	minShutdown   = 100 * time.Millisecond
	maxShutdown   = time.Hour
)

const summary = `ffscheduler is the River leader of an ffriver deployment: it inserts the
scanners' periodic ticks, runs River's maintenance and serves River UI. It
works the scan queue; ffworker processes work the per-item actions. Run two
for failover; River elects one leader.

The settings every process of a schema must agree on (--outbox-retention,
--execution-retention, each scanner's --*-interval and --*-batch) are stored
in the schema: a flag given explicitly is stored when the schema holds no
value for it yet; a stored value wins over a flag, with a warning naming
both. ffctl config shows and changes them.

At start it waits up to --startup-wait while the server refuses for a reason
that passes (no free connection slot, starting up, restarting).

Exit codes: 0 clean stop, 1 failure (also the server still refusing after
--startup-wait), 2 usage error, 3 schema not migrated.`

func main() { cli.Main("ffscheduler", parse) }

type options struct {
	common          *cli.Common
	telemetry       *cli.Telemetry
	uiAddr          string
	uiUser, uiPass  string
	uiAllowedHosts  string
	uiHosts         []string
	scanConc        int
	applyConc       int
	filter          *ff.Filter
	partitions      *int
	retention       time.Duration
	execRetention   time.Duration
	jobTimeout      time.Duration
	rescueAfter     time.Duration
	completedRetain time.Duration
	shutdownTimeout time.Duration
	intervals       map[string]*time.Duration
	batches         map[string]*int
	// explicit names the flags given on the command line: only those are
	// stored as the schema's settings, or compared with the stored ones.
	explicit       func(name string) bool
	uiAddrExplicit bool
	id             string
}

func parse(args []string, stdout io.Writer, getenv func(string) string) (cli.Daemon, error) {
	fs := cli.NewFlagSet("ffscheduler", "", summary)
	fs.Stdout = stdout
	fs.Getenv = getenv
	fs.AddVersion()
	o := &options{common: cli.AddCommon(fs), intervals: map[string]*time.Duration{}, batches: map[string]*int{}}
	o.common.AddRiverSchema(fs)
	o.common.AddStartupWait(fs)
	o.telemetry = cli.AddTelemetry(fs)
	fs.StringVar(&o.uiAddr, "ui-addr", defaultUIAddr, "`host:port` River UI listens on; \"off\" disables it.\n"+
		"A non-loopback address requires --ui-user and --ui-password")
	fs.StringVar(&o.uiUser, "ui-user", "", "basic-auth `user` for River UI (default $FF_UI_USER)")
	fs.StringVar(&o.uiPass, "ui-password", "", "basic-auth `password` for River UI (default $FF_UI_PASSWORD)")
	fs.StringVar(&o.uiAllowedHosts, "ui-allowed-hosts", "", "comma-separated `hosts` (name, or name:port) River UI also answers as, e.g. a\n"+
		"reverse proxy's or a DNS name's; by default only the address listened on and localhost,\n"+
		"127.0.0.1 and [::1] of its port: other Host headers (DNS rebinding) are refused")
	fs.IntVar(&o.scanConc, "scan-concurrency", 4, "`workers` for the scan queue (ticks and partition scans); 0: none")
	fs.IntVar(&o.applyConc, "apply-concurrency", 0, "`workers` for the apply queue (per-item actions); 0 leaves them to ffworker")
	o.filter, o.partitions = cli.AddPipelineFlags(fs)
	fs.DurationVar(&o.retention, "outbox-retention", scanners.DefaultOutboxRetention, "outbox events older than this `duration` are deleted")
	o.execRetention = scanners.DefaultExecutionRetention
	fs.Var((*cli.ExecutionRetentionFlag)(&o.execRetention), "execution-retention", "terminal executions older than this `duration` are removed with their attempts\n"+
		"(a flow only once every member is, then whole; their events may outlive them);\n"+
		"\"forever\" keeps them")
	fs.DurationVar(&o.jobTimeout, "job-timeout", apply.DefaultJobTimeout, "`duration` after which River cancels an ffriver job")
	fs.DurationVar(&o.rescueAfter, "rescue-after", ffriver.DefaultRescueAfter,
		"`duration` after which River's rescuer retries a job still running\n(a worker that died mid-job); at least --job-timeout")
	fs.DurationVar(&o.completedRetain, "completed-retention", ffriver.DefaultCompletedRetention, "how long River keeps completed jobs and their outputs (`duration`)")
	fs.DurationVar(&o.shutdownTimeout, "shutdown-timeout", 30*time.Second,
		"on SIGINT/SIGTERM, wait this `duration` for running jobs, then cancel them\n(a cancelled job rolls back and is retried)")
	fs.StringVar(&o.id, "id", "", "River client `id`, unique per process (default ffscheduler@<host>_<start time>)")
	for _, b := range scanners.Builtins(scanners.BuiltinOptions{}) {
		s := b.Scanner
		d := s.Defaults()
		o.intervals[s.Name()] = fs.Duration(strings.ReplaceAll(s.Name(), "_", "-")+"-interval", d.Interval, "tick `interval` of the "+s.Name()+" scanner")
		o.batches[s.Name()] = fs.Int(strings.ReplaceAll(s.Name(), "_", "-")+"-batch", d.Batch, "most `candidates` one "+s.Name()+" scan selects")
	}
	fs.AfterParse(func() error {
		o.uiAddrExplicit = fs.Explicit("ui-addr")
		o.explicit = fs.Explicit
		if o.uiUser == "" {
			o.uiUser = getenv("FF_UI_USER")
		}
		if o.uiPass == "" {
			o.uiPass = getenv("FF_UI_PASSWORD")
		}
		if err := cli.FirstError(cli.CheckInt("scan-concurrency", o.scanConc, 0, 10000), cli.CheckInt("apply-concurrency", o.applyConc, 0, 10000)); err != nil {
			return err
		}
		if o.scanConc == 0 && o.applyConc == 0 {
			return cli.Usagef("--scan-concurrency and --apply-concurrency are both 0: the scheduler would work no queue and could not lead")
		}
		for _, b := range scanners.Builtins(scanners.BuiltinOptions{}) {
			s := b.Scanner
			flag := strings.ReplaceAll(s.Name(), "_", "-")
			if err := cli.FirstError(
				cli.CheckDuration(flag+"-interval", *o.intervals[s.Name()], minInterval, maxInterval),
				cli.CheckInt(flag+"-batch", *o.batches[s.Name()], 1, maxBatch),
			); err != nil {
				return err
			}
		}
		if err := cli.FirstError(
			cli.CheckDuration("outbox-retention", o.retention, time.Second, maxRetention),
			cli.CheckExecutionRetention(o.execRetention),
			cli.CheckDuration("job-timeout", o.jobTimeout, minJobTimeout, maxJobTimeout),
			cli.CheckDuration("rescue-after", o.rescueAfter, minJobTimeout, maxJobTimeout),
			cli.CheckDuration("completed-retention", o.completedRetain, time.Second, maxRetention),
			cli.CheckDuration("shutdown-timeout", o.shutdownTimeout, minShutdown, maxShutdown),
		); err != nil {
			return err
		}
		if o.rescueAfter < o.jobTimeout {
			return cli.Usagef("--rescue-after %s is shorter than --job-timeout %s", o.rescueAfter, o.jobTimeout)
		}
		if o.uiAllowedHosts != "" {
			for _, h := range strings.Split(o.uiAllowedHosts, ",") {
				ph, err := uiserver.ParseAllowedHost(h)
				if err != nil {
					return cli.Usagef("--ui-allowed-hosts: %w", err)
				}
				o.uiHosts = append(o.uiHosts, ph)
			}
		}
		if (o.uiUser == "") != (o.uiPass == "") {
			return cli.Usagef("River UI credentials need both --ui-user and --ui-password")
		}
		if o.uiAddr != "off" && o.uiAddr != "" {
			if _, _, err := net.SplitHostPort(o.uiAddr); err != nil {
				return cli.Usagef("--ui-addr %q: %v", o.uiAddr, err)
			}
			if !uiserver.IsLoopback(o.uiAddr) && o.uiUser == "" {
				return cli.Usagef("--ui-addr %s is not a loopback address: River UI can cancel and delete jobs, so pass --ui-user and --ui-password (or set FF_UI_USER and FF_UI_PASSWORD)", o.uiAddr)
			}
		}
		return nil
	})
	err := fs.Parse(args)
	return cli.Daemon{Flags: o.common, Pool: cli.PoolOptions{AppName: "ffscheduler", MaxConns: int32(o.scanConc + o.applyConc + 8),
		SizeFlags: "--scan-concurrency and --apply-concurrency"}, Serve: o.serve}, err
}

// serve runs the process: ffriver's run path (ffriver.Run).
func (o *options) serve(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) error {
	// Only the flags given explicitly reach the Config: a stored setting
	// wins over them (with a warning where they disagree), the scheduler
	// stores those not stored yet, and a default is never stored.
	overrides := map[string]workers.Settings{}
	for name, iv := range o.intervals {
		var st workers.Settings
		flag := strings.ReplaceAll(name, "_", "-")
		if o.explicit(flag + "-interval") {
			st.Interval = *iv
		}
		if o.explicit(flag + "-batch") {
			st.Batch = *o.batches[name]
		}
		overrides[name] = st
	}
	var retention, execRetention time.Duration
	if o.explicit("outbox-retention") {
		retention = o.retention
	}
	if o.explicit("execution-retention") {
		execRetention = o.execRetention
	}
	host, _ := os.Hostname()
	tel, err := o.telemetry.Start(ctx, "ffscheduler", logger)
	if err != nil {
		return err
	}
	defer cli.StopTelemetry(tel, logger)
	// What the started line says of River UI: its URL once it is served,
	// "off", or why not (the address was taken).
	ui := &logString{o.uiAddr}
	return ffriver.Run(ctx, pool, ffriver.Config{
		Schema: o.common.Schema, RiverSchema: o.common.RiverSchema, Partitions: ff.Partitions(*o.partitions), Filter: *o.filter,
		Scanners: overrides, OutboxRetention: retention, ExecutionRetention: execRetention, JobTimeout: o.jobTimeout,
		StoreSettings: true, SettingsSetBy: fmt.Sprintf("ffscheduler on %s (pid %d) at its start", host, os.Getpid()),
		MeterProvider: tel.MeterProvider(), TracerProvider: tel.TracerProvider(), Clock: o.common.Clock(),
	}, ffriver.RunOptions{
		Name: "ffscheduler", Logger: logger, Started: append([]any{"ui", ui}, o.common.ClockAttrs()...),
		Process: ffriver.ProcessOptions{Role: ffriver.Scheduler, ShutdownTimeout: o.shutdownTimeout, Client: ffriver.ClientOptions{
			ScanWorkers: o.scanConc, ApplyWorkers: o.applyConc, ID: o.id,
			RescueStuckJobsAfter: o.rescueAfter, CompletedJobRetention: o.completedRetain,
		}},
		BeforeStart: func(p *ffriver.Process) (func(), error) {
			tel.SetReady(p.Ready)
			if o.uiAddr == "off" || o.uiAddr == "" {
				return nil, nil
			}
			srv, err := startUI(p.Context(), o, p, logger)
			switch {
			case srv != nil:
				ui.s = srv.URL
			case err == nil:
				ui.s = "not served: " + o.uiAddr + " is taken"
			}
			return srv.Shutdown, err
		},
	})
}

// logString is a string a log line reads when it is written.
type logString struct{ s string }

// LogValue implements slog.LogValuer.
func (l *logString) LogValue() slog.Value { return slog.StringValue(l.s) }

// startUI serves River UI and the execution view (cmd/internal/ffview, under
// /ff/) of process p on one listener.
func startUI(ctx context.Context, o *options, p *ffriver.Process, logger *slog.Logger) (*uiserver.Server, error) {
	view, err := ffview.New(p.Service().Store(), ffview.Options{Logger: logger, Pipeline: pipeline.Of(p.Service()), RiverSchema: p.Config().Schema})
	if err != nil {
		return nil, err
	}
	srv, err := uiserver.Start(ctx, p.Client(), uiserver.Options{Addr: o.uiAddr, User: o.uiUser, Password: o.uiPass,
		AllowedHosts: o.uiHosts, View: view, Logger: logger})
	var le *uiserver.ListenError
	if errors.As(err, &le) && !o.uiAddrExplicit {
		logger.Warn("River UI not served: its default address is taken (another scheduler on this host?); pass --ui-addr to choose one", "addr", o.uiAddr, "error", le.Err)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	logger.Info("River UI listening", "url", srv.URL, "auth", o.uiUser != "", "items", srv.URL+uiserver.ItemsPath, "executions", srv.ViewURL)
	return srv, nil
}
