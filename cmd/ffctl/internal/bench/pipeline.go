package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/ffriver/ffriver"
	"github.com/ffriver/ffriver/cmd/internal/cli"
	"github.com/ffriver/ffriver/workers"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
)

// The standalone processes' default concurrency (the flag defaults of
// cmd/ffscheduler and cmd/ffworker; keep them in step). ffworker's
// --concurrency is the machine's, ffriver.DefaultApplyWorkers.
const (
	schedulerScanWorkers = 4 // ffscheduler --scan-concurrency
	schedulerApplyWorker = 0 // ffscheduler --apply-concurrency
	workerScanWorkers    = 2 // ffworker --scan-concurrency
	workerTickStaleAfter = 30 * time.Second
)

// PipelineOptions size the in-process pipeline (defaults: the binaries').
type PipelineOptions struct {
	// ApplyWorkers of the worker process (default ffworker's,
	// ffriver.DefaultApplyWorkers).
	ApplyWorkers int
	// Scanners overrides settings by scanner name (default: none, every
	// built-in scanner runs with its defaults, as in the binaries).
	Scanners map[string]workers.Settings
	// GroupSize and GroupLanes of the worker's apply engine (0: ffriver's
	// defaults, apply.DefaultGroupSize and the machine's lanes,
	// ffriver.DefaultGroupLanes).
	GroupSize, GroupLanes int
	// FetchCooldown and FetchPollInterval override ffriver's River fetch
	// settings of both processes when non-zero.
	FetchCooldown, FetchPollInterval time.Duration
	// OutboxRetention, ExecutionRetention and CompletedJobRetention of the
	// scheduler (ffscheduler's --outbox-retention, --execution-retention
	// and --completed-retention; 0: their defaults).
	OutboxRetention, ExecutionRetention, CompletedJobRetention time.Duration
	// Wake tunes the scheduler's wake loop (default: on, as in
	// ffscheduler); Wake.Disabled leaves the scanners to their periodic
	// ticks, the pipeline before the loop.
	Wake ffriver.WakeOptions
}

// proc is one ffriver process run in this one: its own pool, Waker and
// River client, configured the way its binary configures them.
type proc struct {
	name   string
	pool   *pgxpool.Pool
	client *river.Client[pgx.Tx]
	ff     *ffriver.Service
	proc   *ffriver.Process
	rc     *river.Config
	// wakeOff: a scheduler run without its wake loop.
	wakeOff bool
}

// pipeline is ffriver's River pipeline running in this process: one
// scheduler (leader-eligible, periodic ticks, scan queue) and one worker
// (apply and scan queues, never leader), each with its own pool and Waker,
// as cmd/ffscheduler and cmd/ffworker build them (River UI left out).
type pipeline struct {
	sched, work *proc
	cancel      context.CancelFunc
	done        chan struct{}
}

// poolTracer, when set (by a test), traces the pipeline's pools.
var poolTracer pgx.QueryTracer

// poolFor opens a pool on schema the way the binaries do (cli.PoolConfig).
func (e *Env) poolFor(ctx context.Context, schema, app string, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := (&cli.Common{DatabaseURL: e.URL, Schema: schema}).PoolConfig(cli.PoolOptions{AppName: app, MaxConns: maxConns})
	if err != nil {
		return nil, err
	}
	if poolTracer != nil {
		cfg.ConnConfig.Tracer = poolTracer
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("bench: connecting: %w", err)
	}
	return pool, nil
}

// startPipeline starts the scheduler and the worker on schema.
func startPipeline(ctx context.Context, env *Env, schema string, o PipelineOptions) (p *pipeline, err error) {
	if o.ApplyWorkers == 0 {
		o.ApplyWorkers = ffriver.DefaultApplyWorkers()
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p = &pipeline{cancel: cancel, done: make(chan struct{})}
	defer func() {
		if err != nil {
			p.stop()
		}
	}()
	logger := env.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	build := func(name string, scan, apply int, maxConns int32, leader bool) (*proc, error) {
		pool, err := env.poolFor(ctx, schema, "ffbench-"+name, maxConns)
		if err != nil {
			return nil, err
		}
		pr := &proc{name: name, pool: pool}
		cfg := ffriver.Config{Schema: schema, Logger: logger, GroupSize: o.GroupSize, GroupLanes: o.GroupLanes}
		// As the binaries: the scheduler ticks, the worker watches for ticks.
		po := ffriver.ProcessOptions{Role: ffriver.Worker, TickStaleAfter: workerTickStaleAfter,
			Client: ffriver.ClientOptions{ScanWorkers: scan, ApplyWorkers: apply, Logger: logger},
			Configure: func(rc *river.Config) {
				if o.FetchCooldown > 0 {
					rc.FetchCooldown = o.FetchCooldown
				}
				if o.FetchPollInterval > 0 {
					rc.FetchPollInterval = o.FetchPollInterval
				}
				for name, qc := range rc.Queues {
					qc.FetchCooldown, qc.FetchPollInterval = cmp.Or(o.FetchCooldown, qc.FetchCooldown), cmp.Or(o.FetchPollInterval, qc.FetchPollInterval)
					rc.Queues[name] = qc
				}
			}}
		if leader {
			cfg.Scanners = o.Scanners
			cfg.OutboxRetention, cfg.ExecutionRetention = o.OutboxRetention, o.ExecutionRetention
			po.Client.CompletedJobRetention = o.CompletedJobRetention
			po.Role, po.TickStaleAfter = ffriver.Scheduler, 0
			po.Wake, pr.wakeOff = o.Wake, o.Wake.Disabled
		}
		if pr.ff, err = ffriver.New(ctx, pool, cfg); err == nil {
			pr.proc, err = pr.ff.NewProcess(runCtx, po)
		}
		if err != nil {
			pool.Close()
			return nil, fmt.Errorf("bench: %s: %w", name, err)
		}
		pr.rc, pr.client = pr.proc.Config(), pr.proc.Client()
		return pr, nil
	}
	if p.sched, err = build("ffscheduler", schedulerScanWorkers, schedulerApplyWorker,
		int32(schedulerScanWorkers+schedulerApplyWorker+8), true); err != nil {
		return p, err
	}
	if p.work, err = build("ffworker", workerScanWorkers, o.ApplyWorkers,
		ffriver.PoolConnsWithLanes(workerScanWorkers, o.ApplyWorkers, o.GroupLanes), false); err != nil { // ffworker's pool size
		return p, err
	}
	for _, pr := range []*proc{p.sched, p.work} {
		if err := pr.proc.Start(); err != nil {
			return p, fmt.Errorf("bench: starting the %s: %w", pr.name, err)
		}
	}
	return p, nil
}

// stop stops both clients (waiting for running jobs) and closes their pools.
func (p *pipeline) stop() {
	for _, pr := range []*proc{p.work, p.sched} {
		if pr != nil && pr.proc != nil {
			_ = pr.proc.Stop()
		}
	}
	p.cancel()
	for _, pr := range []*proc{p.work, p.sched} {
		if pr != nil {
			pr.pool.Close()
		}
	}
}

// describe says how the two processes are configured.
func (p *pipeline) describe() string {
	q := func(pr *proc) string {
		s := ""
		for _, name := range slices.Sorted(maps.Keys(pr.rc.Queues)) {
			qc := pr.rc.Queues[name]
			if s != "" {
				s += ", "
			}
			fc, fp := cmp.Or(qc.FetchCooldown, pr.rc.FetchCooldown, river.FetchCooldownDefault), cmp.Or(qc.FetchPollInterval, pr.rc.FetchPollInterval, river.FetchPollIntervalDefault)
			s += fmt.Sprintf("%s ×%d (fetch cooldown %s, poll %s)", name, qc.MaxWorkers, fc, fp)
		}
		return s
	}
	wake := "wake loop on"
	if p.sched.proc != nil && p.sched.wakeOff {
		wake = "wake loop off"
	}
	return "ffscheduler: " + q(p.sched) + ", " + wake + "; ffworker: " + q(p.work)
}

// awaitTick waits until a tick of scanner has been worked to completion
// (the scheduler leads and the pipeline is warm).
func awaitTick(ctx context.Context, pool *pgxpool.Pool, scanner string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'ff.tick' AND state = 'completed'
			AND args->>'scanner' = $1`, scanner).Scan(&n); err != nil {
			return err
		}
		if n > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("bench: no tick of " + scanner + " completed: the pipeline does not run")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}
