// Package demo runs `ffctl demo`: a live ffriver deployment and workload in a
// scratch schema of a local database, watched through the outbox streams and
// River UI, ending with a summary.
//
// Run creates and migrates a fresh schema, then starts in this process what
// a deployment runs as separate processes, each on its own connection pool
// and built exactly as the binaries build theirs
// (ffriver.SchedulerConfig and WorkerConfig):
//
//   - one scheduler: River's leader, inserting every scanner's periodic
//     ticks, working partition scans, serving River UI;
//   - two workers: the per-item actions (expire an attempt, promote a
//     delayed execution, expire a deadline, cancel siblings, …);
//   - simulated application workers that claim, renew, complete, fail and
//     delay executions of several lanes and namespaces, and now and then
//     crash (stop renewing), so leases expire; a peer reclaims some expired
//     leases before the scanner gets to them, and an operator revokes some;
//   - flows: an any-of and a quorum group that cancel their remaining
//     siblings once satisfied, and an all-of group that becomes impossible
//     and skips its downstream (and the downstream's own downstream).
//
// Lease TTLs are 2 s and the scanners tick every 250 ms, so every lease event
// type (acquired, renewed, expired, reclaimed, revoked) and every completion
// outcome (success, failed, expired, cancelled, skipped) shows up within
// seconds. Every count the demo shows comes from the real streams
// (subscribe.Leases and subscribe.Completions, from the beginning of the
// schema's outbox), the scanners' own due queries, and River's job table;
// nothing is counted on the side.
//
// At the end the workload stops, the River clients stop gracefully, the
// streams catch up with everything committed, the summary is printed and the
// schema is dropped (unless kept).
package demo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/migrations"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Defaults of Options.
const (
	// DefaultDuration is how long the workload runs.
	DefaultDuration = 60 * time.Second
	// DefaultGrace is how much longer the demo runs, at most, while an event
	// type the workload guarantees has not been seen yet.
	DefaultGrace = 15 * time.Second
	// DefaultUIAddr is where River UI is served when it is free.
	DefaultUIAddr = "127.0.0.1:8080"
	// LeaseTTL of the simulated workers' leases.
	LeaseTTL = 2 * time.Second
	// ScanInterval of the attempt_timeout, delayed_promoter,
	// execution_deadline and edge_cancel_dispatcher scanners.
	ScanInterval = 250 * time.Millisecond
	// SchemaPrefix starts the name of every demo schema.
	SchemaPrefix = "ffdemo_"
)

// Options configure Run.
type Options struct {
	// PoolConfig is the connection configuration of the database. Run
	// copies it for each of its pools and points their search_path at
	// Schema.
	PoolConfig *pgxpool.Config
	// Schema to create; it must not exist. Default: NewSchemaName().
	Schema string
	// Duration of the workload (default DefaultDuration).
	Duration time.Duration
	// Grace is how long the demo keeps going past Duration while a
	// guaranteed event type is still missing (default DefaultGrace;
	// negative: none).
	Grace time.Duration
	// Keep leaves the schema in place at the end.
	Keep bool
	// UIAddr is where River UI listens: a loopback host:port; "" or "off"
	// serves no UI.
	UIAddr string
	// UIFallback listens on a free loopback port when UIAddr is taken.
	UIFallback bool
	// Out receives the introduction, the live view and the summary.
	Out io.Writer
	// Terminal redraws the live view in place (ANSI escapes); otherwise
	// one compact line is printed per second.
	Terminal bool
	// Logger receives the demo's warnings (default: discard).
	Logger *slog.Logger
	// RiverLogger is given to the River clients, River UI and the streams
	// (default: Logger).
	RiverLogger *slog.Logger
	// Target describes the database in the introduction (a redacted URL).
	Target string
	// KeepURL is the database URL the commands printed for a kept schema
	// export as DATABASE_URL, so that they look at the database the demo
	// ran on ("": they keep the shell's connection settings). Its password,
	// if any, is best left out or redacted.
	KeepURL string
	// MeterProvider and TracerProvider, when set, receive the metrics and
	// spans of the demo's processes and streams (ffctl demo
	// --metrics-addr).
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
}

// Summary is what a demo run saw.
type Summary struct {
	Schema string
	// Elapsed is how long the workload ran.
	Elapsed time.Duration
	// Interrupted: the context was cancelled before the duration was up.
	Interrupted bool
	// UIURL where River UI was served ("" if it was not).
	UIURL string
	// ViewURL is the execution view's page of executions, served beside
	// River UI ("" if it was not).
	ViewURL string
	// Final counts of the streams, the scanners and the executions.
	Snapshot Snapshot
	// Missing are the guaranteed event types never seen ("lease reclaimed",
	// "completion skipped", …).
	Missing []string
	// Dropped: the schema was dropped at the end.
	Dropped bool
}

// NewSchemaName returns a fresh demo schema name, ffdemo_ and 12 hex digits.
func NewSchemaName() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return SchemaPrefix + hex.EncodeToString(b[:])
}

func (o *Options) defaults() error {
	if o.PoolConfig == nil {
		return errors.New("demo: no pool config")
	}
	if o.Schema == "" {
		o.Schema = NewSchemaName()
	}
	if _, err := dbutil.ParseSchema(o.Schema); err != nil {
		return err
	}
	if o.Duration <= 0 {
		o.Duration = DefaultDuration
	}
	if o.Grace == 0 {
		o.Grace = DefaultGrace
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.RiverLogger == nil {
		o.RiverLogger = o.Logger
	}
	if o.UIAddr == "off" {
		o.UIAddr = ""
	}
	return nil
}

// Run runs the demo until opts.Duration is up (plus the grace for missing
// event types) or ctx is cancelled, prints the summary and cleans up. A
// cancelled ctx ends the demo early; it is not an error. The schema is
// dropped on every path that created it, unless opts.Keep.
func Run(ctx context.Context, opts Options) (*Summary, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	d := &demo{opts: opts, out: opts.Out, log: opts.Logger, schema: dbutil.Schema(opts.Schema)}
	// Cleanup must run even when ctx is cancelled (Ctrl-C).
	bg := context.WithoutCancel(ctx)
	defer d.closePools()

	admin, err := d.openPool(ctx, "ffctl demo", 4)
	if err != nil {
		return nil, err
	}
	d.admin = admin
	sum := &Summary{Schema: opts.Schema}
	runErr := d.createSchema(ctx)
	if runErr == nil {
		runErr = d.run(ctx, sum)
	}
	if dropErr := d.finish(bg, sum); dropErr != nil {
		runErr = errors.Join(runErr, dropErr)
	}
	return sum, runErr
}

// demo is one run.
type demo struct {
	opts   Options
	out    io.Writer
	log    *slog.Logger
	schema dbutil.Schema
	admin  *pgxpool.Pool

	mu      sync.Mutex
	pools   []*pgxpool.Pool
	created bool
}

// openPool opens a pool on the demo schema and checks that it answers.
func (d *demo) openPool(ctx context.Context, app string, maxConns int32) (*pgxpool.Pool, error) {
	cfg := d.opts.PoolConfig.Copy()
	cfg.ConnConfig.RuntimeParams["search_path"] = d.schema.Ident()
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	cfg.MaxConns = maxConns
	cfg.MinConns = 0
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, dbutil.MapErr(err, "connecting")
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, dbutil.MapErr(err, "connecting")
	}
	d.mu.Lock()
	d.pools = append(d.pools, pool)
	d.mu.Unlock()
	return pool, nil
}

func (d *demo) closePools() {
	d.mu.Lock()
	pools := d.pools
	d.pools = nil
	d.mu.Unlock()
	for i := len(pools) - 1; i >= 0; i-- {
		pools[i].Close()
	}
}

// createSchema creates the schema (failing if it exists: the demo never
// touches, let alone drops, a schema it did not create) and migrates it.
func (d *demo) createSchema(ctx context.Context) error {
	if _, err := d.admin.Exec(ctx, "CREATE SCHEMA "+d.schema.Ident()); err != nil {
		return dbutil.MapErr(err, "creating schema "+string(d.schema))
	}
	d.created = true
	start := time.Now()
	res, err := migrations.Migrate(ctx, d.admin, string(d.schema), &migrations.Options{Partitions: ff.DefaultPartitions,
		// A River of its own, whatever River the search_path shows.
		RiverSchema: string(d.schema)})
	if err != nil {
		return fmt.Errorf("migrating schema %s: %w", d.schema, err)
	}
	fmt.Fprintf(d.out, "ffctl demo: a live ffriver deployment and workload on %s\n\n", d.opts.Target)
	fmt.Fprintf(d.out, "  schema      %s: created and migrated (River's and ffriver's migrations, %d partitions) in %s\n",
		d.schema, int(res.Partitions), time.Since(start).Round(10*time.Millisecond))
	return nil
}

// finish drops the schema unless kept, and says how to look at a kept one.
func (d *demo) finish(ctx context.Context, sum *Summary) error {
	if !d.created {
		return nil
	}
	// Everything but the admin pool holds connections that could sit on the
	// schema's tables.
	d.mu.Lock()
	var others []*pgxpool.Pool
	for _, p := range d.pools {
		if p != d.admin {
			others = append(others, p)
		}
	}
	d.mu.Unlock()
	for _, p := range others {
		p.Close()
	}
	if d.opts.Keep {
		// Written to be pasted from the repository's root into a new shell:
		// make demo builds bin/ffctl only and sets DATABASE_URL for itself.
		fmt.Fprintf(d.out, "\nThe schema %s is kept. To look at it, from the repository's root:\n", d.schema)
		if d.opts.KeepURL != "" {
			fmt.Fprintf(d.out, "  export DATABASE_URL=%s   # the database this demo ran on\n", shellQuote(d.opts.KeepURL))
		} else {
			fmt.Fprintf(d.out, "  # with the connection settings (PG* variables) this demo ran with\n")
		}
		fmt.Fprintf(d.out, "  make build\n")
		fmt.Fprintf(d.out, "  bin/ffctl status --schema %s\n", d.schema)
		fmt.Fprintf(d.out, "  bin/ffctl tail --schema %s --stream completions --from-start --idle-exit 2s\n", d.schema)
		fmt.Fprintf(d.out, "  bin/ffscheduler --schema %s --apply-concurrency 4   # River UI on 127.0.0.1:8080; Ctrl-C stops it\n", d.schema)
		fmt.Fprintf(d.out, "  psql \"$DATABASE_URL\" -c 'SELECT public_state, count(*) FROM %s.ff_exec_core GROUP BY 1'\n", d.schema.Ident())
		fmt.Fprintf(d.out, "and to drop it: psql \"$DATABASE_URL\" -c 'DROP SCHEMA %s CASCADE'\n", d.schema.Ident())
		return nil
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := d.admin.Exec(dctx, "DROP SCHEMA "+d.schema.Ident()+" CASCADE"); err != nil {
		return fmt.Errorf("dropping schema %s (drop it with DROP SCHEMA %s CASCADE): %w", d.schema, d.schema.Ident(),
			dbutil.MapErr(err, "drop schema"))
	}
	sum.Dropped = true
	fmt.Fprintf(d.out, "\nSchema %s dropped (pass --keep to keep it).\n", d.schema)
	return nil
}

// run starts the deployment, the streams and the workload, shows the live
// view until the time is up, stops everything in order and prints the
// summary.
func (d *demo) run(ctx context.Context, sum *Summary) error {
	c, err := d.startCluster(ctx)
	if err != nil {
		return err
	}
	// Stopping River waits for running jobs; bounded and independent of ctx.
	defer c.stop(context.WithoutCancel(ctx))
	sum.UIURL, sum.ViewURL = c.uiURL, c.viewURL

	w, err := newWatcher(ctx, d, c)
	if err != nil {
		return err
	}
	defer w.close()

	wlPool, err := d.openPool(ctx, "ffctl demo workload", appWorkers+2)
	if err != nil {
		return err
	}
	wl, err := newWorkload(ctx, c.scheduler.ff.Store(), wlPool, d.log)
	if err != nil {
		return err
	}
	d.intro(c, wl)

	wlCtx, stopWorkload := context.WithCancel(context.WithoutCancel(ctx))
	wlDone := make(chan struct{})
	go func() {
		defer close(wlDone)
		wl.run(wlCtx)
	}()
	stopWL := func() {
		stopWorkload()
		<-wlDone
	}
	defer stopWL()

	start := time.Now()
	view := newView(d.out, d.opts.Terminal, string(d.schema), c.uiURL, d.opts.Duration)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	deadline := start.Add(d.opts.Duration)
	graceEnd := deadline.Add(max(d.opts.Grace, 0))
	waitingSaid := false
loop:
	for {
		select {
		case <-ctx.Done():
			sum.Interrupted = true
			break loop
		case err := <-w.failed:
			return err
		case err := <-c.failed:
			return err
		case <-tick.C:
		}
		snap, err := w.snapshot(ctx)
		if err != nil {
			if ctx.Err() != nil {
				sum.Interrupted = true
				break loop
			}
			d.log.Warn("reading the demo's state", "error", err)
			continue
		}
		snap.Workload = wl.stats()
		view.draw(snap, time.Since(start))
		now := time.Now()
		if now.Before(deadline) {
			continue
		}
		missing := snap.Missing()
		if len(missing) == 0 || !now.Before(graceEnd) {
			break loop
		}
		if !waitingSaid {
			waitingSaid = true
			view.note(fmt.Sprintf("time is up, but not seen yet: %s; waiting up to %s more", strings.Join(missing, ", "), d.opts.Grace))
		}
	}
	sum.Elapsed = time.Since(start).Round(time.Second / 10)
	view.end()

	if sum.Interrupted {
		fmt.Fprintf(d.out, "\nInterrupted after %s: stopping (Ctrl-C again kills the demo and leaves the schema behind).\n", sum.Elapsed)
	}
	fmt.Fprintf(d.out, "\nStopping: the simulated workers, then the River clients (waiting for running jobs), then the streams catch up.\n")
	stopWL()
	c.stop(context.WithoutCancel(ctx))
	drainCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := w.drain(drainCtx); err != nil {
		d.log.Warn("the streams did not catch up with the outbox; the summary may miss the last events", "error", err)
	}
	snap, err := w.snapshot(drainCtx)
	if err != nil {
		return fmt.Errorf("reading the final state: %w", err)
	}
	snap.Workload = wl.stats()
	sum.Snapshot = *snap
	sum.Missing = snap.Missing()
	writeSummary(d.out, sum)
	return nil
}

// intro prints what runs and where.
func (d *demo) intro(c *cluster, wl *workload) {
	ui := "not served (--ui-addr off)"
	if c.uiURL != "" {
		ui = c.uiURL
	}
	fmt.Fprintf(d.out, "  processes   1 scheduler (River leader: ticks, scans, River UI) and 2 workers (per-item actions),\n")
	fmt.Fprintf(d.out, "              River clients in this process, each on its own pool, configured as ffscheduler and ffworker\n")
	fmt.Fprintf(d.out, "  scanners    %s\n", c.scannerLine())
	fmt.Fprintf(d.out, "  workload    %s\n", wl.describe())
	fmt.Fprintf(d.out, "  streams     subscribe.Leases and subscribe.Completions from the beginning of the outbox\n")
	fmt.Fprintf(d.out, "  River UI    %s\n", ui)
	if c.viewURL != "" {
		fmt.Fprintf(d.out, "  executions  %s   (the execution view: timelines, flows, cancel and revoke)\n", c.viewURL)
	}
	fmt.Fprintf(d.out, "  duration    %s (Ctrl-C ends it early)\n\n", d.opts.Duration)
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
