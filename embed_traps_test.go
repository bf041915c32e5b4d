package ffriver_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ffriver/ffriver"
	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/ffriver/ffriver/jobs"
	"github.com/ffriver/ffriver/migrations"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

// hostApp is a small River application before ffriver (testdb.Beside:
// River's tables in their own schema, an empty one for ffriver's, a pool
// whose search_path is ffriver's schema, then River's), with its own job
// kind in River's default queue. Its DB (Count, …) runs plain SQL on the
// pool.
type hostApp struct {
	fftest.DB
	river, ff *testdb.DB
	pool      *pgxpool.Pool
}

func newHostApp(t *testing.T) *hostApp {
	t.Helper()
	b := testdb.NewBeside(t)
	return &hostApp{DB: fftest.DB{TB: t, Pool: b.Pool}, river: b.River, ff: b.FF, pool: b.Pool}
}

// config is the application's own River config (client id, no ffriver).
func (h *hostApp) config(id string) *river.Config {
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(context.Context, *river.Job[SendEmailArgs]) error { return nil }))
	return &river.Config{ID: id, Schema: h.river.Schema, Workers: workers, TestOnly: true,
		Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 2}},
		FetchCooldown: 10 * time.Millisecond, FetchPollInterval: 50 * time.Millisecond}
}

// start builds and starts a client of rc, stopped when the test ends.
func (h *hostApp) start(t *testing.T, rc *river.Config) *river.Client[pgx.Tx] {
	t.Helper()
	c, err := river.NewClient(riverpgxv5.New(h.pool), rc)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop(context.Background()) })
	return c
}

// Trap 1 (issue 24, item 1): forgetting RiverSchema. Migrate no longer
// creates a second River in ffriver's schema beside the application's; a
// schema that has one anyway (migrated before) passes New, and Configure
// takes the host client's schema, so a flow's ff.advance job goes where
// the host client works (it sat in the unused river_job until the
// dependency sweep, 18.9 s later). A RiverSchema that contradicts the
// client is refused, naming both.
func TestEmbedForgottenRiverSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHostApp(t)
	var rse *migrations.RiverSchemaError
	if _, err := migrations.Migrate(ctx, h.pool, h.ff.Schema, nil); !errors.As(err, &rse) {
		t.Fatalf("Migrate without RiverSchema beside the application's River: %v, want a *RiverSchemaError", err)
	}
	// The second River that Migrate used to create unasked.
	if _, err := migrations.Migrate(ctx, h.pool, h.ff.Schema, &migrations.Options{RiverSchema: h.ff.Schema}); err != nil {
		t.Fatal(err)
	}

	explicit, err := ffriver.New(ctx, h.pool, ffriver.Config{Schema: h.ff.Schema, RiverSchema: h.ff.Schema})
	if err != nil {
		t.Fatal(err)
	}
	err = explicit.Configure(h.config("mismatch"), 1, 1)
	if !errors.Is(err, ff.ErrValidation) || !strings.Contains(err.Error(), `"`+h.river.Schema+`"`) || !strings.Contains(err.Error(), `"`+h.ff.Schema+`"`) {
		t.Errorf("Configure with RiverSchema %s on a client of schema %s: %v, want a refusal naming both", h.ff.Schema, h.river.Schema, err)
	}

	f, err := ffriver.New(ctx, h.pool, ffriver.Config{Schema: h.ff.Schema, Scanners: fastScanners()})
	if err != nil {
		t.Fatal(err)
	}
	rc := h.config("host")
	rc.FetchCooldown = 5 * time.Millisecond
	if err := f.Configure(rc, 2, 4); err != nil {
		t.Fatal(err)
	}
	if f.RiverSchema() != h.river.Schema {
		t.Fatalf("RiverSchema after Configure = %s, want the client's %s", f.RiverSchema(), h.river.Schema)
	}
	h.start(t, rc)

	st := f.Store()
	flow, err := st.CreateFlow(ctx, [16]byte{})
	if err != nil {
		t.Fatal(err)
	}
	up, err := st.Create(ctx, executions.CreateParams{FlowID: flow, Lane: "up"})
	if err != nil {
		t.Fatal(err)
	}
	down, err := st.Create(ctx, executions.CreateParams{FlowID: flow, Lane: "down"})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.AddDependencies(ctx, executions.DependencyParams{FlowID: flow, Downstream: down, Upstreams: []ff.ExecutionID{up},
		Policy: executions.AllOf()}); err != nil {
		t.Fatal(err)
	}
	leases, err := st.Claim(ctx, executions.ClaimParams{Lane: "up", WorkerInstanceID: "w", LeaseTTL: time.Minute})
	if err != nil || len(leases) != 1 {
		t.Fatalf("claim: %v, %v", leases, err)
	}
	if err := st.Complete(ctx, leases[0], nil); err != nil {
		t.Fatal(err)
	}
	// Inserted with the completion, into the host client's tables.
	if n := h.Count(`SELECT count(*) FROM `+h.river.Schema+`.river_job WHERE kind = $1`, jobs.KindAdvance); n != 1 {
		t.Errorf("%d ff.advance jobs in the host client's river_job, want 1", n)
	}
	if n := h.Count(`SELECT count(*) FROM `+h.ff.Schema+`.river_job WHERE kind = $1`, jobs.KindAdvance); n != 0 {
		t.Errorf("%d ff.advance jobs in the unused river_job of ffriver's schema", n)
	}
	fftest.Await(t, 60*time.Second, "the downstream step's promotion", func() bool {
		e, err := st.Get(ctx, down)
		return err == nil && e.EligibilityState == "eligible_now"
	})
}

// Trap 2 (issue 24, item 2): River's tables migrated apart (RiverSchema
// given to Migrate) and RiverSchema left out of Config. New's error named
// only `ffctl migrate --schema <ffriver's>`, which made a second River; it
// names River's schema, Config.RiverSchema and --river-schema.
func TestEmbedSplitLayoutHint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHostApp(t)
	if _, err := migrations.Migrate(ctx, h.pool, h.ff.Schema, &migrations.Options{RiverSchema: h.river.Schema}); err != nil {
		t.Fatal(err)
	}
	_, err := ffriver.New(ctx, h.pool, ffriver.Config{Schema: h.ff.Schema})
	if !errors.Is(err, ff.ErrNotMigrated) {
		t.Fatalf("New without RiverSchema: %v, want ErrNotMigrated", err)
	}
	for _, want := range []string{"Config.RiverSchema", "--river-schema", `"` + h.river.Schema + `"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("New's error does not say %q: %v", want, err)
		}
	}
	if _, err := ffriver.New(ctx, h.pool, ffriver.Config{Schema: h.ff.Schema, RiverSchema: h.river.Schema}); err != nil {
		t.Errorf("New with RiverSchema: %v", err)
	}
}

// Trap 3 (issue 24, item 3): in a rolling deploy the River leader is an
// old process without ffriver's periodic jobs, so nothing ticks. An
// embedding app's Attach runs the tick watchdog, which warns, and
// CheckTicks reports ErrTicksStale for its health endpoint; once the old
// leader stops and the new client leads, both clear.
func TestEmbedLeaderWithoutFFriver(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := newHostApp(t)
	if _, err := migrations.Migrate(ctx, h.pool, h.ff.Schema, &migrations.Options{RiverSchema: h.river.Schema}); err != nil {
		t.Fatal(err)
	}
	old := h.start(t, h.config("old-leader"))
	fftest.Await(t, 90*time.Second, "the old client's leadership", func() bool {
		return h.Count(`SELECT count(*) FROM `+h.river.Schema+`.river_leader WHERE leader_id = 'old-leader' AND expires_at > now()`) == 1
	})

	const staleAfter = 2 * time.Second
	f, err := ffriver.New(ctx, h.pool, ffriver.Config{Schema: h.ff.Schema, RiverSchema: h.river.Schema, Scanners: fastScanners()})
	if err != nil {
		t.Fatal(err)
	}
	rc := h.config("new")
	if err := f.Configure(rc, 1, 1); err != nil {
		t.Fatal(err)
	}
	client, err := river.NewClient(riverpgxv5.New(h.pool), rc)
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuf
	f.Attach(ctx, client, ffriver.AttachOptions{TickStaleAfter: staleAfter, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err := client.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Stop(context.Background()) })

	fftest.Await(t, 60*time.Second, "the watchdog's warning", func() bool { return strings.Contains(logs.String(), "no ff.tick job") })
	err = f.CheckTicks(ctx, staleAfter)
	var stale *ffriver.TicksStaleError
	if !errors.Is(err, ffriver.ErrTicksStale) || !errors.As(err, &stale) || stale.Seen || stale.RiverSchema != h.river.Schema {
		t.Fatalf("CheckTicks under a leader without ffriver = %v, want a *TicksStaleError with no tick seen", err)
	}
	if !strings.Contains(err.Error(), "leader-eligible") {
		t.Errorf("the error does not say what to do: %v", err)
	}

	if err := old.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	fftest.Await(t, 90*time.Second, "ticks under the new leader", func() bool { return f.CheckTicks(ctx, staleAfter) == nil })
	fftest.Await(t, 60*time.Second, "the watchdog's all-clear", func() bool { return strings.Contains(logs.String(), "inserted again") })
}

// A pool too small for ffriver's queues is refused by Configure, naming the
// size it needs: with pgxpool's default (4 connections on 2 CPUs) River's
// fetches and leader election timed out and a 2 s lease expired 31 s late.
func TestEmbedPoolTooSmall(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, &testdb.Options{MaxConns: 4})
	f, err := ffriver.New(context.Background(), db.Pool, ffriver.Config{Schema: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	err = f.Configure(&river.Config{Schema: db.Schema}, 4, 16)
	if !errors.Is(err, ff.ErrValidation) || !strings.Contains(err.Error(), "needs at least 24") || !strings.Contains(err.Error(), "pool_max_conns") {
		t.Fatalf("Configure on a 4-connection pool = %v, want a validation error naming 24 connections and pool_max_conns", err)
	}
	if err := f.Configure(&river.Config{Schema: db.Schema}, 0, 0); err != nil {
		t.Fatalf("Configure with no ffriver workers on 4 connections: %v", err)
	}
}

// flowHop creates a flow of two steps on st, up then down, and completes
// up: its ff.advance job is inserted with the completion. It returns down.
func flowHop(t *testing.T, st *executions.Store) ff.ExecutionID {
	t.Helper()
	ctx := context.Background()
	flow, err := st.CreateFlow(ctx, [16]byte{})
	if err != nil {
		t.Fatal(err)
	}
	up, err := st.Create(ctx, executions.CreateParams{FlowID: flow, Lane: "up"})
	if err != nil {
		t.Fatal(err)
	}
	down, err := st.Create(ctx, executions.CreateParams{FlowID: flow, Lane: "down"})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.AddDependencies(ctx, executions.DependencyParams{FlowID: flow, Downstream: down, Upstreams: []ff.ExecutionID{up},
		Policy: executions.AllOf()}); err != nil {
		t.Fatal(err)
	}
	leases, err := st.Claim(ctx, executions.ClaimParams{Lane: "up", WorkerInstanceID: "w", LeaseTTL: time.Minute})
	if err != nil || len(leases) != 1 {
		t.Fatalf("claim: %v, %v", leases, err)
	}
	if err := st.Complete(ctx, leases[0], nil); err != nil {
		t.Fatal(err)
	}
	return down
}

// advanceJobs counts the ff.advance jobs in the river_job of schema.
func (h *hostApp) advanceJobs(schema string) int {
	return h.Count(`SELECT count(*) FROM `+schema+`.river_job WHERE kind = $1`, jobs.KindAdvance)
}

// Issue 39, trap 1: RiverSchema forgotten, a worker that calls Configure
// and an API process that only uses ffriver.New(...).Store(). The API
// process's ff.advance jobs went into the unused River of ffriver's schema
// and stayed available until the dependency sweep (19.2 s a hop instead of
// 0.85 s), without a word. New follows the ticks: it uses the River they
// are inserted into, where the workers fetch.
func TestEmbedTrapStoreOnlyProcess(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHostApp(t)
	// A second River in ffriver's schema, as Migrate made one unasked.
	if _, err := migrations.Migrate(ctx, h.pool, h.ff.Schema, &migrations.Options{RiverSchema: h.ff.Schema}); err != nil {
		t.Fatal(err)
	}
	worker, err := ffriver.New(ctx, h.pool, ffriver.Config{Schema: h.ff.Schema, Scanners: fastScanners()})
	if err != nil {
		t.Fatal(err)
	}
	rc := h.config("worker")
	if err := worker.Configure(rc, 1, 2); err != nil {
		t.Fatal(err)
	}
	h.start(t, rc)
	fftest.Await(t, 60*time.Second, "the worker's first tick", func() bool {
		return h.Count(`SELECT count(*) FROM `+h.river.Schema+`.river_job WHERE kind = $1`, jobs.KindTick) > 0
	})

	api, err := ffriver.New(ctx, h.pool, ffriver.Config{Schema: h.ff.Schema})
	if err != nil {
		t.Fatal(err)
	}
	if api.RiverSchema() != h.river.Schema {
		t.Errorf("the API process's RiverSchema = %s, want %s, where the ticks go", api.RiverSchema(), h.river.Schema)
	}
	down := flowHop(t, api.Store())
	if n := h.advanceJobs(h.river.Schema); n != 1 {
		t.Errorf("%d ff.advance jobs in the workers' river_job, want 1", n)
	}
	if n := h.advanceJobs(h.ff.Schema); n != 0 {
		t.Errorf("%d ff.advance jobs stranded in the unused river_job of ffriver's schema", n)
	}
	fftest.Await(t, 60*time.Second, "the downstream step's promotion", func() bool {
		e, err := api.Store().Get(ctx, down)
		return err == nil && e.EligibilityState == "eligible_now"
	})

	// Said wrong, it is refused, naming the setting and the River to name.
	_, err = ffriver.New(ctx, h.pool, ffriver.Config{Schema: h.ff.Schema, RiverSchema: h.ff.Schema})
	if !errors.Is(err, ff.ErrValidation) || !strings.Contains(err.Error(), "Config.RiverSchema") || !strings.Contains(err.Error(), `"`+h.river.Schema+`"`) {
		t.Errorf("New with RiverSchema %s while the ticks go into %s: %v, want a refusal naming Config.RiverSchema and %s",
			h.ff.Schema, h.river.Schema, err, h.river.Schema)
	}
}

// Issue 39, trap 2: the manual path (AddWorkers, PeriodicJobs, Queues into
// the host's own config) with RiverSchema forgotten got no schema check:
// hops were stranded as in trap 1, and the watchdog and CheckTicks said
// "nothing is being scanned" while the host's client scanned. Attach checks
// the client's schema as Configure does.
func TestEmbedTrapManualPath(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := newHostApp(t)
	if _, err := migrations.Migrate(ctx, h.pool, h.ff.Schema, &migrations.Options{RiverSchema: h.ff.Schema}); err != nil {
		t.Fatal(err)
	}
	manual := func(f *ffriver.Service, id string) *river.Config {
		rc := h.config(id)
		if err := f.AddWorkers(rc.Workers); err != nil {
			t.Fatal(err)
		}
		rc.PeriodicJobs = append(rc.PeriodicJobs, f.PeriodicJobs()...)
		for name, qc := range f.Queues(1, 2) {
			rc.Queues[name] = qc
		}
		return rc
	}

	explicit, err := ffriver.New(ctx, h.pool, ffriver.Config{Schema: h.ff.Schema, RiverSchema: h.ff.Schema})
	if err != nil {
		t.Fatal(err)
	}
	wrong, err := river.NewClient(riverpgxv5.New(h.pool), manual(explicit, "mismatch"))
	if err != nil {
		t.Fatal(err)
	}
	err = explicit.Attach(ctx, wrong, ffriver.AttachOptions{})
	if !errors.Is(err, ff.ErrValidation) || !strings.Contains(err.Error(), `"`+h.river.Schema+`"`) || !strings.Contains(err.Error(), "Config.RiverSchema") {
		t.Errorf("Attach with RiverSchema %s on a client of schema %s: %v, want a refusal naming both", h.ff.Schema, h.river.Schema, err)
	}

	began := time.Now()
	f, err := ffriver.New(ctx, h.pool, ffriver.Config{Schema: h.ff.Schema, Scanners: fastScanners()})
	if err != nil {
		t.Fatal(err)
	}
	client, err := river.NewClient(riverpgxv5.New(h.pool), manual(f, "manual"))
	if err != nil {
		t.Fatal(err)
	}
	const staleAfter = 3 * time.Second
	var logs syncBuf
	if err := f.Attach(ctx, client, ffriver.AttachOptions{TickStaleAfter: staleAfter, Logger: slog.New(slog.NewTextHandler(&logs, nil))}); err != nil {
		t.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Stop(context.Background()) })
	if f.RiverSchema() != h.river.Schema {
		t.Errorf("RiverSchema after Attach = %s, want the client's %s", f.RiverSchema(), h.river.Schema)
	}
	down := flowHop(t, f.Store())
	if n := h.advanceJobs(h.river.Schema); n != 1 {
		t.Errorf("%d ff.advance jobs in the client's river_job, want 1", n)
	}
	fftest.Await(t, 60*time.Second, "the downstream step's promotion", func() bool {
		e, err := f.Store().Get(ctx, down)
		return err == nil && e.EligibilityState == "eligible_now"
	})
	// Past the threshold, with ticks coming, CheckTicks says all is well.
	fftest.Await(t, 60*time.Second, "CheckTicks past the threshold", func() bool {
		return time.Since(began) > staleAfter && f.CheckTicks(ctx, staleAfter) == nil
	})
	if strings.Contains(logs.String(), "nothing is being scanned") {
		t.Errorf("the watchdog reported no scanning while the client scanned:\n%s", logs.String())
	}
}

// Issue 39, trap 4: Migrate without RiverSchema, the application's River
// off the search_path (named in river.Config.Schema), made a second River
// in ffriver's schema, said only at DEBUG. It warns, naming the other
// River and the setting.
func TestEmbedTrapMigrateSecondRiver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHostApp(t)
	pool := testdb.Connect(t, h.ff.Schema) // River's schema off the search_path
	t.Cleanup(pool.Close)
	var logs syncBuf
	res, err := migrations.Migrate(ctx, pool, h.ff.Schema, &migrations.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if res.RiverSchema != h.ff.Schema {
		t.Fatalf("River's tables went to %s", res.RiverSchema)
	}
	for _, want := range []string{"level=WARN", h.river.Schema, "Options.RiverSchema", "--river-schema"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("Migrate's log does not say %q:\n%s", want, logs.String())
		}
	}
}

// Issue 39, trap 5: an old process without ffriver leads River (a rolling
// deploy): nothing is scanned, and the watchdog said so only to
// Config.Logger, which discarded by default. With no logger given it
// reaches slog.Default(), and it names the leader. Not parallel: it
// replaces slog's default logger.
func TestEmbedTrapLeaderWithoutFFriverDefaultLogger(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := newHostApp(t)
	if _, err := migrations.Migrate(ctx, h.pool, h.ff.Schema, &migrations.Options{RiverSchema: h.river.Schema}); err != nil {
		t.Fatal(err)
	}
	h.start(t, h.config("old-leader"))
	fftest.Await(t, 90*time.Second, "the old client's leadership", func() bool {
		return h.Count(`SELECT count(*) FROM `+h.river.Schema+`.river_leader WHERE leader_id = 'old-leader' AND expires_at > now()`) == 1
	})
	var logs syncBuf
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.NewTextHandler(&logs, nil)))

	const staleAfter = time.Second
	f, err := ffriver.New(ctx, h.pool, ffriver.Config{Schema: h.ff.Schema, RiverSchema: h.river.Schema})
	if err != nil {
		t.Fatal(err)
	}
	rc := h.config("new")
	rc.LeaderElectionDisabled = true // it never gets to lead here
	if err := f.Configure(rc, 1, 1); err != nil {
		t.Fatal(err)
	}
	client, err := river.NewClient(riverpgxv5.New(h.pool), rc)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Attach(ctx, client, ffriver.AttachOptions{TickStaleAfter: staleAfter}); err != nil {
		t.Fatal(err)
	}
	fftest.Await(t, 60*time.Second, "the watchdog's warning in slog.Default()", func() bool {
		return strings.Contains(logs.String(), `River's leader \"old-leader\"`)
	})
	err = f.CheckTicks(ctx, staleAfter)
	var stale *ffriver.TicksStaleError
	if !errors.As(err, &stale) || stale.Leader != "old-leader" || !strings.Contains(err.Error(), "does not run ffriver") {
		t.Errorf("CheckTicks under old-leader = %v, want a *TicksStaleError naming it", err)
	}
}

// Issue 39, trap 3: a Store from executions.Open made flows slow without a
// word: its flow members' hops waited for the dependency sweep (16.6 s a
// hop instead of 0.5–1.2 s). It now warns on its logger the first time a
// member's transition leaves hops to the sweep, naming the fix, and says it
// again at most every 10 minutes; a Store told FlowsBySweep, and the Store
// of ffriver.New, say nothing.
func TestEmbedTrapOpenWithFlows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t, nil)
	open := func(cfg executions.Config) (*executions.Store, *syncBuf) {
		t.Helper()
		var logs syncBuf
		cfg.Schema = db.Schema
		cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		st, err := executions.Open(ctx, db.Pool, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return st, &logs
	}

	st, logs := open(executions.Config{})
	flowHop(t, st)
	flowHop(t, st)
	got := logs.String()
	if n := strings.Count(got, "level=WARN"); n != 1 ||
		!strings.Contains(got, "wait for the dependency sweep") || !strings.Contains(got, "ffriver.New(…).Store()") ||
		!strings.Contains(got, "executions.Config.FlowsBySweep") {
		t.Errorf("a Store from executions.Open completed two flow members; its log:\n%s\nwant one warning naming ffriver.New(…).Store() and executions.Config.FlowsBySweep", got)
	}

	st, logs = open(executions.Config{FlowsBySweep: true})
	flowHop(t, st)
	if got := logs.String(); got != "" {
		t.Errorf("a Store told FlowsBySweep logged:\n%s\nwant nothing", got)
	}

	var ffLogs syncBuf
	f, err := ffriver.New(ctx, db.Pool, ffriver.Config{Schema: db.Schema, Logger: slog.New(slog.NewTextHandler(&ffLogs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	flowHop(t, f.Store())
	if got := ffLogs.String(); strings.Contains(got, "dependency sweep") {
		t.Errorf("the Store of ffriver.New warned:\n%s", got)
	}
}
