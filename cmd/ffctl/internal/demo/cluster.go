package demo

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/ffriver/ffriver"
	"github.com/ffriver/ffriver/cmd/internal/ffview"
	"github.com/ffriver/ffriver/cmd/internal/uiserver"
	"github.com/ffriver/ffriver/internal/pipeline"
	"github.com/ffriver/ffriver/scanners"
	"github.com/ffriver/ffriver/workers"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
)

// process is one River client with its own pool, as one ffscheduler or
// ffworker process would run it.
type process struct {
	name   string
	pool   *pgxpool.Pool
	ff     *ffriver.Service
	client *river.Client[pgx.Tx]
}

// cluster is the demo's deployment: a scheduler, two workers and River UI.
type cluster struct {
	scheduler *process
	workers   []*process
	settings  map[string]workers.Settings
	uiURL     string
	viewURL   string
	ui        *uiserver.Server
	cancelRun context.CancelFunc
	// stopCtx ends Process.Run of every process; running waits for them.
	stopCtx   context.Context
	stopRiver context.CancelFunc
	running   sync.WaitGroup
	// failed receives a client that stopped by itself.
	failed chan error

	stopOnce sync.Once
}

// scannerSettings are the demo's scanner intervals: fast, so that every
// transition happens within seconds of being due.
func scannerSettings() map[string]workers.Settings {
	return map[string]workers.Settings{
		scanners.AttemptTimeout:       {Interval: ScanInterval},
		scanners.DelayedPromoter:      {Interval: ScanInterval},
		scanners.ExecutionDeadline:    {Interval: ScanInterval},
		scanners.EdgeCancelDispatcher: {Interval: ScanInterval},
		scanners.EdgeCancelReconciler: {Interval: 2 * time.Second},
		scanners.Dependency:           {Interval: 2 * time.Second},
	}
}

// startCluster starts the scheduler (with River UI) and two workers. On
// error whatever was started is stopped.
func (d *demo) startCluster(ctx context.Context) (c *cluster, err error) {
	runCtx, cancelRun := context.WithCancel(context.WithoutCancel(ctx))
	stopCtx, stopRiver := context.WithCancel(context.WithoutCancel(ctx))
	c = &cluster{settings: scannerSettings(), cancelRun: cancelRun, stopCtx: stopCtx, stopRiver: stopRiver, failed: make(chan error, 3)}
	defer func() {
		if err != nil {
			c.stop(context.WithoutCancel(ctx))
		}
	}()
	// The scheduler works the scan queue only, as ffscheduler does by
	// default; the workers work both queues, as ffworker does.
	c.scheduler, err = d.startProcess(ctx, runCtx, c, "scheduler", 2, 0, true)
	if err != nil {
		return c, err
	}
	if d.opts.UIAddr != "" {
		if err := c.startUI(runCtx, d.opts.UIAddr, d.opts.UIFallback, d.opts.RiverLogger); err != nil {
			return c, err
		}
	}
	for i := range 2 {
		p, err := d.startProcess(ctx, runCtx, c, fmt.Sprintf("worker-%d", i+1), 2, 4, false)
		if err != nil {
			return c, err
		}
		c.workers = append(c.workers, p)
	}
	return c, nil
}

// startProcess builds one process exactly as the binaries do (ffriver's
// run path: Service, waker, River client) and starts it.
func (d *demo) startProcess(ctx, runCtx context.Context, c *cluster, name string, scan, apply int, scheduler bool) (*process, error) {
	pool, err := d.openPool(ctx, "ffctl demo "+name, int32(scan+apply+4))
	if err != nil {
		return nil, err
	}
	f, err := ffriver.New(ctx, pool, ffriver.Config{Schema: string(d.schema), Scanners: c.settings, Logger: d.opts.RiverLogger,
		MeterProvider: d.opts.MeterProvider, TracerProvider: d.opts.TracerProvider})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	role := ffriver.Worker
	if scheduler {
		role = ffriver.Scheduler
	}
	p, err := f.NewProcess(runCtx, ffriver.ProcessOptions{Role: role, ShutdownTimeout: 15 * time.Second,
		Client: ffriver.ClientOptions{ScanWorkers: scan, ApplyWorkers: apply, ID: "ffdemo-" + name, Logger: d.opts.RiverLogger.With("client", name)}})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	// As the binaries do: run until stopped, then stop gracefully.
	c.running.Go(func() {
		if err := p.Run(c.stopCtx, nil); err != nil {
			c.failed <- fmt.Errorf("%s: %w", name, err)
		}
	})
	return &process{name: name, pool: pool, ff: f, client: p.Client()}, nil
}

// startUI serves River UI of the scheduler's client on addr, a loopback
// address (River UI can cancel and delete jobs, and the demo serves it
// without credentials). With fallback, a taken addr falls back to a free
// loopback port.
func (c *cluster) startUI(ctx context.Context, addr string, fallback bool, logger *slog.Logger) error {
	if !uiserver.IsLoopback(addr) {
		return fmt.Errorf("river UI: %s is not a loopback address; the demo serves River UI without credentials, on loopback only", addr)
	}
	view, err := ffview.New(c.scheduler.ff.Store(), ffview.Options{Logger: logger, Pipeline: pipeline.Of(c.scheduler.ff)})
	if err != nil {
		return err
	}
	srv, err := uiserver.Start(ctx, c.scheduler.client, uiserver.Options{Addr: addr, Fallback: fallback, View: view, Logger: logger})
	if err != nil {
		return err
	}
	c.ui, c.uiURL, c.viewURL = srv, srv.URL, srv.ViewURL
	return nil
}

// stop stops the UI and the River clients, each waiting up to 15 s for its
// running jobs before cancelling them (a cancelled ffriver job rolls back).
// It is safe to call more than once.
func (c *cluster) stop(ctx context.Context) {
	c.stopOnce.Do(func() {
		c.ui.Shutdown()
		c.stopRiver()
		c.running.Wait()
		c.cancelRun()
	})
}

// scannerLine describes the scanners and their intervals.
func (c *cluster) scannerLine() string {
	var parts []string
	p := pipeline.Of(c.scheduler.ff)
	for _, name := range p.ScannerNames() {
		st, _ := p.Settings(name)
		parts = append(parts, fmt.Sprintf("%s %s", name, st.Interval))
	}
	return wrap(strings.Join(parts, ", "), 90, "              ")
}

// wrap breaks s after commas so that lines stay under width, indenting the
// continuation lines.
func wrap(s string, width int, indent string) string {
	var b strings.Builder
	line := 0
	for i, part := range strings.Split(s, ", ") {
		if i > 0 {
			if line+len(part)+2 > width {
				b.WriteString(",\n" + indent)
				line = 0
			} else {
				b.WriteString(", ")
				line += 2
			}
		}
		b.WriteString(part)
		line += len(part)
	}
	return b.String()
}
