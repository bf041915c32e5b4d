// Package ffriver keeps a FlowFabric-style execution store healthy on top of
// River: it expires timed-out attempts, promotes delayed executions, expires
// deadlines, dispatches and reconciles sibling cancels, dispatches
// undispatched flow completions, and trims the outbox, each as a River
// pipeline of periodic ticks, partition scans and per-item transactional
// jobs. Package workers is River's side (the pipeline, the item
// transaction) and the plug-in API (a scanner and its item kinds); package
// scanners holds the built-in plug-ins; package executions holds the
// application's API and the transitions.
//
// Two ways to run it:
//
//   - The binaries: ffscheduler (the one leader-eligible River client: ticks,
//     River's maintenance, River UI) and any number of ffworker processes.
//     Both, ffctl demo and ffctl bench run through Run (or NewProcess,
//     Process.Start and Process.Run): the one path that starts the outbox
//     waker, the tick watchdog and River, and stops gracefully.
//   - Embedded in an application that already runs River: New, then
//     AddWorkers, PeriodicJobs and Queues merged into the application's own
//     river.Config (or Configure, which does the three and checks River's
//     schema against Config.RiverSchema), then Attach (the outbox waker,
//     the tick watchdog, the item metrics) before the client starts, and
//     CheckTicks for a health endpoint. The guarantees are
//     the binaries': ffriver's jobs use their own queues (ff_scan, ff_apply),
//     never River's "default", and every item action commits its transition
//     and its outbox rows in one transaction (River completes the job after
//     it, with its batch completer).
//
// A process that leaves Config.RiverSchema unset follows the ticks: New,
// Attach and the tick watchdog use the River this schema's ff.tick jobs
// are inserted into (or the client's), so a process that only uses the
// Store, or one set up by hand, enqueues its flow hops where the workers
// fetch; a RiverSchema that contradicts them is refused. The Service's
// warnings go to slog.Default() unless Config.Logger is set.
//
// When embedding, register ffriver's workers on every River client that can
// become leader (River's rescuer discards stuck jobs of kinds its leader
// does not know) and give the periodic jobs to each of them: while a
// leader without them leads (an old process of a rolling deploy), nothing
// is scanned, which CheckTicks and the watchdog report; clients that
// only work some queues should set FetchOnlyKnownKinds. A job of ffriver's
// whose process died mid-job is re-queued by ff.rescue, a periodic job of
// the leader, a second after its job timeout (Config.JobTimeout, 30 s): an
// item held by a dead process is redone within about 31 s, whatever River's
// RescueStuckJobsAfter (which still governs the application's own jobs).
//
// Before New, migrate the schema: migrations.Migrate from Go (River's
// migrations, through rivermigrate, then ffriver's), or the binaries'
// ffctl migrate. New refuses a schema that is not migrated
// (ff.ErrNotMigrated, naming the schema and its database).
package ffriver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/actions"
	"github.com/ffriver/ffriver/internal/apply"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/internal/jobopts"
	"github.com/ffriver/ffriver/internal/pipeline"
	"github.com/ffriver/ffriver/jobs"
	"github.com/ffriver/ffriver/migrations"
	"github.com/ffriver/ffriver/outbox"
	"github.com/ffriver/ffriver/scanners"
	"github.com/ffriver/ffriver/workers"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/riverqueue/rivercontrib/otelriver"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// Config configures ffriver's pipeline. The zero value (plus a migrated
// schema on the pool's search_path) runs every built-in scanner with its
// defaults.
type Config struct {
	// Schema of ffriver's tables ("" = the pool's search_path). River's
	// own tables may live elsewhere: a host's River client keeps its schema.
	Schema string
	// Partitions expected; 0 accepts the schema's recorded count, anything
	// else must equal it (New fails with ff.ErrNotMigrated otherwise).
	Partitions ff.Partitions
	// Filter restricts the scans this process schedules to one namespace
	// and/or instance tag. It travels in the tick and scan job args and
	// selects the queue names (Service.Queues), so workers
	// with the same filter work exactly these jobs.
	Filter ff.Filter
	// Scanners overrides settings by scanner name; zero fields keep the
	// defaults (workers.Settings says which), workers.NoSweep turns a
	// scanner's scan cursors off. Naming an unregistered scanner is an
	// error. A built-in scanner's interval or batch stored in the schema
	// (ffctl config set attempt_timeout.interval) wins over its override.
	Scanners map[string]workers.Settings
	// Plugins are scanners of your own with their item kinds, registered
	// after the built-ins exactly as they are (scanners.Builtins).
	Plugins []workers.Plugin
	// NoBuiltins leaves the built-in scanners out (only Plugins run).
	NoBuiltins bool
	// OutboxRetention of the outbox_retention scanner: events older than
	// this are deleted. 0 means scanners.DefaultOutboxRetention (7 days);
	// negative is an error. To keep every event, disable the scanner
	// (Scanners: {scanners.OutboxRetention: {Disabled: true}}). A value
	// stored in the schema (ffctl config set outbox_retention, SetSetting)
	// wins over it, and the scanner's ticks read that when they run.
	OutboxRetention time.Duration
	// ExecutionRetention of the execution_retention scanner: terminal
	// executions older than this are removed, with their attempts (a flow
	// only when every member is, then whole). 0 means
	// scanners.DefaultExecutionRetention (7 days, as the outbox's, so a
	// completion event's execution can be read as long as the event);
	// KeepExecutions keeps them forever; any other negative value is an
	// error. Events are not removed with their execution (OutboxRetention
	// governs them), so they may outlive it. A value stored in the schema
	// (ffctl config set execution_retention) wins over it, as over
	// OutboxRetention.
	ExecutionRetention time.Duration
	// StoreSettings makes New store, in the schema, each setting this
	// Config sets explicitly (a non-zero OutboxRetention,
	// ExecutionRetention, or Interval or Batch of a built-in scanner in
	// Scanners) that the schema does not hold yet; ffscheduler sets it.
	// Whether or not it is set, a stored setting wins over Config, with a
	// warning where they disagree (see KnownSettings and the rule in
	// settings.go).
	StoreSettings bool
	// SettingsSetBy is what the settings StoreSettings stores record as
	// who set them (default: the host and process id).
	SettingsSetBy string
	// JobTimeout of ffriver's jobs. 0 means the default, 30 s; negative is an error (a job without a timeout would defeat
	// ff.rescue, which presumes a job running past it dead).
	JobTimeout time.Duration
	// GroupSize is the most item jobs of one grouped kind (the built-in
	// expire, promote and deadline) a process applies in one transaction;
	// 1 applies every item alone. 0 means the default, 64 (a
	// group of none means nothing); negative is an error.
	GroupSize int
	// GroupLanes is how many such group transactions per kind a process
	// runs at once. 0 means the machine's: DefaultGroupLanes
	// (runtime.GOMAXPROCS/2, at least 2, at most 32), bounded by the pool
	// New is given (defaults.go); negative is an error.
	GroupLanes int
	// Clock for every *_ms timestamp (default ff.SystemClock).
	Clock ff.Clock
	// Logger for ffriver's warnings. When it is nil, the Service's own
	// warnings (which River schema New, Configure or Attach settled on,
	// the tick watchdog's, the stored settings New applied or stored) go
	// to slog.Default(), and the pipeline's jobs' logs are discarded.
	Logger *slog.Logger
	// Waker is poked after each commit that wrote outbox events, so stream
	// readers wake early; the caller runs it. nil: New makes one on the
	// pool, which every Process of the Service runs (an embedding host that
	// runs no Process may run Store().Waker() itself; otherwise readers
	// poll).
	Waker *outbox.Waker
	// RiverSchema holds River's tables: New verifies River's migrations
	// there, the flow cascade inserts its ff.advance jobs there, and the
	// processes' River clients (SchedulerConfig, WorkerConfig), LastTick,
	// CheckTicks and WatchTicks use it. Set it when River's tables live in
	// another schema than ffriver's (an application's own River).
	//
	// Left empty it is Schema (the single-schema layout of ffctl migrate),
	// and Configure takes the schema of the River config it configures
	// instead when that differs: ffriver's jobs go where that client works.
	// Set, a client whose river.Config.Schema names another schema is
	// refused by Configure.
	RiverSchema string
	// MeterProvider receives ffriver's instruments (item
	// outcomes and durations, the scanners' backlog from the ticks) and,
	// on the processes' River clients (SchedulerConfig, WorkerConfig),
	// River's own through otelriver. nil: no metrics. ffriver never
	// installs or reads a global provider. Build an SDK provider with
	// sdkmetric.WithView(metricviews.Views()...): otelriver labels each
	// job's metrics with its River tags, which name every partition and
	// namespace of ffriver's items, and the view drops them.
	MeterProvider metric.MeterProvider
	// TracerProvider receives a span per item job (scanner, execution id,
	// outcome) and, on the processes' River clients, River's own spans
	// through otelriver. nil: no spans.
	TracerProvider trace.TracerProvider
}

// Service is ffriver's pipeline configured on a verified schema, with the
// store it acts on. It is safe for concurrent use once built.
type Service struct {
	ownWaker      bool // the Waker is New's: every Process runs it
	riverExplicit bool // Config.RiverSchema was set
	// riverSchema is resolved; Configure may take the host client's.
	riverSchema atomic.Pointer[string]
	// pathRiver is what a River client with Config.Schema "" uses on the
	// pool: the schema of the search_path's river_job, else
	// current_schema().
	pathRiver string
	cascade   *cascade
	created   time.Time
	logger    *slog.Logger
	store     *executions.Store
	pipeline  *pipeline.Pipeline
	periodic  []*river.PeriodicJob
	meters    metric.MeterProvider
	tracers   trace.TracerProvider
	// outboxRetention and executionRetention are Config's after the
	// stored settings (0: the default).
	outboxRetention, executionRetention time.Duration
	// groupLanes is the apply engine's lanes per kind (Config.GroupLanes,
	// else the machine's and the pool's).
	groupLanes int
}

// OutboxRetention is the outbox retention the Service was built with: the
// one stored in the schema (ffctl config set outbox_retention), else
// Config.OutboxRetention, else scanners.DefaultOutboxRetention. The
// outbox_retention ticks read the stored one again when they run.
func (f *Service) OutboxRetention() time.Duration {
	if f.outboxRetention == 0 {
		return scanners.DefaultOutboxRetention
	}
	return f.outboxRetention
}

// GroupLanes is the group transactions per kind the Service's apply engine
// runs at once: Config.GroupLanes, else the machine's and the pool's
// (DefaultGroupLanes, bounded by the pool New was given).
func (f *Service) GroupLanes() int { return f.groupLanes }

// ExecutionRetention is the execution retention the Service was built
// with, as OutboxRetention is (KeepExecutions: forever).
func (f *Service) ExecutionRetention() time.Duration {
	if f.executionRetention == 0 {
		return scanners.DefaultExecutionRetention
	}
	return f.executionRetention
}

// Verify checks that schema is migrated (River's and ffriver's migrations)
// and, with partitions non-zero, that it has that partition count. It
// returns the schema's partition count; errors match ff.ErrNotMigrated.
func Verify(ctx context.Context, pool *pgxpool.Pool, schema string, partitions ff.Partitions) (ff.Partitions, error) {
	return migrations.Verify(ctx, pool, schema, partitions)
}

// New verifies the schema and builds the pipeline: the built-in scanners
// (unless NoBuiltins), then cfg.Plugins, with cfg.Scanners applied.
func New(ctx context.Context, pool *pgxpool.Pool, cfg Config) (*Service, error) {
	riverSchema := cfg.RiverSchema
	if riverSchema == "" {
		riverSchema = cfg.Schema
	}
	rs, err := dbutil.ParseSchema(riverSchema)
	if err != nil {
		return nil, err
	}
	// A schema that was named and is missing is said so, in these words,
	// before anything looks on the search_path (which the binaries set to
	// --schema): the search_path's wording would read as if the name had
	// been ignored (issue 40).
	for _, name := range []string{cfg.Schema, cfg.RiverSchema} {
		s, err := dbutil.ParseSchema(name)
		if err != nil {
			return nil, err
		}
		if err := s.CheckExists(ctx, pool); err != nil {
			return nil, err
		}
		if cfg.RiverSchema == cfg.Schema {
			break
		}
	}
	if rs, err = rs.Resolve(ctx, pool); err != nil {
		return nil, err
	}
	riverSchema = string(rs)
	pathRiver, ok, err := migrations.FindRiver(ctx, pool)
	if err != nil {
		return nil, err
	}
	if !ok {
		cur, err := dbutil.Schema("").Resolve(ctx, pool)
		if err != nil {
			return nil, err
		}
		pathRiver = string(cur)
	}
	cascade, err := newCascade(riverSchema, cfg.Filter)
	if err != nil {
		return nil, err
	}
	waker := cfg.Waker
	if waker == nil {
		s, err := dbutil.ParseSchema(cfg.Schema)
		if err != nil {
			return nil, err
		}
		if s, err = s.Resolve(ctx, pool); err != nil {
			return nil, err
		}
		waker = outbox.NewWaker(pool, string(s), 0, cfg.Logger)
	}
	store, err := executions.Open(ctx, pool, executions.Config{Schema: cfg.Schema, Partitions: cfg.Partitions, Clock: cfg.Clock,
		Waker: waker, Cascader: cascade, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	// River's tables are checked here, where River is used, in their own
	// schema.
	if err := migrations.VerifyRiverFor(ctx, pool, cfg.Schema, riverSchema); err != nil {
		return nil, err
	}
	if cfg.OutboxRetention < 0 {
		return nil, ff.Validationf("outbox_retention", "%s is negative: 0 means the default %s; disable the outbox_retention scanner to keep every event",
			cfg.OutboxRetention, scanners.DefaultOutboxRetention)
	}
	if cfg.ExecutionRetention < 0 && cfg.ExecutionRetention != KeepExecutions {
		return nil, ff.Validationf("execution_retention", "%s is negative: 0 means the default %s, KeepExecutions (-1) keeps terminal executions forever",
			cfg.ExecutionRetention, scanners.DefaultExecutionRetention)
	}
	if cfg.JobTimeout < 0 {
		return nil, ff.Validationf("job_timeout", "%s is negative: 0 means the default %s", cfg.JobTimeout, apply.DefaultJobTimeout)
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	// The settings every process of the schema must agree on: the stored
	// ones win over cfg (settings.go).
	if cfg, err = applySettings(ctx, pool, dbutil.Schema(store.Schema()), cfg, logger); err != nil {
		return nil, err
	}
	var plugins []workers.Plugin
	if !cfg.NoBuiltins {
		plugins = scanners.Builtins(scanners.BuiltinOptions{OutboxRetention: cfg.OutboxRetention, ExecutionRetention: cfg.ExecutionRetention})
	}
	plugins = append(plugins, cfg.Plugins...)
	env := pipeline.NewEnv(store, cfg.Logger)
	if cfg.JobTimeout > 0 {
		env.JobTimeout = cfg.JobTimeout
	}
	if cfg.GroupSize < 0 || cfg.GroupLanes < 0 {
		return nil, ff.Validationf("group", "GroupSize %d and GroupLanes %d must not be negative", cfg.GroupSize, cfg.GroupLanes)
	}
	if cfg.GroupSize > 0 {
		env.GroupSize = cfg.GroupSize
	}
	env.GroupLanes = cfg.GroupLanes
	if env.GroupLanes == 0 {
		env.GroupLanes = groupLanes(runtime.GOMAXPROCS(0), pool.Config().MaxConns)
	}
	if cfg.MeterProvider != nil || cfg.TracerProvider != nil {
		if env.Metrics, err = pipeline.NewMetrics(cfg.MeterProvider, cfg.TracerProvider); err != nil {
			return nil, fmt.Errorf("ffriver: metrics: %w", err)
		}
	}
	p, err := pipeline.New(env, plugins, cfg.Filter, cfg.Scanners)
	if err != nil {
		return nil, err
	}
	periodic, err := p.PeriodicJobs()
	if err != nil {
		return nil, err
	}
	f := &Service{outboxRetention: cfg.OutboxRetention, executionRetention: cfg.ExecutionRetention, ownWaker: cfg.Waker == nil, riverExplicit: cfg.RiverSchema != "", pathRiver: pathRiver, cascade: cascade,
		created: time.Now(), logger: logger, store: store, pipeline: p, periodic: periodic,
		meters: cfg.MeterProvider, tracers: cfg.TracerProvider, groupLanes: env.GroupLanes}
	f.riverSchema.Store(&riverSchema)
	if err := f.followTicks(ctx, cfg.Schema); err != nil {
		return nil, err
	}
	return f, nil
}

// followTicks makes the Service use the River its ticks go to. A process
// that only uses the Store (an API beside the workers) never configures a
// River client, and with RiverSchema forgotten its flow hops went into an
// unused River in ffriver's schema, never fetched, until the dependency
// sweep (19.2 s a hop instead of 0.85 s). So New looks where the ticks of
// this pipeline (its scan queue, its schema) were last inserted: with
// Config.RiverSchema unset it takes that River, with a warning; set to
// another River whose river_job has no such tick within
// DefaultTickStaleAfter while that one has, it refuses, naming both.
// Without any tick yet (no leader with ffriver has run), there is nothing
// to follow.
func (f *Service) followTicks(ctx context.Context, schema string) error {
	at, age, ok, err := f.newestTick(ctx)
	if err != nil || !ok || at == f.RiverSchema() {
		return err
	}
	if f.riverExplicit {
		if age >= DefaultTickStaleAfter {
			return nil
		}
		mine, seen, err := f.LastTick(ctx, "")
		if err != nil || (seen && mine < DefaultTickStaleAfter) {
			return err
		}
		return ff.Validationf("river_schema", "ffriver.Config.RiverSchema is %q, but this schema's ff.tick jobs are inserted into %q "+
			"(the last %s ago), where ffriver's workers run: set Config.RiverSchema (--river-schema) to %q, or this process's flow "+
			"hops go where no worker fetches", f.RiverSchema(), at, age.Round(time.Millisecond), at)
	}
	if err := migrations.VerifyRiverFor(ctx, f.store.Pool(), schema, at); err != nil {
		return err
	}
	f.logger.WarnContext(ctx, "ffriver: this schema's ff.tick jobs are inserted into another River than Config.RiverSchema's default: "+
		"ffriver uses that one (set ffriver.Config.RiverSchema to it to say so)", "river_schema", at, "last_tick", age.String(),
		"unused", f.RiverSchema())
	return f.useRiver(at)
}

// useRiver makes schema the River of the flow cascade, LastTick, CheckTicks
// and the watchdog.
func (f *Service) useRiver(schema string) error {
	if err := f.cascade.use(schema); err != nil {
		return err
	}
	f.riverSchema.Store(&schema)
	return nil
}

// newestTick returns the River schema holding the newest ff.tick of this
// pipeline (its scan queue, for its schema: jobs.TickArgs.Schema) among
// every river_job of the database the role can read, and its age by the
// database's clock; ok=false when there is none.
//
// It reads the ticks scheduled within DefaultTickStaleAfter first, as
// ranges of River's fetch index (recentTicks), and every tick River keeps
// only when no schema has a recent one (no scheduler runs): River keeps an
// hour of completed ticks, up to 50 a second per timer scanner under load,
// and reading them all through river_job_kind made every process start
// and every ffctl status read them all.
func (f *Service) newestTick(ctx context.Context) (riverSchema string, age time.Duration, ok bool, err error) {
	pool := f.store.Pool()
	rows, err := pool.Query(ctx, `SELECT n.nspname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relname = 'river_job' AND c.relkind IN ('r', 'p') AND has_schema_privilege(n.oid, 'USAGE')
		  AND has_table_privilege(c.oid, 'SELECT') ORDER BY 1`)
	if err != nil {
		return "", 0, false, dbutil.MapErr(err, "looking for River's tables")
	}
	schemas, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", 0, false, dbutil.MapErr(err, "looking for River's tables")
	}
	b, err := json.Marshal(map[string]string{"schema": f.store.Schema()})
	if err != nil {
		return "", 0, false, err
	}
	// The ticks' args as text: a []byte is sent as bytea by a pool that
	// does not prepare its statements (pgx.QueryExecModeExec, ffctl
	// status's), which jsonb refuses.
	args := string(b)
	for _, read := range []struct {
		sql  string
		args []any
	}{
		{newestRecentTickSQL, []any{jobs.KindTick, f.pipeline.ScanQueue(), DefaultTickStaleAfter, args}},
		{newestTickSQL, []any{jobs.KindTick, f.pipeline.ScanQueue(), args}},
	} {
		if riverSchema, age, ok, err = newestTickIn(ctx, pool, schemas, read.sql, read.args); err != nil || ok {
			return riverSchema, age, ok, err
		}
	}
	return "", 0, false, nil
}

// newestRecentTickSQL is the age in ms of the newest tick of kind $1 in
// queue $2 scheduled within $3 whose args hold $4 (recentTicks);
// newestTickSQL that of every such tick, without $3.
const (
	newestRecentTickSQL = `SELECT extract(epoch FROM now() - max(t.created_at)) * 1000 FROM ` + recentTicks + ` WHERE t.args @> $4`
	newestTickSQL       = `SELECT extract(epoch FROM now() - max(t.created_at)) * 1000 FROM ` + allTicks + ` AND t.args @> $3`
)

// newestTickIn runs sql (the age in ms of the newest tick it reads, {S}
// its River schema) with args in each of schemas, and returns the schema
// of the newest tick read and its age; ok=false when none reads any.
func newestTickIn(ctx context.Context, pool *pgxpool.Pool, schemas []string, sql string, args []any) (riverSchema string, age time.Duration, ok bool, err error) {
	best := -1.0
	note := func(s string, ms *float64) {
		if ms != nil && (best < 0 || *ms < best) {
			best, riverSchema = max(*ms, 0), s
		}
	}
	// One round trip; a schema dropped meanwhile fails the batch, and the
	// schemas are then read one by one, skipping the missing.
	b := &pgx.Batch{}
	for _, s := range schemas {
		b.Queue(dbutil.Schema(s).SQL(sql), args...)
	}
	res := pool.SendBatch(ctx, b)
	ages := make([]*float64, len(schemas))
	for i := range schemas {
		if err = res.QueryRow().Scan(&ages[i]); err != nil {
			break
		}
	}
	if cerr := res.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		for i, s := range schemas {
			note(s, ages[i])
		}
	} else {
		if ctx.Err() != nil {
			return "", 0, false, dbutil.MapErr(err, "looking for ff.tick jobs")
		}
		for _, s := range schemas {
			var ms *float64
			if err := pool.QueryRow(ctx, dbutil.Schema(s).SQL(sql), args...).Scan(&ms); err != nil {
				if gone(err) {
					continue
				}
				return "", 0, false, dbutil.MapErr(err, "looking for ff.tick jobs in schema "+s)
			}
			note(s, ms)
		}
	}
	if best < 0 {
		return "", 0, false, nil
	}
	return riverSchema, time.Duration(best * float64(time.Millisecond)), true, nil
}

// gone reports whether err says a table or schema no longer exists (or
// cannot be read), as when a schema is dropped while it is being looked at.
func gone(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "3F000" || pgErr.Code == "42501")
}

// RiverSchema returns the schema of the River tables ffriver uses:
// Config.RiverSchema, else Config.Schema, or the schema Configure took from
// the host's River config.
func (f *Service) RiverSchema() string { return *f.riverSchema.Load() }

// Store returns the execution store the pipeline acts on. Its terminal
// transitions of flow members enqueue their cascade (ff.advance jobs) in
// the same transaction; use it (or a Store whose Cascader is the Service's)
// for the application's own claims and completions.
func (f *Service) Store() *executions.Store { return f.store }

// The binaries read the pipeline (internal/pipeline) of a Service with
// pipeline.Of: none of it is part of the Service's API.
func init() {
	pipeline.SetOfService(func(f *Service) *pipeline.Pipeline { return f.pipeline })
}

// AddWorkers adds every ffriver job kind's worker to workers (River's
// AddWorkerSafely: a kind the host already registered is an error). Call it
// before river.NewClient.
func (f *Service) AddWorkers(workers *river.Workers) error { return f.pipeline.AddWorkers(workers) }

// PeriodicJobs returns the ticks, one per enabled scanner, for
// river.Config.PeriodicJobs of every leader-eligible client.
func (f *Service) PeriodicJobs() []*river.PeriodicJob {
	return append([]*river.PeriodicJob(nil), f.periodic...)
}

// QueueFetchCooldown is the FetchCooldown of ffriver's two queues
// (Queues): the least time between two fetches of a queue's producer.
// River's default (100 ms) caps a queue at MaxWorkers jobs per 100 ms,
// whatever the jobs cost: 160 items/s for ffworker's 16 apply workers, and
// a tick's 256 scans spread over seconds. The cooldown only spaces fetches
// while jobs keep coming (they are woken by River's insert notifications
// and completions); an idle queue still polls once per FetchPollInterval.
// A host's client sets it as its own FetchCooldown too (see Configure).
const QueueFetchCooldown = jobopts.QueueFetchCooldown

// Queues returns ffriver's queue configs for river.Config.Queues: the scan
// queue with scanWorkers and the apply queue with applyWorkers, each with
// QueueFetchCooldown; a count of 0 leaves that queue out.
func (f *Service) Queues(scanWorkers, applyWorkers int) map[string]river.QueueConfig {
	return f.pipeline.Queues(scanWorkers, applyWorkers)
}

// ObserveJobs records the outcome and duration of every ffriver item job
// client works (Config.MeterProvider), and ends its span
// (Config.TracerProvider), until ctx is done. It returns once subscribed; call it before
// client.Start. Processes (Run, NewProcess) run it; an application whose
// own client was set up with Configure runs it on that client. Without a
// provider it does nothing.
func (f *Service) ObserveJobs(ctx context.Context, client *river.Client[pgx.Tx]) {
	f.pipeline.ObserveJobs(ctx, client)
}

// Configure merges ffriver into a host's River config: it adds the workers
// (creating rc.Workers if nil), appends the periodic jobs unless the client
// cannot lead (LeaderElectionDisabled), and adds the queues. A queue name
// the host already configures is an error. With Config.TracerProvider it
// appends the item span middleware to
// rc.Middleware; River's own metrics and spans are the host's choice
// (otelriver on its client), and item metrics need ObserveJobs.
//
// rc.FetchCooldown is left to the host, but it matters: River sends at most
// one insert notification per queue per client FetchCooldown (default
// 100 ms), and items inserted by a tick's later scans without one wait for
// the apply queue's next poll (FetchPollInterval, 1 s by default). The
// standalone processes set it to QueueFetchCooldown, which took
// ffctl bench lag's p99 from 1.8-2.1 s to 1.3 s at 1,000 expiries/s; a host
// that wants the same lag sets it too.
//
// River's schema is the client's: rc.Schema ("" = the pool's search_path,
// as River reads it) must be Config.RiverSchema when that was set, else
// Configure refuses with an error naming both; left unset, Configure takes
// rc.Schema as ffriver's River schema (RiverSchema), so the flow cascade's
// ff.advance jobs, LastTick and the watchdog use the tables this client
// works, not a second River in ffriver's schema. Call it before the Store
// is used, and build the client on the Service's pool (or one reaching
// the same database): River's schema is found through rc.Schema, or
// through the pool's search_path when rc.Schema is "".
//
// The Service's pool must have at least PoolConns(scanWorkers,
// applyWorkers) connections plus what the application's own queues use
// (pgxpool's default, 4 or the core count, is too small): Configure
// refuses a smaller one with an error naming pgxpool.Config.MaxConns.
func (f *Service) Configure(rc *river.Config, scanWorkers, applyWorkers int) error {
	if have, need := f.store.Pool().Config().MaxConns, PoolConnsWithLanes(scanWorkers, applyWorkers, f.groupLanes); have < need {
		return ff.Validationf("pool", "the pool has %d connections, but a River client working ffriver's queues with %d scan and %d apply workers "+
			"needs at least %d (ffriver.PoolConnsWithLanes, %d group lanes) plus what the application's own queues use: raise pool_max_conns "+
			"(pgxpool.Config.MaxConns), or River's fetches and leader election time out and leases expire late", have, scanWorkers, applyWorkers, need, f.groupLanes)
	}
	host, take, err := f.clientRiver(rc.Schema)
	if err != nil {
		return err
	}
	if rc.Workers == nil {
		rc.Workers = river.NewWorkers()
	}
	if err := f.AddWorkers(rc.Workers); err != nil {
		return err
	}
	if !rc.LeaderElectionDisabled {
		rc.PeriodicJobs = append(rc.PeriodicJobs, f.PeriodicJobs()...)
	}
	if f.tracers != nil {
		rc.Middleware = append(rc.Middleware, f.pipeline.Middleware())
	}
	if rc.Queues == nil {
		rc.Queues = map[string]river.QueueConfig{}
	}
	for name, qc := range f.Queues(scanWorkers, applyWorkers) {
		if _, clash := rc.Queues[name]; clash {
			return fmt.Errorf("ffriver: the host River config already has queue %q", name)
		}
		// River refuses a queue whose cooldown exceeds its poll interval.
		if rc.FetchPollInterval > 0 && rc.FetchPollInterval < qc.FetchCooldown {
			qc.FetchCooldown = rc.FetchPollInterval
		}
		rc.Queues[name] = qc
	}
	if take {
		return f.takeClientRiver(host)
	}
	return nil
}

// clientRiver resolves the schema of a River client's tables (its
// river.Config.Schema; "" is the search_path's, as River reads it) and
// checks it against Config.RiverSchema: when that was set and differs, an
// error naming both; take says the Service should use the client's.
func (f *Service) clientRiver(schema string) (host string, take bool, err error) {
	h, err := dbutil.ParseSchema(schema)
	if err != nil {
		return "", false, err
	}
	if h == "" {
		h = dbutil.Schema(f.pathRiver)
	}
	if string(h) == f.RiverSchema() {
		return string(h), false, nil
	}
	if f.riverExplicit {
		said := fmt.Sprintf("%q (river.Config.Schema)", h)
		if schema == "" {
			said = fmt.Sprintf("%q (river.Config.Schema is empty: the search_path's River)", h)
		}
		return "", false, ff.Validationf("river_schema", "the River client's schema is %s but ffriver.Config.RiverSchema is %q: "+
			"set both to the schema of River's tables, or ffriver's jobs go where this client never looks", said, f.RiverSchema())
	}
	return string(h), true, nil
}

// takeClientRiver makes the client's River schema the Service's, saying so.
func (f *Service) takeClientRiver(host string) error {
	f.logger.Warn("ffriver: River's tables are in the host client's schema, not ffriver's: ffriver uses the client's "+
		"(set ffriver.Config.RiverSchema to it to say so)", "river_schema", host, "unused", f.RiverSchema())
	return f.useRiver(host)
}

// ClientOptions tune the River configs of the standalone processes.
type ClientOptions struct {
	// ScanWorkers and ApplyWorkers are the queues' MaxWorkers (0 leaves the
	// queue out).
	ScanWorkers, ApplyWorkers int
	// ID of the River client (default: ClientID of the process's name when
	// started through Run, else River's host-and-time id).
	ID string
	// Logger of the process; River's client gets RiverLogger(Logger), one
	// level quieter unless Logger logs DEBUG (default: discard).
	Logger *slog.Logger
	// RescueStuckJobsAfter (scheduler only): how long a job may run before
	// River's rescuer, on the leader, retries it. It bounds how long an
	// item whose worker process died keeps its execution waiting. 0 means
	// DefaultRescueAfter; negative is an error, and so is a value below
	// the job timeout.
	RescueStuckJobsAfter time.Duration
	// CompletedJobRetention (scheduler only): how long River keeps
	// completed jobs (and their outputs) for River UI. 0 means
	// DefaultCompletedRetention; KeepCompletedJobs (-1, River's own
	// special value) never deletes them; any other negative value is an
	// error.
	CompletedJobRetention time.Duration
	// TestOnly sets river.Config.TestOnly (no start-up jitter).
	TestOnly bool
}

// Defaults of the standalone processes.
const (
	DefaultRescueAfter        = time.Minute
	DefaultCompletedRetention = time.Hour
)

// KeepCompletedJobs as ClientOptions.CompletedJobRetention keeps completed
// jobs forever (River's CompletedJobRetentionPeriod -1).
const KeepCompletedJobs time.Duration = -1

// KeepExecutions as Config.ExecutionRetention keeps terminal executions
// forever: the execution_retention scanner is registered disabled.
const KeepExecutions = scanners.KeepExecutions

func (f *Service) baseConfig(o ClientOptions) (*river.Config, error) {
	rw := river.NewWorkers()
	if err := f.AddWorkers(rw); err != nil {
		return nil, err
	}
	logger := RiverLogger(o.Logger)
	qs := f.Queues(o.ScanWorkers, o.ApplyWorkers)
	if len(qs) == 0 {
		return nil, ff.Validationf("concurrency", "the process works no queue: scan and apply workers are both 0")
	}
	var middleware []rivertype.Middleware
	var plugins []rivertype.Plugin
	if f.meters != nil || f.tracers != nil {
		// River's own job metrics and spans, on the Service's providers
		// (never the global ones: otelriver falls back to those for nil).
		mp, tp := f.meters, f.tracers
		if mp == nil {
			mp = metricnoop.NewMeterProvider()
		}
		if tp == nil {
			tp = tracenoop.NewTracerProvider()
		}
		// A plugin, not only a middleware: River calls its metric hook
		// too (the producers' fetch metrics, river.job_get_available_*).
		// River runs plugins' middleware before Middleware's, so River's
		// work span still encloses the item span below.
		plugins = append(plugins, otelriver.NewMiddleware(&otelriver.MiddlewareConfig{MeterProvider: mp, TracerProvider: tp}))
		if f.tracers != nil {
			middleware = append(middleware, f.pipeline.Middleware())
		}
	}
	return &river.Config{
		ID:         o.ID,
		Middleware: middleware,
		Plugins:    plugins,
		Schema:     f.RiverSchema(),
		Logger:     logger,
		Workers:    rw,
		Queues:     qs,
		// The client's cooldown also spaces River's insert notifications
		// (one per queue per cooldown): at River's default 100 ms the items
		// of a tick's later scans were inserted without one, after the
		// producer's fetch, and waited for its 1 s poll.
		FetchCooldown: QueueFetchCooldown,
		JobTimeout:    f.pipeline.Env().JobTimeout,
		TestOnly:      o.TestOnly,
	}, nil
}

// SchedulerConfig returns the River config of a scheduler: leader-eligible,
// carrying the periodic jobs and every job kind, River's tables in
// Config.RiverSchema.
func (f *Service) SchedulerConfig(o ClientOptions) (*river.Config, error) {
	rc, err := f.baseConfig(o)
	if err != nil {
		return nil, err
	}
	rc.PeriodicJobs = f.PeriodicJobs()
	rc.RescueStuckJobsAfter = o.RescueStuckJobsAfter
	switch {
	case rc.RescueStuckJobsAfter < 0:
		return nil, ff.Validationf("rescue_after", "%s is negative: 0 means the default %s", rc.RescueStuckJobsAfter, DefaultRescueAfter)
	case rc.RescueStuckJobsAfter == 0:
		rc.RescueStuckJobsAfter = DefaultRescueAfter
	}
	if rc.RescueStuckJobsAfter < rc.JobTimeout {
		return nil, ff.Validationf("rescue_after", "%s is shorter than the job timeout %s", rc.RescueStuckJobsAfter, rc.JobTimeout)
	}
	rc.CompletedJobRetentionPeriod = o.CompletedJobRetention
	switch {
	case rc.CompletedJobRetentionPeriod == 0:
		rc.CompletedJobRetentionPeriod = DefaultCompletedRetention
	case rc.CompletedJobRetentionPeriod < 0 && rc.CompletedJobRetentionPeriod != KeepCompletedJobs:
		return nil, ff.Validationf("completed_retention", "%s is negative: 0 means the default %s, KeepCompletedJobs (-1) keeps them forever",
			rc.CompletedJobRetentionPeriod, DefaultCompletedRetention)
	}
	return rc, nil
}

// WorkerConfig returns the River config of a worker: never leader
// (LeaderElectionDisabled, so no periodic jobs and no maintenance) and
// fetching only ffriver's kinds (FetchOnlyKnownKinds).
func (f *Service) WorkerConfig(o ClientOptions) (*river.Config, error) {
	rc, err := f.baseConfig(o)
	if err != nil {
		return nil, err
	}
	rc.LeaderElectionDisabled = true
	rc.FetchOnlyKnownKinds = true
	return rc, nil
}

// LastTick returns how long ago the last tick of this pipeline's scan queue
// was inserted into riverSchema's river_job ("" = Config.RiverSchema), by the
// database's clock, and ok=false when there is none. It reads the ticks of
// the last DefaultTickStaleAfter through River's fetch index, and every
// tick River keeps only when none is that recent.
func (f *Service) LastTick(ctx context.Context, riverSchema string) (age time.Duration, ok bool, err error) {
	return f.lastTick(ctx, riverSchema, DefaultTickStaleAfter)
}

// lastTick is LastTick reading the ticks of the last window first.
func (f *Service) lastTick(ctx context.Context, riverSchema string, window time.Duration) (age time.Duration, ok bool, err error) {
	if riverSchema == "" {
		riverSchema = f.RiverSchema()
	}
	s, err := dbutil.ParseSchema(riverSchema)
	if err != nil {
		return 0, false, err
	}
	ticks, err := readTicks(ctx, f.store.Pool(), s, f.pipeline.ScanQueue(), window, nil)
	if err != nil {
		return 0, false, err
	}
	n, ok := newest(ticks)
	if !ok {
		return 0, false, nil
	}
	return ms(n.insertedMs), true, nil
}

// DefaultTickStaleAfter is AttachOptions.TickStaleAfter unless set: the
// tick watchdog's threshold, as ffworker's --tick-stale-after.
const DefaultTickStaleAfter = 30 * time.Second

// ErrTicksStale matches a *TicksStaleError (errors.Is).
var ErrTicksStale = errors.New("no recent ff.tick")

// TicksStaleError is CheckTicks's answer when no tick of the pipeline's
// scan queue has been inserted for StaleAfter: no River leader carries
// ffriver's periodic jobs, so nothing is scanned (expired leases stay
// leased, delayed executions wait, flows stall on their sweep). It matches
// ErrTicksStale.
type TicksStaleError struct {
	// Queue is the pipeline's scan queue; RiverSchema holds the river_job
	// looked in.
	Queue, RiverSchema string
	// StaleAfter is the threshold.
	StaleAfter time.Duration
	// LastTick is how long ago the newest tick was inserted, when Seen.
	LastTick time.Duration
	// Seen: there is a tick at all.
	Seen bool
	// Leader is the id of the client leading RiverSchema's River for
	// StaleAfter or longer without inserting a tick: a River leader
	// without ffriver's periodic jobs (an old process of a rolling deploy).
	Leader string
	// LeaderFor is how long Leader has led.
	LeaderFor time.Duration
	// Elsewhere, when set, is the River schema this schema's ticks are
	// inserted into instead (the last ElsewhereAge ago): scanning runs,
	// but Config.RiverSchema names another River, where this process's
	// flow hops go unfetched.
	Elsewhere    string
	ElsewhereAge time.Duration
}

// Error implements error.
func (e *TicksStaleError) Error() string {
	if e.Elsewhere != "" {
		return fmt.Sprintf("no ff.tick job inserted into %s.river_job for queue %s in %s, but this schema's ticks are inserted into "+
			"%s.river_job (the last %s ago): scanning runs there, while ffriver.Config.RiverSchema names %q, so this process's flow "+
			"hops go where no worker fetches; set Config.RiverSchema (--river-schema) to %q",
			e.RiverSchema, e.Queue, e.StaleAfter, e.Elsewhere, e.ElsewhereAge.Round(time.Second), e.RiverSchema, e.Elsewhere)
	}
	last := "none since this process started"
	if e.Seen {
		last = "the last " + e.LastTick.Round(time.Second).String() + " ago"
	}
	who := "no ffscheduler or other River leader with ffriver's periodic jobs is running"
	if e.Leader != "" {
		who = fmt.Sprintf("River's leader %q (leading for %s) does not run ffriver's periodic jobs", e.Leader, e.LeaderFor.Round(time.Second))
	}
	return fmt.Sprintf("no ff.tick job inserted into %s.river_job for queue %s in %s (%s): %s, so nothing is being scanned; "+
		"run ffscheduler, or give ffriver's periodic jobs (Configure) to every leader-eligible River client, the old ones of a "+
		"rolling deploy included", e.RiverSchema, e.Queue, e.StaleAfter, last, who)
}

// Is makes errors.Is(err, ErrTicksStale) true.
func (e *TicksStaleError) Is(target error) bool { return target == ErrTicksStale }

// CheckTicks returns a *TicksStaleError when no tick of this pipeline's
// scan queue has been inserted into River's tables (RiverSchema) for
// staleAfter (DefaultTickStaleAfter when 0), counting from New when there
// is none yet; nil otherwise. It names River's leader when one has led for
// staleAfter without inserting a tick. Ticks of this schema inserted
// into another River are scanning, not its absence: with
// Config.RiverSchema unset the Service takes that River (with a warning)
// and CheckTicks returns nil; set, its error (Elsewhere) names both. It is the tick watchdog's check, for an
// application's health endpoint. Wire it to a check that alerts rather
// than to a readiness gate a rolling deploy waits for: while an old leader
// without ffriver's periodic jobs leads, no new process gets ticks.
func (f *Service) CheckTicks(ctx context.Context, staleAfter time.Duration) error {
	return f.checkTicks(ctx, "", staleAfter, f.created)
}

func (f *Service) checkTicks(ctx context.Context, riverSchema string, staleAfter time.Duration, since time.Time) error {
	if staleAfter <= 0 {
		staleAfter = DefaultTickStaleAfter
	}
	own := riverSchema == ""
	if own {
		riverSchema = f.RiverSchema()
	}
	age, ok, err := f.lastTick(ctx, riverSchema, staleAfter)
	if err != nil {
		return err
	}
	if ticksFresh(age, ok, since, staleAfter) {
		return nil
	}
	stale := &TicksStaleError{Queue: f.pipeline.ScanQueue(), RiverSchema: riverSchema, StaleAfter: staleAfter, LastTick: age, Seen: ok}
	if own {
		// Ticks inserted into another River (the host client's, set up by
		// hand with Config.RiverSchema unset) are scanning, not its absence.
		at, atAge, found, err := f.newestTick(ctx)
		if err != nil {
			return err
		}
		if found && at != riverSchema && atAge < staleAfter {
			if !f.riverExplicit {
				f.logger.WarnContext(ctx, "ffriver: this schema's ff.tick jobs are inserted into another River than the one it used: "+
					"ffriver uses that one (set ffriver.Config.RiverSchema to it to say so)", "river_schema", at, "unused", riverSchema)
				return f.useRiver(at)
			}
			stale.Elsewhere, stale.ElsewhereAge = at, atAge
			return stale
		}
	}
	leader, err := riverLeader(ctx, f.store.Pool(), riverSchema)
	if err != nil {
		return err
	}
	stale.blame(leader)
	return stale
}

// ticksFresh reports whether ticks are coming: the newest was inserted less
// than staleAfter ago (age, when ok), or there is none yet and since (the
// watcher's start) is less than staleAfter ago.
func ticksFresh(age time.Duration, ok bool, since time.Time, staleAfter time.Duration) bool {
	return (ok && age < staleAfter) || (!ok && time.Since(since) < staleAfter)
}

// blame names River's leader l in e when it has led for StaleAfter or
// longer: long enough to have inserted a tick had it run ffriver's
// periodic jobs.
func (e *TicksStaleError) blame(l *RiverLeader) {
	if l != nil && l.For >= e.StaleAfter {
		e.Leader, e.LeaderFor = l.ID, l.For
	}
}

// RiverLeader is the River client holding the leadership of a River
// schema (its river_leader row): the one client that inserts periodic
// jobs, ffriver's ticks among them when it runs them.
type RiverLeader struct {
	// ID is the client's id (river.Config.ID).
	ID string `json:"id"`
	// ElectedAt is when it was elected; ExpiresAt is when its leadership
	// ends unless it renews it.
	ElectedAt time.Time `json:"elected_at"`
	ExpiresAt time.Time `json:"expires_at"`
	// For is how long it has led, by the database's clock.
	For time.Duration `json:"for_ns"`
	// InsertsTicks: a tick of the pipeline's scan queue was inserted since
	// it was elected (TickHealth); only the leader inserts them.
	InsertsTicks bool `json:"inserts_ticks"`
}

// riverLeader returns the client holding the leadership of riverSchema's
// River (nil when none does).
func riverLeader(ctx context.Context, pool *pgxpool.Pool, riverSchema string) (*RiverLeader, error) {
	s, err := dbutil.ParseSchema(riverSchema)
	if err != nil {
		return nil, err
	}
	var l RiverLeader
	var ms float64
	err = pool.QueryRow(ctx, s.SQL(`SELECT leader_id, elected_at, expires_at, extract(epoch FROM now() - elected_at) * 1000
		FROM {S}river_leader WHERE expires_at > now()`)).Scan(&l.ID, &l.ElectedAt, &l.ExpiresAt, &ms)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, dbutil.MapErr(err, "reading River's leader")
	}
	l.For = time.Duration(ms * float64(time.Millisecond))
	return &l, nil
}

// WatchTicks logs a warning when no tick has been inserted for staleAfter
// (CheckTicks), checking every staleAfter/3: no scheduler is alive (or
// none runs with this schema and filter, or the River leader has no
// ffriver periodic jobs), so nothing is being scanned. It logs once when
// ticks stop and once when they resume, and returns when ctx is done.
// Processes run it (ProcessOptions.TickStaleAfter); an application on its
// own River client runs it through Attach.
func (f *Service) WatchTicks(ctx context.Context, riverSchema string, staleAfter time.Duration, logger *slog.Logger) {
	if logger == nil {
		logger = f.logger
	}
	every := max(staleAfter/3, 100*time.Millisecond)
	started := time.Now()
	warned := false
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := f.checkTicks(ctx, riverSchema, staleAfter, started)
		var stale *TicksStaleError
		switch {
		case errors.As(err, &stale):
			if !warned {
				warned = true
				logger.WarnContext(ctx, "ffriver: "+stale.Error(), "queue", stale.Queue, "schema", f.store.Schema(),
					"river_schema", stale.RiverSchema, "stale_after", stale.StaleAfter.String())
			}
		case err != nil:
			if ctx.Err() == nil && !errors.Is(err, context.Canceled) {
				logger.WarnContext(ctx, "ffriver: cannot check for recent ticks", "error", err)
			}
		case warned:
			warned = false
			logger.InfoContext(ctx, "ff.tick jobs are being inserted again", "queue", f.pipeline.ScanQueue())
		}
	}
}

// AttachOptions configure Attach.
type AttachOptions struct {
	// TickStaleAfter is the tick watchdog's threshold (default
	// DefaultTickStaleAfter; negative: no watchdog).
	TickStaleAfter time.Duration
	// Logger hears the watchdog (default Config.Logger, else
	// slog.Default()).
	Logger *slog.Logger
	// Wake tunes the wake loop (Service.Wake) Attach runs beside client.
	// Set Wake.Disabled on a client that never leads
	// (LeaderElectionDisabled): its loop only finds, once a second, that
	// it does not lead.
	Wake WakeOptions
}

// Attach starts, until ctx is done, what a Process runs beside its River
// client, for an application's own client set up with Configure or by hand
// (AddWorkers, PeriodicJobs, Queues): the item metrics and spans
// (ObserveJobs on client), the outbox waker (when New made it), the
// tick watchdog (WatchTicks: a warning when no tick was inserted for
// TickStaleAfter, e.g. because the River leader of a rolling deploy has no
// ffriver periodic jobs) and, unless Wake.Disabled, the wake loop that
// ticks the timer scanners when their items come due while client leads
// (Service.Wake). Call it once, before client.Start; CheckTicks
// answers the watchdog's question for a health endpoint.
//
// It checks the client's River schema (client.Schema()) as Configure does:
// with Config.RiverSchema set to another schema it starts nothing and
// returns an error naming both; unset, the Service takes the client's, so
// the flow cascade and the watchdog use the River this client works.
func (f *Service) Attach(ctx context.Context, client *river.Client[pgx.Tx], o AttachOptions) error {
	host, take, err := f.clientRiver(client.Schema())
	if err != nil {
		return err
	}
	if take {
		if err := f.takeClientRiver(host); err != nil {
			return err
		}
	}
	if o.TickStaleAfter == 0 {
		o.TickStaleAfter = DefaultTickStaleAfter
	}
	if o.Logger == nil {
		o.Logger = f.logger
	}
	f.attach(ctx, client, max(o.TickStaleAfter, 0), o.Logger)
	if !o.Wake.Disabled {
		go func() {
			if err := f.Wake(ctx, client, o.Wake); err != nil {
				o.Logger.ErrorContext(ctx, "ffriver: the wake loop stopped; the periodic ticks carry on", "error", err)
			}
		}()
	}
	return nil
}

// attach starts the waker (when the Service made it) and, with staleAfter
// positive, the tick watchdog, and observes client's jobs.
func (f *Service) attach(ctx context.Context, client *river.Client[pgx.Tx], staleAfter time.Duration, logger *slog.Logger) {
	if f.ownWaker {
		go f.store.Waker().Run(ctx)
	}
	if staleAfter > 0 {
		go f.WatchTicks(ctx, "", staleAfter, logger)
	}
	f.ObserveJobs(ctx, client)
}

// cascade is the Store's actions.Cascader: a pipeline.Cascader whose
// River schema Configure may replace (the host client's) before the Store
// is used.
type cascade struct {
	filter ff.Filter
	c      atomic.Pointer[pipeline.Cascader]
}

func newCascade(riverSchema string, filter ff.Filter) (*cascade, error) {
	c := &cascade{filter: filter}
	return c, c.use(riverSchema)
}

// use makes the cascade insert into riverSchema's River tables.
func (c *cascade) use(riverSchema string) error {
	wc, err := pipeline.NewCascader(riverSchema, c.filter)
	if err != nil {
		return err
	}
	c.c.Store(wc)
	return nil
}

// EnqueueHopsTx implements actions.Cascader.
func (c *cascade) EnqueueHopsTx(ctx context.Context, tx pgx.Tx, hops []actions.Hop) error {
	return c.c.Load().EnqueueHopsTx(ctx, tx, hops)
}
