package ffriver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/migrations"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

// Role is what a process does in a deployment.
type Role int

// Roles of a process.
const (
	// Scheduler is leader-eligible: while it leads it inserts the periodic
	// ticks and runs River's maintenance; it registers every job kind.
	Scheduler Role = iota + 1
	// Worker never leads (LeaderElectionDisabled) and fetches only
	// ffriver's kinds (FetchOnlyKnownKinds).
	Worker
)

// DefaultShutdownTimeout is ProcessOptions.ShutdownTimeout unless set.
const DefaultShutdownTimeout = 30 * time.Second

// ProcessOptions configure a process of the Service (NewProcess).
type ProcessOptions struct {
	// Role of the process: Scheduler or Worker.
	Role Role
	// Client are the River client's options (SchedulerConfig,
	// WorkerConfig). Its Logger gets the process's own messages; River's
	// client logs through RiverLogger(Logger).
	Client ClientOptions
	// TickStaleAfter, when positive, runs the tick watchdog (WatchTicks):
	// a warning when no tick has been inserted for that long.
	TickStaleAfter time.Duration
	// ShutdownTimeout is how long Stop waits for running jobs before it
	// cancels them (a cancelled ffriver job rolls back and is retried). 0
	// means DefaultShutdownTimeout; negative is an error. To cancel running
	// jobs at once, give a tiny positive one (time.Nanosecond).
	ShutdownTimeout time.Duration
	// Configure, when set, adjusts the River config before the client is
	// built (fetch settings, test options).
	Configure func(*river.Config)
	// Wake tunes the wake loop a Scheduler runs (Service.Wake); a Worker
	// runs none.
	Wake WakeOptions
}

// Process is one running ffriver process: its River client, the Service's
// outbox waker (when the Service made it) and the tick watchdog. Every
// ffriver process runs through it: ffscheduler, ffworker, ffctl demo and
// ffctl bench. Build it with NewProcess, then Start it; Run waits for a
// signal and stops it gracefully.
type Process struct {
	svc     *Service
	opts    ProcessOptions
	config  *river.Config
	client  *river.Client[pgx.Tx]
	logger  *slog.Logger
	runCtx  context.Context
	cancel  context.CancelFunc
	stop    sync.Once
	stopErr error
	started atomic.Bool
}

// NewProcess builds the River client of a process of role o.Role on the
// Service's pool. Nothing runs until Start.
func (f *Service) NewProcess(ctx context.Context, o ProcessOptions) (*Process, error) {
	switch {
	case o.ShutdownTimeout < 0:
		return nil, ff.Validationf("shutdown_timeout", "%s is negative: 0 means the default %s", o.ShutdownTimeout, DefaultShutdownTimeout)
	case o.ShutdownTimeout == 0:
		o.ShutdownTimeout = DefaultShutdownTimeout
	}
	var rc *river.Config
	var err error
	switch o.Role {
	case Scheduler:
		rc, err = f.SchedulerConfig(o.Client)
	case Worker:
		rc, err = f.WorkerConfig(o.Client)
	default:
		return nil, fmt.Errorf("ffriver: process role %d: want Scheduler or Worker", o.Role)
	}
	if err != nil {
		return nil, err
	}
	if o.Configure != nil {
		o.Configure(rc)
	}
	client, err := river.NewClient(riverpgxv5.New(f.store.Pool()), rc)
	if err != nil {
		return nil, fmt.Errorf("river client: %w", err)
	}
	// Jobs must not see the caller's cancellation (a signal): Stop lets
	// them finish first.
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	logger := o.Client.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Process{svc: f, opts: o, config: rc, client: client, logger: logger, runCtx: runCtx, cancel: cancel}, nil
}

// Service is the Service the process was built from (its Store and
// Pipeline).
func (p *Process) Service() *Service { return p.svc }

// Client is the process's River client.
func (p *Process) Client() *river.Client[pgx.Tx] { return p.client }

// Config is the River config the client was built with.
func (p *Process) Config() *river.Config { return p.config }

// Context lives until the process has stopped; servers of the process
// (River UI) run with it.
func (p *Process) Context() context.Context { return p.runCtx }

// Start starts the outbox waker (when the Service made it), the tick
// watchdog (TickStaleAfter), a Scheduler's wake loop (unless
// Wake.Disabled) and the River client.
func (p *Process) Start() error {
	p.svc.attach(p.runCtx, p.client, p.opts.TickStaleAfter, p.logger)
	if p.opts.Role == Scheduler && !p.opts.Wake.Disabled {
		go func() {
			if err := p.svc.Wake(p.runCtx, p.client, p.opts.Wake); err != nil {
				p.logger.Error("ffriver: the wake loop stopped; the periodic ticks carry on", "error", err)
			}
		}()
	}
	if err := p.client.Start(p.runCtx); err != nil {
		p.cancel()
		// A server lost while starting (a failover, a restart) is
		// ff.ErrUnavailable: the binaries start again on it.
		return dbutil.MapErr(err, "starting River")
	}
	p.started.Store(true)
	return nil
}

// Ready reports whether the process can do its work, for a readiness
// probe (the binaries' /readyz): its River client has started and not
// stopped, the database answers, and the schema is still migrated with the
// Service's partition count (River's tables and ffriver's, as New checked
// them). The error says which is not the case.
func (p *Process) Ready(ctx context.Context) error {
	if !p.started.Load() {
		return errors.New("the River client has not started")
	}
	select {
	case <-p.client.Stopped():
		return errors.New("the River client has stopped")
	default:
	}
	pool := p.svc.store.Pool()
	if err := pool.Ping(ctx); err != nil {
		return fmt.Errorf("the database does not answer: %w", err)
	}
	if _, err := migrations.VerifyTables(ctx, pool, p.svc.store.Schema(), p.svc.store.Partitions()); err != nil {
		return fmt.Errorf("schema: %w", err)
	}
	if err := migrations.VerifyRiverFor(ctx, pool, p.svc.store.Schema(), p.svc.RiverSchema()); err != nil {
		return fmt.Errorf("the schema of River's tables: %w", err)
	}
	return nil
}

// Run waits until ctx is done (a signal) or the client stops by itself,
// calls beforeStop (when non-nil), then stops the process (Stop). A client
// that stopped by itself is an error.
func (p *Process) Run(ctx context.Context, beforeStop func()) error {
	select {
	case <-ctx.Done():
		p.logger.Info("stopping: waiting for running jobs", "timeout", p.opts.ShutdownTimeout.String())
	case <-p.client.Stopped():
		p.cancel()
		return errors.New("the River client stopped unexpectedly")
	}
	if beforeStop != nil {
		beforeStop()
	}
	if err := p.Stop(); err != nil {
		return err
	}
	p.logger.Info("stopped")
	return nil
}

// Stop stops the process gracefully: River stops fetching and waits up to
// ShutdownTimeout for running jobs, then cancels them (their transactions
// roll back and River retries them); then the waker and the watchdog stop.
// It is safe to call more than once.
func (p *Process) Stop() error {
	p.stop.Do(func() {
		defer p.cancel()
		stopCtx, cancel := context.WithTimeout(context.Background(), p.opts.ShutdownTimeout)
		defer cancel()
		if err := p.client.Stop(stopCtx); err != nil {
			p.logger.Warn("running jobs did not finish in time; cancelling them", "error", err)
			hard, cancelHard := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancelHard()
			if err := p.client.StopAndCancel(hard); err != nil {
				p.stopErr = fmt.Errorf("stopping River: %w", err)
			}
		}
	})
	return p.stopErr
}

// RunOptions configure Run.
type RunOptions struct {
	// Name of the process in its log lines ("ffscheduler started").
	Name string
	// Process is the process to run.
	Process ProcessOptions
	// Logger of the Service, the River client and the process (default:
	// discard); it overrides Config.Logger and Process.Client.Logger.
	Logger *slog.Logger
	// BeforeStart, when set, runs once the River client is built and
	// before it starts (River UI of a scheduler); the func it returns, when
	// non-nil, runs when the process stops, before River does.
	BeforeStart func(p *Process) (beforeStop func(), err error)
	// Started are extra attributes of the "started" log line.
	Started []any
}

// Run is how an ffriver process runs, the one path of ffscheduler,
// ffworker, ffctl demo and ffctl bench: it builds the Service on pool
// (New: verify the schema, build the pipeline, make the outbox waker),
// builds the process's River client, starts the waker, the tick watchdog
// and River, logs that it started, and runs until ctx is done (a signal),
// then stops gracefully (Process.Run).
func Run(ctx context.Context, pool *pgxpool.Pool, cfg Config, o RunOptions) error {
	if o.Logger != nil {
		cfg.Logger, o.Process.Client.Logger = o.Logger, o.Logger
	}
	if o.Process.Client.ID == "" && o.Name != "" {
		o.Process.Client.ID = ClientID(o.Name, time.Now())
	}
	f, err := New(ctx, pool, cfg)
	if err != nil {
		return err
	}
	p, err := f.NewProcess(ctx, o.Process)
	if err != nil {
		return err
	}
	var beforeStop func()
	if o.BeforeStart != nil {
		if beforeStop, err = o.BeforeStart(p); err != nil {
			p.cancel()
			return err
		}
	}
	if err := p.Start(); err != nil {
		return err
	}
	pl := f.pipeline
	p.logger.Info(o.Name+" started", append([]any{"schema", f.Store().Schema(), "partitions", int(f.Store().Partitions()),
		"pool_max_conns", pool.Config().MaxConns,
		"scan_queue", pl.ScanQueue(), "apply_queue", pl.ApplyQueue(), "scanners", pl.ScannerNames()}, o.Started...)...)
	return p.Run(ctx, beforeStop)
}

// ClientID returns the River client id of a process called name started at
// t: the name, the host name and the start time, as River UI's client and
// leader views and each job's attempted_by show it, e.g.
// "ffworker@web-3_2026_11_23T09_00_01_123456". Host names lose their dots
// (as River's default id does) and are cut to keep the id within River's
// 100 characters.
func ClientID(name string, t time.Time) string {
	host, _ := os.Hostname()
	if host == "" {
		host = "unknown_host"
	}
	host = strings.ReplaceAll(host, ".", "_")
	stamp := strings.Replace(t.UTC().Format("2006_01_02T15_04_05.000000"), ".", "_", 1)
	if room := 100 - len(name) - len("@_") - len(stamp); len(host) > room {
		host = host[:max(room, 0)]
	}
	id := name + "@" + host + "_" + stamp
	if len(id) > 100 {
		id = id[:100]
	}
	return id
}
