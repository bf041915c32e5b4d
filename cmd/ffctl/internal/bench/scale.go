package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"time"

	"github.com/ffriver/ffriver"
	"github.com/ffriver/ffriver/cmd/ffctl/internal/status"
	"github.com/ffriver/ffriver/cmd/internal/cli"
	"github.com/ffriver/ffriver/cmd/internal/ffview"
	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/actions"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/internal/outboxretention"
	"github.com/ffriver/ffriver/outbox"
	"github.com/ffriver/ffriver/scanners"
	"github.com/ffriver/ffriver/subscribe"
	"github.com/ffriver/ffriver/workers"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ScaleOptions size the scale scenario.
type ScaleOptions struct {
	// Executions in the big store (default 10,000,000): a hundredth live
	// (active with a lease an hour long, waiting on lanes nobody claims,
	// delayed an hour), a tenth terminal within the retention (the last 6
	// days), the rest terminal past it (8 to 30 days ago).
	Executions int
	// Events in its outboxes (default 50,000,000): a completion event per
	// terminal execution, the rest lease events, over the last 30 days in
	// day partitions (written when they occurred).
	Events int
	// Reads sampled per operator read (default 200).
	Reads int
	// Lifecycle executions claimed and completed per run (default 20,000),
	// at Workers workers (default 64).
	Lifecycle, Workers int
	// Leases of the expire drain (default 20,000).
	Leases int
	// StreamDuration of the stream latency run at 1,000 events/s (default
	// 10 s); CatchUp events of the catch-up run (default 200,000).
	StreamDuration time.Duration
	CatchUp        int
	// RetentionFor bounds the execution retention pass (default 30 s): the
	// removal rate is what fits in it.
	RetentionFor time.Duration
}

func (o *ScaleOptions) defaults() {
	if o.Executions == 0 {
		o.Executions = 10_000_000
	}
	if o.Events == 0 {
		o.Events = 50_000_000
	}
	if o.Reads == 0 {
		o.Reads = 200
	}
	if o.Lifecycle == 0 {
		o.Lifecycle = 20_000
	}
	if o.Workers == 0 {
		o.Workers = 64
	}
	if o.Leases == 0 {
		o.Leases = 20_000
	}
	if o.StreamDuration == 0 {
		o.StreamDuration = 10 * time.Second
	}
	if o.CatchUp == 0 {
		o.CatchUp = 200_000
	}
	if o.RetentionFor == 0 {
		o.RetentionFor = 30 * time.Second
	}
}

// scaleFigures are one store's figures.
type scaleFigures struct {
	plain, runner, drain float64
	streamP50, streamP99 time.Duration
	catchUp              float64                     // the median of catchUps
	catchUps             []float64                   // each round's, events/s (scaleCatchUps)
	reads                map[string][2]time.Duration // p50, p99
}

// statusNewConn is the operator read of a status report on a new
// connection.
const statusNewConn = "status on a new connection"

// scaleReadCount is how many of reads the read called name samples: a
// tenth of them for a status on a new connection, which opens
// connections each time.
func scaleReadCount(name string, reads int) int {
	if name == statusNewConn {
		return max(reads/10, 1)
	}
	return reads
}

// scaleReads are the operator reads, in the order they are reported.
func scaleReads() []string {
	return []string{"exec get", "execution page", "list page", "status", statusNewConn}
}

// Scale measures ffriver on a store of production size against the same
// figures on an empty store, in one run (issue 27, item 4): it builds the
// big store by bulk SQL (timed), then on each store the application's
// claim → complete (plain API and runner, 64 workers by default), the expire drain
// (the pipeline, retention scanners off so they do not work the big
// store's backlog meanwhile), stream latency at 1,000 events/s, and the
// operator reads (exec get, the execution page, a list page, ffctl
// status); then stream catch-ups on both stores, alternated
// (scaleCatchUps); then one retention pass on the big store: its old
// outbox partitions dropped and its executions past retention removed for
// RetentionFor. Targets: throughput ≥ 0.8 of the empty store's, each read
// and the stream p99 ≤ 50 ms, retention leaving no dead tuple in the
// outboxes.
func Scale(ctx context.Context, env *Env, o ScaleOptions) ([]Result, error) {
	o.defaults()
	// The workers and a few more connections each; the pipeline's
	// processes open their own.
	conns := int32(o.Workers + 2)
	emptyPool, emptySchema, cleanEmpty, err := env.scratch(ctx, "scale_empty", conns)
	if err != nil {
		return nil, err
	}
	defer cleanEmpty()
	bigPool, bigSchema, cleanBig, err := env.scratch(ctx, "scale_big", conns)
	if err != nil {
		return nil, err
	}
	defer cleanBig()
	env.Logger.InfoContext(ctx, "bench scale: building the big store", "schema", bigSchema, "executions", o.Executions, "events", o.Events)
	began := time.Now()
	if err := buildScaleStore(ctx, env, bigPool, dbutil.Schema(bigSchema), o); err != nil {
		return nil, fmt.Errorf("building the big store: %w", err)
	}
	built := time.Since(began)
	env.Logger.InfoContext(ctx, "bench scale: built", "took", built.Round(time.Second))

	var figs [2]scaleFigures
	for i, s := range []struct {
		pool   *pgxpool.Pool
		schema string
	}{{emptyPool, emptySchema}, {bigPool, bigSchema}} {
		if figs[i], err = scaleMeasure(ctx, env, s.pool, s.schema, o); err != nil {
			return nil, fmt.Errorf("measuring %s: %w", s.schema, err)
		}
		s.pool.Reset() // its connections closed: the server's slots for the next
	}
	if err := scaleCatchUps(ctx, env, [2]*pgxpool.Pool{emptyPool, bigPool}, [2]string{emptySchema, bigSchema}, o.CatchUp, &figs); err != nil {
		return nil, err
	}
	pass, err := scaleRetention(ctx, env, bigPool, dbutil.Schema(bigSchema), o.RetentionFor)
	if err != nil {
		return nil, fmt.Errorf("retention pass: %w", err)
	}

	size := fmt.Sprintf("%d executions, %d events", o.Executions, o.Events)
	empty, big := figs[0], figs[1]
	tp := func(figure, unit string, b, e float64) Result {
		r := ratioF(b, e)
		return Result{Scenario: "scale", Figure: figure + " on " + size, Value: b, Unit: unit,
			Baseline: "empty store", BaselineValue: e, Ratio: r, Target: "≥ 0.8", Met: met(r >= 0.8)}
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	out := []Result{
		{Scenario: "scale", Figure: "building the big store by bulk SQL", Value: built.Seconds(), Unit: "s", Note: size},
		tp(fmt.Sprintf("plain API claim → complete, %d workers", o.Workers), "execs/s", big.plain, empty.plain),
		tp(fmt.Sprintf("runner, %d workers", o.Workers), "execs/s", big.runner, empty.runner),
		tp(fmt.Sprintf("expire drain of %d leases", o.Leases), "leases/s", big.drain, empty.drain),
		withNote(tp(fmt.Sprintf("stream catch-up of %d events", o.CatchUp), "events/s", big.catchUp, empty.catchUp),
			fmt.Sprintf("median of %d rounds each, the stores alternated: %s events/s (empty store %s)", scaleCatchUpRounds, rates(big.catchUps), rates(empty.catchUps))),
		{Scenario: "scale", Figure: "stream commit → consumer p99 at 1,000 events/s on " + size, Value: ms(big.streamP99), Unit: "ms",
			Baseline: "empty store", BaselineValue: ms(empty.streamP99), Ratio: ratioF(ms(big.streamP99), ms(empty.streamP99)),
			Target: "≤ 50 ms", Met: met(big.streamP99 <= 50*time.Millisecond),
			Note: fmt.Sprintf("p50 %.2f ms (empty store %.2f ms)", ms(big.streamP50), ms(empty.streamP50))},
	}
	for _, name := range scaleReads() {
		b, e := big.reads[name], empty.reads[name]
		out = append(out, Result{Scenario: "scale", Figure: name + " p99 on " + size, Value: ms(b[1]), Unit: "ms",
			Baseline: "empty store", BaselineValue: ms(e[1]), Ratio: ratioF(ms(b[1]), ms(e[1])),
			Target: "≤ 50 ms", Met: met(b[1] <= 50*time.Millisecond),
			Note: fmt.Sprintf("p50 %.2f ms (empty store %.2f ms), %d reads", ms(b[0]), ms(e[0]), scaleReadCount(name, o.Reads))})
	}
	out = append(out,
		Result{Scenario: "scale", Figure: "retention pass: outbox events dropped with their partitions", Value: pass.eventsRate, Unit: "events/s",
			Note: fmt.Sprintf("%d events in %d partitions in %s, %.2f B of WAL per event, %d dead tuples left in the outboxes",
				pass.events, pass.partitions, pass.eventsTook.Round(time.Millisecond), pass.eventsWAL, pass.outboxDead),
			Target: "0 dead tuples", Met: met(pass.outboxDead == 0)},
		Result{Scenario: "scale", Figure: "retention pass: executions removed (with attempts)", Value: pass.execsRate, Unit: "execs/s",
			Note: fmt.Sprintf("%d executions in %s, %.0f B of WAL per execution, %d dead tuples left for autovacuum in ff_exec_core and ff_attempt",
				pass.execs, pass.execsTook.Round(time.Millisecond), pass.execsWAL, pass.execDead)},
	)
	return out, nil
}

// buildScaleStore fills a migrated, empty schema with o's rows.
func buildScaleStore(ctx context.Context, env *Env, pool *pgxpool.Pool, s dbutil.Schema, o ScaleOptions) error {
	const day = 24 * time.Hour
	now := time.Now().UnixMilli()
	dayMs := day.Milliseconds()
	today := now / dayMs * dayMs
	// Day partitions of both outboxes for the last 31 days, today's
	// included, so that the events land in them as they would have.
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for _, t := range []string{outbox.LeaseTable, outbox.CompletionTable} {
			for d := int64(30); d >= 0; d-- {
				if _, err := outboxretention.AttachPartition(ctx, tx, s, t, today-d*dayMs, today-(d-1)*dayMs); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	n := o.Executions
	terminal := n - n/100
	completions := terminal
	leaseEvents := max(o.Events-completions, 0)
	args := pgx.NamedArgs{"n": n, "live": n / 100, "recent": n / 10, "now": now, "day": dayMs, "events": leaseEvents}
	// Executions i in 1..n: i <= live are live (a third each active,
	// waiting, delayed), the next tenth terminal in the last 6 days, the
	// rest 8 to 30 days ago. ids md5('ffscale' || i), partition i % 256.
	steps := []struct{ what, sql string }{
		{"executions", `INSERT INTO {S}ff_exec_core (partition_key, execution_id, lane_id, attempt_index, lifecycle_phase, ownership_state,
		     eligibility_state, public_state, attempt_state, created_at_ms, terminal_at_ms, delay_until_ms, raw_fields)
		SELECT (i % 256)::smallint, md5('ffscale' || i)::uuid, 'scale-' || (i % 16), 0,
		       CASE WHEN k = 0 THEN 'active' WHEN k < 3 THEN 'runnable' ELSE 'terminal' END,
		       CASE WHEN k = 0 THEN 'leased' ELSE 'unowned' END,
		       CASE WHEN k = 1 THEN 'eligible_now' WHEN k = 2 THEN 'not_eligible_until_time' ELSE 'not_applicable' END,
		       CASE WHEN k = 0 THEN 'active' WHEN k = 1 THEN 'waiting' WHEN k = 2 THEN 'delayed' ELSE 'completed' END,
		       CASE WHEN k = 0 THEN 'running_attempt' WHEN k < 3 THEN 'pending_first_attempt' ELSE 'attempt_terminal' END,
		       t - 1000, CASE WHEN k = 3 THEN t END, CASE WHEN k = 2 THEN @now::bigint + 3600000 END,
		       jsonb_build_object('namespace', 'ns-' || (i % 4))
		FROM generate_series(@lo::int, @hi::int) i,
		     LATERAL (SELECT CASE WHEN i <= @live::int THEN i % 3 ELSE 3 END AS k,
		                     CASE WHEN i <= @live::int THEN @now::bigint - 60000
		                          WHEN i <= @live::int + @recent::int THEN @now::bigint - (i::bigint * 7919 % (6 * @day::bigint))
		                          ELSE @now::bigint - 8 * @day::bigint - (i::bigint * 7919 % (22 * @day::bigint)) END AS t) x`},
		{"attempts", `INSERT INTO {S}ff_attempt (partition_key, execution_id, attempt_index, worker_id, lease_id, lease_epoch,
		     lease_expires_at_ms, started_at_ms, terminal_at_ms, outcome)
		SELECT partition_key, execution_id, 0, 'scale-worker', md5('lease' || execution_id)::uuid, 1,
		       CASE WHEN lifecycle_phase = 'active' THEN @now::bigint + 3600000 END,
		       created_at_ms, terminal_at_ms, CASE WHEN lifecycle_phase = 'terminal' THEN 'success' END
		FROM {S}ff_exec_core WHERE lifecycle_phase IN ('active', 'terminal')
		  AND execution_id >= @ulo::uuid AND execution_id < @uhi::uuid`},
		{"completion events", `INSERT INTO {S}ff_completion_event (partition_key, execution_id, outcome, namespace, occurred_at_ms,
		     committed_at_ms, dispatched_at_ms, written_at_ms)
		SELECT partition_key, execution_id, 'success', raw_fields->>'namespace', terminal_at_ms, terminal_at_ms, terminal_at_ms, terminal_at_ms
		FROM {S}ff_exec_core WHERE lifecycle_phase = 'terminal' AND terminal_at_ms >= @now::bigint - 30 * @day::bigint
		  AND execution_id >= @ulo::uuid AND execution_id < @uhi::uuid`},
		{"lease events", `INSERT INTO {S}ff_lease_event (execution_id, lease_id, event_type, occurred_at_ms, partition_key, namespace,
		     attempt_index, lease_epoch, worker_instance_id, written_at_ms)
		SELECT md5('ffscale' || e)::uuid::text, md5('lease' || md5('ffscale' || e)::uuid)::uuid::text,
		       (ARRAY['acquired', 'renewed', 'renewed', 'revoked'])[1 + j % 4], at, e % 256, 'ns-' || (e % 4), 0, 1, 'scale-worker', at
		FROM generate_series(@lo::int, @hi::int) j,
		     LATERAL (SELECT 1 + (j::bigint * 7919) % @n::int AS e,
		                     @now::bigint - 30 * @day::bigint + 1000 + (j::bigint * (30 * @day::bigint - 2000) / greatest(@events::int, 1)) AS at) x`},
	}
	const chunk = 500_000
	for _, st := range steps {
		began := time.Now()
		switch st.what {
		case "executions", "lease events":
			total := n
			if st.what == "lease events" {
				total = leaseEvents
			}
			for lo := 1; lo <= total; lo += chunk {
				args["lo"], args["hi"] = lo, min(lo+chunk-1, total)
				if _, err := pool.Exec(ctx, s.SQL(st.sql), args); err != nil {
					return fmt.Errorf("%s: %w", st.what, err)
				}
			}
		default:
			// By ranges of execution ids, 16 slices of the uuid space.
			for k := range 16 {
				args["ulo"] = fmt.Sprintf("%x0000000-0000-0000-0000-000000000000", k)
				args["uhi"] = "ffffffff-ffff-ffff-ffff-ffffffffffff"
				if k < 15 {
					args["uhi"] = fmt.Sprintf("%x0000000-0000-0000-0000-000000000000", k+1)
				}
				if _, err := pool.Exec(ctx, s.SQL(st.sql), args); err != nil {
					return fmt.Errorf("%s: %w", st.what, err)
				}
			}
		}
		env.Logger.InfoContext(ctx, "bench scale: built "+st.what, "took", time.Since(began).Round(time.Second))
	}
	// River's completed jobs, a twentieth of the executions, finalized over
	// the last half of River's retention (ffriver.DefaultCompletedRetention):
	// still kept while the big store is measured, as a River whose job
	// cleaner keeps up keeps them. Seeded an hour old, the whole table was
	// past the retention by then, and River's job cleaner deleted it during
	// the expire drain (500,000 jobs at full size): an empty store seeded
	// so drained 0.72-0.75 as fast as one seeded within the retention.
	if _, err := pool.Exec(ctx, s.SQL(`INSERT INTO {S}river_job (args, kind, max_attempts, queue, state, attempt, attempted_at, scheduled_at, finalized_at)
		SELECT jsonb_build_object('id', '{fp:' || (i % 256) || '}:' || md5('ffscale' || i)::uuid, 'attempt_index', 0),
		       'ff.expire_attempt', 25, 'ff_apply', 'completed', 1, at, at, at
		FROM generate_series(1, @jobs::int) i,
		     LATERAL (SELECT now() - make_interval(secs => i % @spread::int) AS at) x`),
		pgx.NamedArgs{"jobs": n / 20, "spread": int((ffriver.DefaultCompletedRetention / 2).Seconds())}); err != nil {
		return fmt.Errorf("river jobs: %w", err)
	}
	_, err = pool.Exec(ctx, `VACUUM ANALYZE`)
	return err
}

// scaleMeasure takes one store's figures.
func scaleMeasure(ctx context.Context, env *Env, pool *pgxpool.Pool, schema string, o ScaleOptions) (scaleFigures, error) {
	var f scaleFigures
	st, err := executions.Open(ctx, pool, executions.Config{Schema: schema})
	if err != nil {
		return f, err
	}
	// The application's path.
	if err := createExecutions(ctx, pool, st, o.Lifecycle); err != nil {
		return f, err
	}
	if f.plain, err = claimComplete(ctx, st, o.Lifecycle, o.Workers); err != nil {
		return f, err
	}
	if err := createExecutions(ctx, pool, st, o.Lifecycle); err != nil {
		return f, err
	}
	if f.runner, err = runLane(ctx, env, pool, st, o.Lifecycle, o.Workers, 0); err != nil {
		return f, err
	}
	env.Logger.InfoContext(ctx, "bench scale: lifecycle", "schema", schema, "plain_per_sec", int(f.plain), "runner_per_sec", int(f.runner))
	pool.Reset() // the workers' connections closed: the pipeline's processes open their own
	// The expire drain, without the retention scanners.
	d, err := expirePipeline(ctx, env, pool, schema, ExpireOptions{Leases: o.Leases, Pipeline: PipelineOptions{
		Scanners: map[string]workers.Settings{scanners.OutboxRetention: {Disabled: true}, scanners.ExecutionRetention: {Disabled: true}}}})
	if err != nil {
		return f, err
	}
	f.drain = d.rate
	env.Logger.InfoContext(ctx, "bench scale: expire drain", "schema", schema, "leases_per_sec", int(f.drain))
	// Streams, written by a store with a Waker, as the processes' are.
	leases, err := streamLeases(ctx, pool, schema, 16, 8)
	if err != nil {
		return f, err
	}
	lat, err := latencyWithWaker(ctx, env, pool, schema, leases, 1000, o.StreamDuration, outbox.DefaultWakeInterval)
	if err != nil {
		return f, err
	}
	f.streamP50, f.streamP99 = lat.p50, lat.p99
	env.Logger.InfoContext(ctx, "bench scale: streams", "schema", schema, "p50", lat.p50, "p99", lat.p99)
	// Operator reads.
	if f.reads, err = scaleReadLatencies(ctx, pool, st, schema, o.Reads); err != nil {
		return f, err
	}
	return f, nil
}

// scaleCatchUpRounds is how many catch-ups scaleCatchUps runs on each
// store: it reports their median (an odd count: the middle one). One
// catch-up of 200,000 events lasts 0.2-0.3 s, and the same store's moved
// from 648,000 to 1,142,000 events/s between two runs in a row on the
// 2-core VM.
const scaleCatchUpRounds = 5

// scaleCatchUps runs scaleCatchUpRounds catch-ups of n events on each
// store, the stores alternated round by round (empty, big, empty, ...), so
// that both see the machine as it is at the same minutes: measured a store
// after the other, minutes apart, the ratio moved with the machine's load
// (0.47 to 0.79 in three rounds of one run). It records each store's rounds
// and median in figs.
func scaleCatchUps(ctx context.Context, env *Env, pools [2]*pgxpool.Pool, schemas [2]string, n int, figs *[2]scaleFigures) error {
	for range scaleCatchUpRounds {
		for i := range pools {
			r, err := scaleCatchUp(ctx, pools[i], schemas[i], n)
			if err != nil {
				return fmt.Errorf("catch-up on %s: %w", schemas[i], err)
			}
			figs[i].catchUps = append(figs[i].catchUps, r)
		}
	}
	for i := range figs {
		figs[i].catchUp = quantile(slices.Sorted(slices.Values(figs[i].catchUps)), 0.5)
		env.Logger.InfoContext(ctx, "bench scale: catch-up", "schema", schemas[i], "per_sec", int(figs[i].catchUp))
	}
	return nil
}

// scaleCatchUp writes n lease events after the stream's current position
// and returns how fast a stream resuming from there reads them.
func scaleCatchUp(ctx context.Context, pool *pgxpool.Pool, schema string, n int) (float64, error) {
	s, err := subscribe.Leases(ctx, pool, subscribe.Options{Schema: schema, Start: subscribe.StartNow})
	if err != nil {
		return 0, err
	}
	from := s.StartCursor()
	s.Close()
	if err := fillEvents(ctx, pool, dbutil.Schema(schema), n, time.Now().UnixMilli(), nil); err != nil {
		return 0, err
	}
	s, err = subscribe.Leases(ctx, pool, subscribe.Options{Schema: schema, Start: subscribe.StartAfter, After: from})
	if err != nil {
		return 0, err
	}
	defer s.Close()
	began := time.Now()
	for got := 0; got < n; got++ {
		if _, err := s.Next(ctx); err != nil {
			return 0, fmt.Errorf("catching up, after %d of %d events: %w", got, n, err)
		}
	}
	return float64(n) / time.Since(began).Seconds(), nil
}

// withNote returns r with note.
func withNote(r Result, note string) Result {
	r.Note = note
	return r
}

// rates writes xs as whole numbers, comma-separated.
func rates(xs []float64) string {
	var parts []string
	for _, x := range xs {
		parts = append(parts, fmt.Sprintf("%.0f", x))
	}
	return strings.Join(parts, ", ")
}

// scaleReadLatencies times reads reads of each operator read on ids picked
// across the store (its own executions and the seeded ones).
func scaleReadLatencies(ctx context.Context, pool *pgxpool.Pool, st *executions.Store, schema string, reads int) (map[string][2]time.Duration, error) {
	// A sample of the table's pages (a small table's may be empty: then
	// any rows).
	var ids []ff.ExecutionID
	for _, q := range []string{`SELECT partition_key, execution_id FROM ff_exec_core TABLESAMPLE SYSTEM (1) LIMIT $1`,
		`SELECT partition_key, execution_id FROM ff_exec_core LIMIT $1`} {
		rows, err := pool.Query(ctx, q, reads)
		if err != nil {
			return nil, err
		}
		if ids, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (ff.ExecutionID, error) {
			var id ff.ExecutionID
			var u uuid.UUID
			err := r.Scan(&id.Partition, &u)
			id.UUID = u
			return id, err
		}); err != nil {
			return nil, err
		}
		if len(ids) > 0 {
			break
		}
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("no execution to read in %s", schema)
	}
	view, err := ffview.New(st, ffview.Options{})
	if err != nil {
		return nil, err
	}
	svc, err := ffriver.New(ctx, pool, ffriver.Config{Schema: schema})
	if err != nil {
		return nil, err
	}
	page := func(path string) error {
		rec := httptest.NewRecorder()
		view.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, path, nil))
		if rec.Code != http.StatusOK {
			return fmt.Errorf("GET %s: %d", path, rec.Code)
		}
		return nil
	}
	lanes := []string{"", "scale-3", lifecycleLane}
	states := []string{"", "active", "completed", "waiting"}
	do := map[string]func(i int) error{
		"exec get": func(i int) error {
			if _, err := st.Get(ctx, ids[i]); err != nil {
				return err
			}
			_, err := st.History(ctx, ids[i], 20)
			return err
		},
		"execution page": func(i int) error { return page("/ff/executions/" + ids[i].String()) },
		"list page": func(i int) error {
			return page(fmt.Sprintf("/ff/executions?lane=%s&state=%s", lanes[i%len(lanes)], states[i%len(states)]))
		},
		"status": func(int) error {
			_, err := status.Collect(ctx, pool, svc, scanners.DefaultOutboxRetention)
			return err
		},
		// As an operator's ffctl status reads it, less the process's
		// start: a new pool of two connections that sends its statements
		// unprepared, the service opened on it, the report and its ticks
		// (River's leader, each scanner's last tick). Each new connection
		// plans every statement and loads the catalog entries of every
		// table and index it reads.
		statusNewConn: func(int) error {
			cfg := pool.Config().Copy()
			cfg.MaxConns, cfg.MinConns = 2, 0
			cli.UnpreparedStatements(cfg)
			fresh, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				return err
			}
			defer fresh.Close()
			f, err := ffriver.New(ctx, fresh, ffriver.Config{Schema: schema})
			if err != nil {
				return err
			}
			if _, err = status.Collect(ctx, fresh, f, scanners.DefaultOutboxRetention); err != nil {
				return err
			}
			_, err = f.Ticks(ctx, 0)
			return err
		},
	}
	out := map[string][2]time.Duration{}
	for _, name := range scaleReads() {
		var took []time.Duration
		for i := range reads {
			if i >= scaleReadCount(name, reads) {
				break
			}
			began := time.Now()
			if err := do[name](i % len(ids)); err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			took = append(took, time.Since(began))
		}
		slices.Sort(took)
		out[name] = [2]time.Duration{quantile(took, 0.5), quantile(took, 0.99)}
	}
	return out, nil
}

// scaleRetentionPass is what one retention pass removed from the big store.
type scaleRetentionPass struct {
	events, partitions    int64
	eventsTook            time.Duration
	eventsRate, eventsWAL float64
	outboxDead            int64
	execs                 int64
	execsTook             time.Duration
	execsRate, execsWAL   float64
	execDead              int64
}

// scaleRetention runs one retention pass of the default retention on the
// big store: the outboxes' old partitions dropped (every one past the
// retention, as the outbox_retention jobs do), then executions past it
// removed partition by partition, a batch per transaction (what the
// ff.remove_executions jobs do), for at most d.
func scaleRetention(ctx context.Context, env *Env, pool *pgxpool.Pool, s dbutil.Schema, d time.Duration) (scaleRetentionPass, error) {
	var p scaleRetentionPass
	lsn := func() (string, error) {
		var l string
		err := pool.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&l)
		return l, err
	}
	walSince := func(l string) (int64, error) {
		var b int64
		err := pool.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), $1::pg_lsn)::bigint`, l).Scan(&b)
		return b, err
	}
	now := time.Now().UnixMilli()
	cutoff := now - scanners.DefaultOutboxRetention.Milliseconds()
	l0, err := lsn()
	if err != nil {
		return p, err
	}
	began := time.Now()
	for _, t := range []string{outbox.LeaseTable, outbox.CompletionTable} {
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			r, err := outboxretention.MaintainPartitions(ctx, tx, s, outboxretention.Maintenance{Table: t, CutoffMs: cutoff, NowMs: now})
			p.events += r.DroppedEvents
			p.partitions += int64(len(r.Dropped))
			return err
		})
		if err != nil {
			return p, err
		}
	}
	p.eventsTook = time.Since(began)
	wal, err := walSince(l0)
	if err != nil {
		return p, err
	}
	p.eventsRate = ratioF(float64(p.events), p.eventsTook.Seconds())
	p.eventsWAL = ratioF(float64(wal), float64(p.events))
	if err := pool.QueryRow(ctx, s.SQL(`SELECT coalesce(sum(n_dead_tup), 0)::bigint FROM pg_stat_user_tables
		WHERE schemaname = $1 AND (relname LIKE 'ff_lease_event%' OR relname LIKE 'ff_completion_event%')`), string(s)).Scan(&p.outboxDead); err != nil {
		return p, err
	}
	env.Logger.InfoContext(ctx, "bench scale: outbox partitions dropped", "events", p.events, "partitions", p.partitions, "took", p.eventsTook)

	st, err := executions.Open(ctx, pool, executions.Config{Schema: string(s)})
	if err != nil {
		return p, err
	}
	l0, err = lsn()
	if err != nil {
		return p, err
	}
	began = time.Now()
	deadline := began.Add(d)
	execCutoff := now - scanners.DefaultExecutionRetention.Milliseconds()
	for part := int16(0); part < int16(st.Partitions()) && time.Now().Before(deadline); part++ {
		params := actions.RemoveParams{Partition: part, CutoffMs: execCutoff, Limit: 1000}
		for time.Now().Before(deadline) {
			var r actions.RemoveResult
			err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
				var err error
				r, err = actions.Of(st.Pipeline()).RemoveExecutions(ctx, tx, params)
				return err
			})
			if err != nil {
				return p, err
			}
			p.execs += r.Executions
			if !r.Full(params.Limit) {
				break
			}
			if r.Next != nil {
				params.After = r.Next
			}
		}
	}
	p.execsTook = time.Since(began)
	if wal, err = walSince(l0); err != nil {
		return p, err
	}
	p.execsRate = ratioF(float64(p.execs), p.execsTook.Seconds())
	p.execsWAL = ratioF(float64(wal), float64(p.execs))
	if _, err := pool.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
		return p, err
	}
	if err := pool.QueryRow(ctx, `SELECT coalesce(sum(n_dead_tup), 0)::bigint FROM pg_stat_user_tables
		WHERE schemaname = $1 AND relname IN ('ff_exec_core', 'ff_attempt')`, string(s)).Scan(&p.execDead); err != nil {
		return p, err
	}
	return p, nil
}
