package ffriver_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ffriver/ffriver"
	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/internal/pipeline"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/ffriver/ffriver/jobs"
	"github.com/ffriver/ffriver/migrations"
	"github.com/ffriver/ffriver/scanners"
	"github.com/ffriver/ffriver/workers"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

func fastScanners() map[string]workers.Settings {
	m := map[string]workers.Settings{}
	for _, b := range scanners.Builtins(scanners.BuiltinOptions{}) {
		s := b.Scanner
		m[s.Name()] = workers.Settings{Interval: 50 * time.Millisecond}
	}
	return m
}

// TestEmbedIntoHostRiverClient: a host River client works its own job kind
// in "default" and, after Configure, ffriver's pipeline in ff_scan and
// ff_apply, with the pipeline's guarantees (one transition, one event set).
func TestEmbedIntoHostRiverClient(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, nil)
	ctx := context.Background()
	clock := ff.NewManualClock(1_800_000_000_000)
	f, err := ffriver.New(ctx, db.Pool, ffriver.Config{Schema: db.Schema, Clock: clock, Scanners: fastScanners()})
	if err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	var worked []string
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[SendEmailArgs]) error {
		mu.Lock()
		defer mu.Unlock()
		worked = append(worked, job.Args.To)
		return nil
	}))
	rc := &river.Config{Schema: db.Schema, Workers: workers, TestOnly: true,
		Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 4}},
		FetchCooldown: 10 * time.Millisecond, FetchPollInterval: 50 * time.Millisecond}
	if err := f.Configure(rc, 2, 4); err != nil {
		t.Fatal(err)
	}
	// Adding ffriver twice is refused, not a panic.
	if err := f.AddWorkers(rc.Workers); err == nil {
		t.Error("adding ffriver's workers twice succeeded")
	}
	if err := f.Configure(&river.Config{Queues: map[string]river.QueueConfig{jobs.QueueApply: {MaxWorkers: 1}}}, 1, 1); err == nil {
		t.Error("a clashing queue was accepted")
	}
	client, err := river.NewClient(riverpgxv5.New(db.Pool), rc)
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Stop(context.Background()) })

	st := f.Store()
	var ids []ff.ExecutionID
	for i := range 20 {
		lane := "lane-" + string(rune('a'+i))
		id, err := st.Create(ctx, executions.CreateParams{Lane: lane})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Claim(ctx, executions.ClaimParams{Lane: lane, WorkerInstanceID: "w", LeaseTTL: time.Second}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		if _, err := client.Insert(ctx, SendEmailArgs{To: lane + "@example.com"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(2 * time.Second)
	for _, id := range ids {
		// Generous: the host client must win River leadership and tick on a
		// machine that may be loaded (it took over 20 s beside other suites).
		fftest.Await(t, 90*time.Second, "expiry of "+id.String(), func() bool {
			e, err := st.Get(ctx, id)
			return err == nil && e.PublicState == "expired"
		})
	}
	fftest.Await(t, 20*time.Second, "host jobs", func() bool { mu.Lock(); defer mu.Unlock(); return len(worked) == 20 })
	var events, wrongQueue int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM ff_lease_event WHERE event_type = 'expired'`).Scan(&events); err != nil {
		t.Fatal(err)
	}
	if events != 20 {
		t.Errorf("%d expired events, want 20", events)
	}
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE (kind LIKE 'ff.%' AND queue NOT IN ('ff_scan', 'ff_apply'))
		OR (kind = 'send_email' AND queue <> 'default')`).Scan(&wrongQueue); err != nil {
		t.Fatal(err)
	}
	if wrongQueue != 0 {
		t.Errorf("%d jobs in the wrong queue", wrongQueue)
	}
	if age, ok, err := f.LastTick(ctx, ""); err != nil || !ok || age > time.Minute {
		t.Errorf("LastTick = %s, %v, %v", age, ok, err)
	}
}

// TestNewRefusesWrongSchema: unmigrated schema or another partition count
// fail with ff.ErrNotMigrated; a settings typo is a validation error.
func TestNewRefusesWrongSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	bare := testdb.New(t, &testdb.Options{NoMigrate: true})
	if _, err := ffriver.New(ctx, bare.Pool, ffriver.Config{Schema: bare.Schema}); !errors.Is(err, ff.ErrNotMigrated) {
		t.Errorf("unmigrated: %v", err)
	}
	// A named schema that does not exist is said to be missing under its
	// name, also on a pool whose search_path is that schema (as the
	// binaries set it for --schema), not as a search_path without a
	// schema (issue 40).
	missing := bare.Schema + "_missing"
	cfg, err := pgxpool.ParseConfig(testdb.URL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = `"` + missing + `"`
	onPath, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer onPath.Close()
	for _, c := range []ffriver.Config{{Schema: missing}, {Schema: missing, RiverSchema: bare.Schema}, {Schema: bare.Schema, RiverSchema: missing}} {
		_, err := ffriver.New(ctx, onPath, c)
		if !errors.Is(err, ff.ErrNotMigrated) || !strings.Contains(err.Error(), `schema "`+missing+`" does not exist in database "`) ||
			strings.Contains(err.Error(), "search_path") {
			t.Errorf("New(%+v) on a pool whose search_path is the missing schema: %v; want it named as missing", c, err)
		}
	}
	db := testdb.New(t, &testdb.Options{Partitions: 8})
	if _, err := ffriver.Verify(ctx, db.Pool, db.Schema, 256); !errors.Is(err, ff.ErrNotMigrated) {
		t.Errorf("partition count: %v", err)
	}
	if n, err := ffriver.Verify(ctx, db.Pool, db.Schema, 0); err != nil || n != 8 {
		t.Errorf("Verify = %d, %v", n, err)
	}
	_, err = ffriver.New(ctx, db.Pool, ffriver.Config{Schema: db.Schema, Scanners: map[string]workers.Settings{"atempt_timeout": {Batch: 5}}})
	if !errors.Is(err, ff.ErrValidation) || !strings.Contains(err.Error(), "atempt_timeout") {
		t.Errorf("typo in scanner settings: %v", err)
	}
}

// TestWatchTicksWarnsWithoutScheduler: a worker with no scheduler alive
// says so.
func TestWatchTicksWarnsWithoutScheduler(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f, err := ffriver.New(ctx, db.Pool, ffriver.Config{Schema: db.Schema, Filter: ff.Filter{Namespace: "tenant-a"}})
	if err != nil {
		t.Fatal(err)
	}
	var buf syncBuf
	logger := slog.New(slog.NewTextHandler(&buf, nil))
	done := make(chan struct{})
	go func() { f.WatchTicks(ctx, "", 300*time.Millisecond, logger); close(done) }()
	fftest.Await(t, 20*time.Second, "the warning", func() bool { return strings.Contains(buf.String(), "no ffscheduler") })
	if !strings.Contains(buf.String(), pipeline.Of(f).ScanQueue()) {
		t.Errorf("warning does not name the queue: %s", buf.String())
	}
	// Ticks appear, as a scheduler inserts them: the watcher says ticks are
	// back. (One tick was not enough on a busy machine: the watcher may
	// look after it is older than staleAfter.)
	c, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{Schema: db.Schema, SkipUnknownJobCheck: true})
	if err != nil {
		t.Fatal(err)
	}
	args, _ := pipeline.Of(f).TickArgs(scanners.AttemptTimeout)
	fftest.Await(t, 60*time.Second, "the all-clear", func() bool {
		err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			_, err := c.InsertTx(ctx, tx, args, pipeline.Of(f).TickInsertOpts())
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return strings.Contains(buf.String(), "inserted again")
	})
	cancel()
	<-done
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// TestRiverSchemaApart: River's tables in one schema, ffriver's in another
// (Config.RiverSchema). New checks each where it lives, and the whole
// pipeline (ticks, scans, items, their outputs) runs in River's schema while
// the transitions and events land in ffriver's.
func TestRiverSchemaApart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ffdb := testdb.New(t, &testdb.Options{NoMigrate: true})
	riverdb := testdb.New(t, &testdb.Options{NoMigrate: true})
	if _, err := migrations.Migrate(ctx, ffdb.Pool, ffdb.Schema, &migrations.Options{Partitions: 8, RiverSchema: riverdb.Schema}); err != nil {
		t.Fatal(err)
	}
	var riverTables int
	if err := ffdb.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename LIKE 'river%'`,
		ffdb.Schema).Scan(&riverTables); err != nil {
		t.Fatal(err)
	}
	if riverTables != 0 {
		t.Fatalf("%d River tables in ffriver's schema; the test proves nothing", riverTables)
	}
	// River's tables are looked for where River is used: not in ffriver's
	// schema.
	if _, err := ffriver.New(ctx, ffdb.Pool, ffriver.Config{Schema: ffdb.Schema}); !errors.Is(err, ff.ErrNotMigrated) {
		t.Errorf("River's tables missing from RiverSchema: %v", err)
	}

	clock := ff.NewManualClock(1_800_000_000_000)
	f, err := ffriver.New(ctx, ffdb.Pool, ffriver.Config{Schema: ffdb.Schema, RiverSchema: riverdb.Schema, Clock: clock, Scanners: fastScanners()})
	if err != nil {
		t.Fatal(err)
	}
	p, err := f.NewProcess(ctx, ffriver.ProcessOptions{Role: ffriver.Scheduler, ShutdownTimeout: 10 * time.Second,
		Client: ffriver.ClientOptions{ScanWorkers: 2, ApplyWorkers: 2, TestOnly: true}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop() })

	st := f.Store()
	id, err := st.Create(ctx, executions.CreateParams{Lane: "lane-a"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Claim(ctx, executions.ClaimParams{Lane: "lane-a", WorkerInstanceID: "w", LeaseTTL: time.Second}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Second)
	fftest.Await(t, 20*time.Second, "expiry of "+id.String(), func() bool {
		e, err := st.Get(ctx, id)
		return err == nil && e.PublicState == "expired"
	})
	// River completes the item's job after its transaction commits.
	fftest.Await(t, 20*time.Second, "the item job completed in River's schema", func() bool {
		var items int
		if err := riverdb.Pool.QueryRow(ctx, `SELECT count(*) FROM `+riverdb.Schema+`.river_job WHERE kind = $1 AND state = 'completed'`,
			jobs.KindExpireAttempt).Scan(&items); err != nil {
			t.Fatal(err)
		}
		return items == 1
	})
	var events int
	if err := ffdb.Pool.QueryRow(ctx, `SELECT count(*) FROM `+ffdb.Schema+`.ff_lease_event WHERE event_type = 'expired'`).Scan(&events); err != nil {
		t.Fatal(err)
	}
	if events != 1 {
		t.Errorf("%d expired events in ffriver's schema, want 1", events)
	}
	if _, ok, err := f.LastTick(ctx, ""); err != nil || !ok {
		t.Errorf("LastTick in River's schema: %v, %v", ok, err)
	}
}

// Zero means the documented default where zero can mean nothing else; a
// negative value is refused where it used to fall back to the default in
// silence; and where zero does mean something, a named value says it
// (issue 23, item 8).
func TestZeroIsTheDefaultNegativeIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t, nil)
	for name, cfg := range map[string]ffriver.Config{
		"outbox_retention":    {OutboxRetention: -time.Hour},
		"execution_retention": {ExecutionRetention: -time.Hour},
		"job_timeout":         {JobTimeout: -time.Second},
		"sweep":               {Scanners: map[string]workers.Settings{scanners.AttemptTimeout: {Sweep: -2 * time.Second}}},
	} {
		cfg.Schema = db.Schema
		if _, err := ffriver.New(ctx, db.Pool, cfg); !errors.Is(err, ff.ErrValidation) || !strings.Contains(err.Error(), "negative") {
			t.Errorf("%s negative: %v, want a validation error", name, err)
		}
	}

	f, err := ffriver.New(ctx, db.Pool, ffriver.Config{Schema: db.Schema,
		Scanners: map[string]workers.Settings{scanners.AttemptTimeout: {Sweep: workers.NoSweep}, scanners.DelayedPromoter: {Batch: 7}}})
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := pipeline.Of(f).Settings(scanners.AttemptTimeout); st.Sweep != 0 {
		t.Errorf("NoSweep: attempt_timeout sweeps every %s, want no scan cursors", st.Sweep)
	}
	if st, _ := pipeline.Of(f).Settings(scanners.DelayedPromoter); st.Sweep != scanners.DefaultSweep || st.Batch != 7 {
		t.Errorf("an override's 0 sweep: %+v, want the default sweep %s", st, scanners.DefaultSweep)
	}
	if pipeline.Of(f).Env().JobTimeout <= 0 {
		t.Errorf("JobTimeout 0 gave %s, want the default", pipeline.Of(f).Env().JobTimeout)
	}
	if st, _ := pipeline.Of(f).Settings(scanners.ExecutionRetention); st.Disabled {
		t.Errorf("ExecutionRetention 0: execution_retention disabled, want it running with the default retention")
	}
	keep, err := ffriver.New(ctx, db.Pool, ffriver.Config{Schema: db.Schema, ExecutionRetention: ffriver.KeepExecutions})
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := pipeline.Of(keep).Settings(scanners.ExecutionRetention); !st.Disabled {
		t.Errorf("KeepExecutions: execution_retention enabled, want it disabled (executions kept forever)")
	}

	for name, o := range map[string]ffriver.ClientOptions{
		"rescue_after":        {RescueStuckJobsAfter: -time.Minute},
		"completed_retention": {CompletedJobRetention: -2 * time.Hour},
	} {
		o.ScanWorkers = 1
		if _, err := f.SchedulerConfig(o); !errors.Is(err, ff.ErrValidation) || !strings.Contains(err.Error(), "negative") {
			t.Errorf("%s negative: %v, want a validation error", name, err)
		}
	}
	for in, want := range map[time.Duration]time.Duration{0: ffriver.DefaultCompletedRetention, ffriver.KeepCompletedJobs: -1, time.Minute: time.Minute} {
		rc, err := f.SchedulerConfig(ffriver.ClientOptions{ScanWorkers: 1, CompletedJobRetention: in})
		if err != nil {
			t.Errorf("CompletedJobRetention %s: %v", in, err)
			continue
		}
		if rc.CompletedJobRetentionPeriod != want {
			t.Errorf("CompletedJobRetention %s: River's period %v, %v; want %s", in, rc.CompletedJobRetentionPeriod, err, want)
		}
	}
	_, err = f.NewProcess(ctx, ffriver.ProcessOptions{Role: ffriver.Worker, ShutdownTimeout: -time.Second,
		Client: ffriver.ClientOptions{ApplyWorkers: 1, TestOnly: true}})
	if !errors.Is(err, ff.ErrValidation) || !strings.Contains(err.Error(), "negative") {
		t.Errorf("ShutdownTimeout negative: %v, want a validation error", err)
	}
}

// A process whose server is lost between NewProcess and Start (a failover
// promoting a standby while a binary starts) fails Start with
// ff.ErrUnavailable, the error the binaries start again on within
// --startup-wait, not a plain error they exit on (found by the lease
// checker's failover fault, seed 5301: an ffworker exited with "starting
// River: failed to connect … read only connection").
func TestStartOnALostServerIsUnavailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t, nil)
	cfg := db.Pool.Config()
	var lost sync.Mutex
	lostServer := false
	cfg.BeforeConnect = func(_ context.Context, cc *pgx.ConnConfig) error {
		lost.Lock()
		defer lost.Unlock()
		if lostServer {
			cc.Host, cc.Port, cc.Fallbacks = "127.0.0.1", 1, nil // nothing listens there
		}
		return nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	f, err := ffriver.New(ctx, pool, ffriver.Config{Schema: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	p, err := f.NewProcess(ctx, ffriver.ProcessOptions{Role: ffriver.Worker, ShutdownTimeout: 5 * time.Second,
		Client: ffriver.ClientOptions{ApplyWorkers: 1, TestOnly: true}})
	if err != nil {
		t.Fatal(err)
	}
	lost.Lock()
	lostServer = true
	lost.Unlock()
	pool.Reset()
	err = p.Start()
	if err == nil {
		_ = p.Stop()
		t.Fatal("Start with the server lost: nil error")
	}
	if !errors.Is(err, ff.ErrUnavailable) {
		t.Fatalf("Start with the server lost: %v; want ff.ErrUnavailable", err)
	}
}
