package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/internal/outboxretention"
	"github.com/ffriver/ffriver/outbox"
	"github.com/ffriver/ffriver/scanners"
	"github.com/ffriver/ffriver/workers"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// SoakOptions size the soak scenario.
type SoakOptions struct {
	// Duration of the load (default 30 minutes).
	Duration time.Duration
	// Rate is the transitions per second the load generator paces itself
	// to (default 2,000); Soak says what a transition is.
	Rate int
	// Retention of the outbox, of terminal executions and of River's
	// completed jobs alike (default 5 minutes).
	Retention time.Duration
	// Sample is the time between two readings of the sizes, dead tuples
	// and throughput (default 1 minute).
	Sample time.Duration
	// Workers are the load generator's goroutines (default 32).
	Workers int
	// Vacuum, when positive, stands in for autovacuum on a server that
	// runs without it: every Vacuum (autovacuum's naptime is a minute),
	// the bench vacuums and analyzes the scratch schema's tables that
	// autovacuum would, by the server's thresholds and cost delay. 0: the
	// server's autovacuum alone (the report says whether it is on).
	Vacuum time.Duration
	// Plot, when set, receives the samples drawn as an SVG document:
	// sizes, throughput and dead tuples over time.
	Plot io.Writer
	// PlotSubtitle is the plot's subtitle (the machine, say).
	PlotSubtitle string
}

// Soak defaults (issue 27's compressed soak).
const (
	DefaultSoakDuration  = 30 * time.Minute
	DefaultSoakRate      = 2000
	DefaultSoakRetention = 5 * time.Minute
	DefaultSoakSample    = time.Minute
	defaultSoakWorkers   = 32
	// soakLanes spread the executions over lanes, and so over partitions,
	// as an application's queues would.
	soakLanes = 8
	// transitionsPerExecution: create, claim, complete.
	transitionsPerExecution = 3
)

// Soak runs the store under a steady load for Duration with every
// retention set to Retention, in a scratch schema, and samples every
// Sample how big it is, how many dead tuples it holds and what throughput
// the load achieved. Targets (issue 27): the total bytes at the end within
// 1.3× of the first sample at or after the first retention window, the
// last sample's throughput at least 0.9 of the first's, and no dead tuple
// left in the outboxes by retention.
//
// The background work runs as in production: ffriver's pipeline (a
// scheduler and a worker, startPipeline) with OutboxRetention,
// ExecutionRetention and River's completed-job retention
// (ffriver.ClientOptions.CompletedJobRetention, ffscheduler's
// --completed-retention) all set to Retention, and the outbox_retention
// and execution_retention scanners ticking every Retention/20 (between 1 s
// and their default minute: 15 s for 5 minutes). At their default minute
// a 5-minute retention would hold up to a fifth more than it keeps: an
// event is dropped with its partition between Retention and Retention
// plus a partition width (a minute for 5 minutes, outboxretention.PartitionWidth)
// plus an interval after it was written, and an execution removed up to
// an interval after Retention; at Retention/20 the interval adds 5 %.
// The load starts once both outboxes have a time partition covering the
// clock, so the DEFAULT partitions stay empty, as they do under a running
// scheduler (each sample counts their rows to show it).
//
// The load is the application's path through the plain API: Workers
// goroutines, spread over 8 lanes, each taking a token from a pacer, then
// creating an execution (executions.Store.Create), claiming one in the
// same lane (Claim, Max 1) and completing it (Complete) with its outbox
// rows: a lease event on the claim, a lease event and a completion event
// on the completion. A transition is one of these three state changes
// committed (create → waiting, claim → active, complete → completed), so
// an execution is 3 transitions, and a Rate of 2,000 is about 667
// executions created, claimed and completed per second. The pacer hands
// out tokens at Rate/3 per second every 10 ms into a bucket of half a
// second's worth; tokens the workers leave there are dropped (the
// achieved rate then falls short of Rate, and the report says by how
// many executions). Each sample's rate is the transitions committed in
// its window, counted as each call returns.
//
// Each sample reads, in the scratch schema, pg_total_relation_size
// (tables, their indexes and TOAST) of every table, the outboxes' time
// partitions and DEFAULT partitions included (a partitioned table has no
// storage of its own), and River's tables (river_job and the small ones,
// counted as "other"); n_dead_tup of each from pg_stat_user_tables; the
// count of each outbox's time partitions and the rows in its DEFAULT
// partition; and the age of the oldest transaction holding a snapshot in
// the database, any session's (what it may still see, no vacuum removes:
// on a shared server, another's long transaction keeps dead tuples here
// too). The dead tuples are the other backends' counts as they last
// flushed them (PostgreSQL 15: a busy backend at most once a second, one
// that went idle within 10 s; pg_stat_force_next_flush would only flush
// the sampler's own, which writes nothing), so they may lag that much.
// The outboxes are insert-only and retention drops their partitions whole,
// so their dead tuples should stay 0 (an aborted insert would leave one);
// execution retention deletes rows in batches and the transitions update
// them, so ff_exec_core's, ff_attempt's, ff_exec_removed's and river_job's
// dead tuples come and go with autovacuum: they are reported as read.
//
// Those tables stay flat only if something vacuums them. The report says
// whether the server's autovacuum is on; on a server that runs without it
// (some CI configurations), Vacuum has the bench do autovacuum's work on
// the scratch schema, and the report says so and how many vacuums it ran.
func Soak(ctx context.Context, env *Env, o SoakOptions) ([]Result, error) {
	if o.Duration == 0 {
		o.Duration = DefaultSoakDuration
	}
	if o.Rate == 0 {
		o.Rate = DefaultSoakRate
	}
	if o.Retention == 0 {
		o.Retention = DefaultSoakRetention
	}
	if o.Sample == 0 {
		o.Sample = DefaultSoakSample
	}
	if o.Workers == 0 {
		o.Workers = defaultSoakWorkers
	}
	if o.Duration < 0 || o.Rate < 0 || o.Retention < 0 || o.Sample < 0 || o.Workers < 0 || o.Vacuum < 0 {
		return nil, errors.New("bench: soak: negative option")
	}
	pool, schema, cleanup, err := env.scratch(ctx, "soak", 2)
	if err != nil {
		return nil, err
	}
	defer cleanup()
	interval := soakScanInterval(o.Retention)
	p, err := startPipeline(ctx, env, schema, PipelineOptions{
		OutboxRetention: o.Retention, ExecutionRetention: o.Retention, CompletedJobRetention: o.Retention,
		Scanners: map[string]workers.Settings{
			scanners.OutboxRetention:    {Interval: interval},
			scanners.ExecutionRetention: {Interval: interval},
		}})
	if err != nil {
		return nil, err
	}
	defer p.stop()
	if err := awaitPartitions(ctx, pool, 2*interval+time.Minute); err != nil {
		return nil, err
	}
	loadPool, err := env.poolFor(ctx, schema, "ffbench-soak-load", int32(min(o.Workers, 16)+4))
	if err != nil {
		return nil, err
	}
	defer loadPool.Close()
	st, err := executions.Open(ctx, loadPool, executions.Config{Schema: schema})
	if err != nil {
		return nil, err
	}
	var autovacuum string
	if err := pool.QueryRow(ctx, `SELECT current_setting('autovacuum')`).Scan(&autovacuum); err != nil {
		return nil, fmt.Errorf("bench: soak: %w", err)
	}
	if autovacuum != "on" && o.Vacuum == 0 {
		env.Logger.WarnContext(ctx, "bench soak: the server runs with autovacuum off: the dead tuples of updated and deleted rows "+
			"are never reclaimed, and the tables they are in grow (--soak-vacuum 1m stands in for autovacuum)")
	}
	vac := &standInVacuum{schema: schema, interval: o.Vacuum}
	vacDone := make(chan error, 1)
	if o.Vacuum > 0 {
		if vac.pool, err = env.poolFor(ctx, schema, "ffbench-soak-vacuum", 1); err != nil {
			return nil, err
		}
		defer vac.pool.Close()
		vacCtx, stopVac := context.WithCancel(ctx)
		go func() { vacDone <- vac.run(vacCtx) }()
		defer func() { stopVac(); <-vacDone }()
	}
	env.Logger.InfoContext(ctx, "bench soak: load starts", "duration", o.Duration, "rate", o.Rate, "retention", o.Retention,
		"sample", o.Sample, "autovacuum", autovacuum, "stand_in_vacuum", o.Vacuum, "retention_scan_interval", interval, "partition_width", outboxretention.PartitionWidth(o.Retention))

	load := &soakLoad{st: st, perSec: float64(o.Rate) / transitionsPerExecution}
	stop := make(chan struct{})
	loadDone := make(chan error, 1)
	go func() { loadDone <- load.run(ctx, stop, o.Workers) }()
	stopLoad := sync.OnceValue(func() error { close(stop); return <-loadDone })
	defer func() { _ = stopLoad() }()

	start := time.Now()
	var samples []soakSample
	lastN, lastT := int64(0), start
	for k := 1; ; k++ {
		at := min(time.Duration(k)*o.Sample, o.Duration)
		timer := time.NewTimer(time.Until(start.Add(at)))
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, ctx.Err()
		case err := <-loadDone:
			timer.Stop()
			loadDone <- err // for stopLoad
			return nil, fmt.Errorf("bench: soak: the load stopped at %s: %w", time.Since(start).Round(time.Second), err)
		case err := <-vacDone:
			timer.Stop()
			vacDone <- err // for the deferred stop
			// It stops without an error only when ctx ends.
			if err == nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("bench: soak: %w", err)
		case <-timer.C:
		}
		n, now := load.transitions.Load(), time.Now()
		s, err := readSoakSample(ctx, pool, schema)
		if err != nil {
			return nil, err
		}
		s.at, s.rate, s.vacuums = at, float64(n-lastN)/now.Sub(lastT).Seconds(), vac.vacuums.Load()
		lastN, lastT = n, now
		samples = append(samples, s)
		env.Logger.InfoContext(ctx, "bench soak", "t", at, "total_mib", fmt.Sprintf("%.1f", mib(s.total())),
			"transitions_per_sec", int(s.rate), "dead_tuples", s.deadTotal(),
			"partitions", fmt.Sprintf("%d+%d", s.partitions[0], s.partitions[1]), "executions", s.execs,
			"oldest_transaction", s.oldestXact.Round(time.Second))
		if at >= o.Duration {
			break
		}
	}
	total, elapsed := load.transitions.Load(), time.Since(start)
	if err := stopLoad(); err != nil {
		return nil, fmt.Errorf("bench: soak: the load: %w", err)
	}
	if o.Plot != nil {
		if err := soakPlot(o.Plot, o, autovacuum, samples); err != nil {
			return nil, fmt.Errorf("bench: soak: the plot: %w", err)
		}
	}
	return soakResults(o, autovacuum, samples, float64(total)/elapsed.Seconds(), load.dropped.Load()), nil
}

// soakScanInterval is the retention scanners' interval for a retention:
// a twentieth of it, between 1 s and the scanners' default minute.
func soakScanInterval(retention time.Duration) time.Duration {
	return min(max(retention/20, time.Second), time.Minute)
}

// awaitPartitions waits until both outboxes have a time partition covering
// the database's clock: the outbox_retention job has run and the margin
// before its first partition (5 s) has passed.
func awaitPartitions(ctx context.Context, pool *pgxpool.Pool, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(DISTINCT stream) FROM ff_outbox_partition,
			LATERAL (SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now_ms) c
			WHERE lo_ms <= now_ms AND hi_ms > now_ms`).Scan(&n); err != nil {
			return fmt.Errorf("bench: soak: reading the outbox partitions: %w", err)
		}
		if n == 2 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: soak: no time partition covers the clock after %s: the outbox_retention scanner does not run", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// soakLoad is the paced load generator.
type soakLoad struct {
	st     *executions.Store
	perSec float64 // executions per second
	// transitions committed, and executions the pacer dropped because
	// every worker was busy.
	transitions, dropped atomic.Int64
}

// run paces workers goroutines until stop is closed; each finishes the
// execution it is on.
func (l *soakLoad) run(ctx context.Context, stop <-chan struct{}, workers int) error {
	tokens := make(chan struct{}, max(1, int(l.perSec/2)))
	var wg sync.WaitGroup
	wg.Go(func() { l.pace(ctx, stop, tokens) })
	err := eachWorker(ctx, workers, func(ctx context.Context, w int) error {
		return l.work(ctx, stop, tokens, w)
	})
	wg.Wait()
	return err
}

// pace puts perSec tokens a second into tokens, every 10 ms, dropping
// those that do not fit.
func (l *soakLoad) pace(ctx context.Context, stop <-chan struct{}, tokens chan<- struct{}) {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	start, issued := time.Now(), int64(0)
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case now := <-t.C:
			for want := int64(now.Sub(start).Seconds() * l.perSec); issued < want; issued++ {
				select {
				case tokens <- struct{}{}:
				default:
					l.dropped.Add(1)
				}
			}
		}
	}
}

// work is one load goroutine: per token, create an execution in its lane,
// claim one there and complete it.
func (l *soakLoad) work(ctx context.Context, stop <-chan struct{}, tokens <-chan struct{}, w int) error {
	lane := fmt.Sprintf("bench-soak-%d", w%soakLanes)
	cp := executions.ClaimParams{Lane: lane, WorkerID: "bench-soak", WorkerInstanceID: fmt.Sprintf("bench-soak-%d", w),
		LeaseTTL: time.Minute, Max: 1}
	for {
		select {
		case <-stop:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-tokens:
		}
		if _, err := l.st.Create(ctx, executions.CreateParams{Lane: lane}); err != nil {
			return fmt.Errorf("create: %w", err)
		}
		l.transitions.Add(1)
		// This goroutine's execution is waiting in the lane, so a claim
		// finds one unless other claimers hold the lane's waiting rows.
		var leases []executions.Lease
		for len(leases) == 0 {
			var err error
			if leases, err = l.st.Claim(ctx, cp); err != nil {
				return fmt.Errorf("claim: %w", err)
			}
			if len(leases) == 0 {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(2 * time.Millisecond):
				}
			}
		}
		l.transitions.Add(1)
		if err := l.st.Complete(ctx, leases[0], nil); err != nil {
			return fmt.Errorf("complete: %w", err)
		}
		l.transitions.Add(1)
	}
}

// soakGroup is a group of tables whose sizes a sample reports together.
type soakGroup int

const (
	groupExecutions soakGroup = iota // ff_exec_core, ff_attempt
	groupTombstones                  // ff_exec_removed
	groupLease                       // ff_lease_event's partitions
	groupCompletion                  // ff_completion_event's partitions
	groupRiverJob                    // river_job
	groupOther                       // every other table: ffriver's and River's
	soakGroups
)

func (g soakGroup) String() string {
	switch g {
	case groupExecutions:
		return "executions+attempts"
	case groupTombstones:
		return "tombstones"
	case groupLease:
		return "lease outbox"
	case groupCompletion:
		return "completion outbox"
	case groupRiverJob:
		return "river_job"
	default:
		return "other"
	}
}

// groupOf returns the group of a table, by the name of the table it is a
// partition of (its own name when it is none).
func groupOf(root string) soakGroup {
	switch root {
	case "ff_exec_core", "ff_attempt":
		return groupExecutions
	case "ff_exec_removed":
		return groupTombstones
	case outbox.LeaseTable:
		return groupLease
	case outbox.CompletionTable:
		return groupCompletion
	case "river_job":
		return groupRiverJob
	default:
		return groupOther
	}
}

// soakSample is one reading.
type soakSample struct {
	at   time.Duration // since the load started
	rate float64       // transitions per second in the window before at
	// bytes and dead tuples by group.
	bytes, dead [soakGroups]int64
	// partitions: time partitions of the lease and completion outboxes;
	// defaultRows: rows in their DEFAULT partitions.
	partitions  [2]int
	defaultRows [2]int64
	// execs and tombstones held (pg_stat_user_tables' n_live_tup).
	execs, tombstones int64
	// vacuums the stand-in for autovacuum ran so far.
	vacuums int64
	// oldestXact is the age of the oldest transaction holding a snapshot
	// in the database (any session's: a vacuum cannot remove what it may
	// still see).
	oldestXact time.Duration
}

func (s soakSample) total() (n int64) {
	for _, b := range s.bytes {
		n += b
	}
	return n
}

func (s soakSample) deadTotal() (n int64) {
	for _, d := range s.dead {
		n += d
	}
	return n
}

// readSoakSample reads the sizes, dead tuples and partitions of schema
// (the pool's search_path).
func readSoakSample(ctx context.Context, pool *pgxpool.Pool, schema string) (soakSample, error) {
	var s soakSample
	// A partition dropped while this runs has no size any more (NULL).
	rows, err := pool.Query(ctx, `
		SELECT c.relname, coalesce(parent.relname, c.relname), coalesce(pg_total_relation_size(c.oid), 0),
		       coalesce(st.n_dead_tup, 0), coalesce(st.n_live_tup, 0)
		FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace
		LEFT JOIN pg_inherits i ON i.inhrelid = c.oid
		LEFT JOIN pg_class parent ON parent.oid = i.inhparent
		LEFT JOIN pg_stat_user_tables st ON st.relid = c.oid
		WHERE n.nspname = $1 AND c.relkind IN ('r', 'm')`, schema)
	if err != nil {
		return s, fmt.Errorf("bench: soak: reading sizes: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name, root string
		var size, dead, live int64
		if err := rows.Scan(&name, &root, &size, &dead, &live); err != nil {
			return s, fmt.Errorf("bench: soak: reading sizes: %w", err)
		}
		g := groupOf(root)
		s.bytes[g] += size
		s.dead[g] += dead
		switch {
		case name == "ff_exec_core":
			s.execs = live
		case name == "ff_exec_removed":
			s.tombstones = live
		case (g == groupLease || g == groupCompletion) && name != root && name != outboxretention.DefaultPartition(root):
			s.partitions[g-groupLease]++
		}
	}
	if err := rows.Err(); err != nil {
		return s, fmt.Errorf("bench: soak: reading sizes: %w", err)
	}
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+outboxretention.DefaultPartition(outbox.LeaseTable)+`),
		(SELECT count(*) FROM `+outboxretention.DefaultPartition(outbox.CompletionTable)+`)`).Scan(&s.defaultRows[0], &s.defaultRows[1]); err != nil {
		return s, fmt.Errorf("bench: soak: counting the DEFAULT partitions' rows: %w", err)
	}
	var oldestMs float64
	if err := pool.QueryRow(ctx, `SELECT coalesce(extract(epoch FROM max(clock_timestamp() - xact_start)) * 1000, 0)
		FROM pg_stat_activity WHERE datname = current_database() AND backend_xmin IS NOT NULL AND pid <> pg_backend_pid()`).Scan(&oldestMs); err != nil {
		return s, fmt.Errorf("bench: soak: reading the oldest transaction: %w", err)
	}
	s.oldestXact = time.Duration(oldestMs) * time.Millisecond
	return s, nil
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// soakResults makes the report's rows out of the samples.
func soakResults(o SoakOptions, autovacuum string, samples []soakSample, overall float64, dropped int64) []Result {
	first, last := samples[0], samples[len(samples)-1]
	at := func(s soakSample) string { return "t=" + s.at.String() }
	execRate := float64(o.Rate) / transitionsPerExecution
	out := []Result{
		{Scenario: "soak", Figure: "transitions/s, last sample (" + at(last) + ")", Value: last.rate, Unit: "transitions/s",
			Baseline: "first sample (" + at(first) + ")", BaselineValue: first.rate, Ratio: ratioF(last.rate, first.rate),
			Target: "≥ 0.90", Met: met(ratioF(last.rate, first.rate) >= 0.90)},
		{Scenario: "soak", Figure: "transitions/s over the run", Value: overall, Unit: "transitions/s",
			Baseline: "rate asked", BaselineValue: float64(o.Rate), Ratio: ratioF(overall, float64(o.Rate)),
			Note: fmt.Sprintf("a transition is one committed state change of an execution through the plain API: create, "+
				"claim (Max 1), complete; 3 per execution, so %d/s asks %.0f executions/s, paced by tokens every 10 ms, "+
				"%d load goroutines over %d lanes; %d executions were not started because every goroutine was busy. "+
				"Retention %s (outbox, executions, River's completed jobs), partition width %s, retention scanners every %s",
				o.Rate, execRate, o.Workers, soakLanes, dropped, o.Retention, outboxretention.PartitionWidth(o.Retention), soakScanInterval(o.Retention))},
	}
	bytesRow := Result{Scenario: "soak", Figure: "total bytes at the end (" + at(last) + ")", Value: mib(last.total()), Unit: "MiB",
		Note: soakTable(samples)}
	ref := -1
	for i, s := range samples {
		if s.at >= o.Retention {
			ref = i
			break
		}
	}
	if ref >= 0 {
		r := samples[ref]
		lo, hi := r.total(), r.total()
		for _, s := range samples[ref:] {
			lo, hi = min(lo, s.total()), max(hi, s.total())
		}
		bytesRow.Baseline = "first sample at or after the first retention window (" + at(r) + ")"
		bytesRow.BaselineValue = mib(r.total())
		bytesRow.Ratio = ratioF(float64(last.total()), float64(r.total()))
		bytesRow.Target, bytesRow.Met = "≤ 1.30", met(bytesRow.Ratio <= 1.30)
		second := ""
		for _, s := range samples[ref:] {
			if s.at >= 2*o.Retention {
				second = fmt.Sprintf(" At the end %.2f of the first sample at or after two retention windows (%s, %.1f MiB), once tombstones too are removed.",
					ratioF(float64(last.total()), float64(s.total())), at(s), mib(s.total()))
				break
			}
		}
		bytesRow.Note = fmt.Sprintf("from %s on: least %.1f MiB, most %.1f MiB (%.2f of %s's).%s %s\n%s",
			at(r), mib(lo), mib(hi), ratioF(float64(hi), float64(r.total())), at(r), second, vacuumNote(o, autovacuum, last), bytesRow.Note)
	} else {
		bytesRow.Note = "the run ended before the first retention window did: no target. " + vacuumNote(o, autovacuum, last) + "\n" + bytesRow.Note
	}
	out = append(out, bytesRow)
	outboxDead := last.dead[groupLease] + last.dead[groupCompletion]
	out = append(out, Result{Scenario: "soak", Figure: "dead tuples at the end, lease and completion outboxes", Value: float64(outboxDead),
		Unit: "tuples", Target: "0", Met: met(outboxDead == 0),
		Note: fmt.Sprintf("retention drops the outboxes' time partitions whole; %d+%d time partitions, %d+%d rows in the DEFAULT partitions at the end",
			last.partitions[0], last.partitions[1], last.defaultRows[0], last.defaultRows[1])})
	for _, g := range []soakGroup{groupExecutions, groupTombstones, groupRiverJob, groupOther} {
		r := Result{Scenario: "soak", Figure: "dead tuples at the end, " + g.String(), Value: float64(last.dead[g]), Unit: "tuples"}
		if g == groupExecutions {
			r.Note = "execution retention deletes rows in batches and every transition updates ff_exec_core and ff_attempt: " +
				"their dead tuples are reclaimed by (auto)vacuum, so they come and go; as read (pg_stat_user_tables). " + vacuumNote(o, autovacuum, last)
		}
		out = append(out, r)
	}
	return out
}

// vacuumNote says who reclaimed dead tuples during the run.
func vacuumNote(o SoakOptions, autovacuum string, last soakSample) string {
	switch {
	case o.Vacuum > 0:
		return fmt.Sprintf("The server's autovacuum is %s; the bench stood in for it every %s (autovacuum's thresholds and cost delay): %d vacuums.",
			autovacuum, o.Vacuum, last.vacuums)
	case autovacuum != "on":
		return "The server runs with autovacuum off and nothing stood in for it (--soak-vacuum): the dead tuples of updated " +
			"and deleted rows were never reclaimed, so the tables holding them grew."
	default:
		return "The server's autovacuum is on."
	}
}

// vacuumShort is vacuumNote in a few words.
func vacuumShort(o SoakOptions, autovacuum string) string {
	if o.Vacuum > 0 {
		return fmt.Sprintf("autovacuum %s, the bench's stand-in every %s", autovacuum, o.Vacuum)
	}
	return "autovacuum " + autovacuum
}

// soakTable is the samples as a Markdown table.
func soakTable(samples []soakSample) string {
	var b strings.Builder
	b.WriteString("| t | total MiB |")
	for g := range soakGroups {
		fmt.Fprintf(&b, " %s MiB |", g)
	}
	b.WriteString(" dead tuples (exec+att / tombstones / outboxes / river_job / other) | transitions/s | partitions (lease + completion) | DEFAULT rows | executions | tombstones | stand-in vacuums | oldest transaction |\n|")
	b.WriteString(strings.Repeat("---|", int(soakGroups)+10))
	for _, s := range samples {
		fmt.Fprintf(&b, "\n| %s | %.1f |", s.at, mib(s.total()))
		for g := range soakGroups {
			fmt.Fprintf(&b, " %.1f |", mib(s.bytes[g]))
		}
		fmt.Fprintf(&b, " %d (%d / %d / %d / %d / %d) | %.0f | %d + %d | %d | %d | %d | %d | %s |", s.deadTotal(),
			s.dead[groupExecutions], s.dead[groupTombstones], s.dead[groupLease]+s.dead[groupCompletion], s.dead[groupRiverJob], s.dead[groupOther],
			s.rate, s.partitions[0], s.partitions[1], s.defaultRows[0]+s.defaultRows[1], s.execs, s.tombstones, s.vacuums, s.oldestXact.Round(time.Second))
	}
	return b.String()
}

// soakPlot draws samples into w: total and per-group MiB, transitions/s
// against the rate asked, and dead tuples, over time.
func soakPlot(w io.Writer, o SoakOptions, autovacuum string, samples []soakSample) error {
	colors := [soakGroups]string{"#1f77b4", "#9467bd", "#ff7f0e", "#2ca02c", "#d62728", "#8c564b"}
	total := Series{Name: "total", Color: "#000000", Points: map[int]float64{}}
	groups := make([]Series, soakGroups)
	for g := range soakGroups {
		groups[g] = Series{Name: g.String(), Color: colors[g], Points: map[int]float64{}}
	}
	rate := Series{Name: "transitions/s achieved", Color: "#1f77b4", Points: map[int]float64{}}
	asked := Series{Name: "asked", Color: "#888888", Dashed: true, Points: map[int]float64{}}
	deadTotal := Series{Name: "total", Color: "#000000", Points: map[int]float64{}}
	dead := []Series{
		{Name: "executions+attempts", Color: colors[groupExecutions], Points: map[int]float64{}},
		{Name: "outboxes", Color: colors[groupLease], Points: map[int]float64{}},
		{Name: "tombstones", Color: colors[groupTombstones], Points: map[int]float64{}},
		{Name: "river_job", Color: colors[groupRiverJob], Points: map[int]float64{}},
	}
	for _, s := range samples {
		x := int(s.at / time.Second)
		total.Points[x] = mib(s.total())
		for g := range soakGroups {
			groups[g].Points[x] = mib(s.bytes[g])
		}
		rate.Points[x], asked.Points[x] = s.rate, float64(o.Rate)
		deadTotal.Points[x] = float64(s.deadTotal())
		dead[0].Points[x] = float64(s.dead[groupExecutions])
		dead[1].Points[x] = float64(s.dead[groupLease] + s.dead[groupCompletion])
		dead[2].Points[x] = float64(s.dead[groupTombstones])
		dead[3].Points[x] = float64(s.dead[groupRiverJob])
	}
	unit, xLabel := 60.0, "minutes since the load started"
	if o.Duration < 2*time.Minute {
		unit, xLabel = 1, "seconds since the load started"
	}
	var marks []Mark
	for k := 1; time.Duration(k)*o.Retention <= o.Duration && k <= 2; k++ {
		marks = append(marks, Mark{X: int(time.Duration(k) * o.Retention / time.Second), Label: fmt.Sprintf("%d× retention", k)})
	}
	return WriteTimeSVG(w, TimePlot{
		Title:    fmt.Sprintf("Soak: %d transitions/s asked, retention %s, sampled every %s", o.Rate, o.Retention, o.Sample),
		Subtitle: strings.TrimPrefix(o.PlotSubtitle+"; "+vacuumShort(o, autovacuum), "; "), XLabel: xLabel, XUnit: unit, Marks: marks,
		Charts: []Chart{
			{YLabel: "MiB (tables + indexes)", Series: append([]Series{total}, groups...)},
			{YLabel: "transitions/s", Series: []Series{rate, asked}},
			{YLabel: "dead tuples", Series: append([]Series{deadTotal}, dead...)},
		},
	})
}

// standInVacuum does autovacuum's work on the schema's tables for a server
// that runs without it (autovacuum = off, as some CI configurations set):
// every interval, it vacuums each table whose dead tuples passed the
// server's autovacuum_vacuum_threshold + autovacuum_vacuum_scale_factor ×
// its rows and analyzes each whose changes passed the analyze threshold,
// one at a time on a connection of its own, throttled by the server's
// autovacuum_vacuum_cost_delay as autovacuum is. It counts the vacuums it
// ran; it stops when ctx ends. It leaves the outboxes' partitions alone:
// they are insert-only and dropped whole, and a vacuum of one would hold
// up its drop (the server cancels an autovacuum that does, not a VACUUM).
type standInVacuum struct {
	pool     *pgxpool.Pool
	schema   string
	interval time.Duration
	vacuums  atomic.Int64
}

func (v *standInVacuum) run(ctx context.Context) error {
	conn, err := v.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("stand-in vacuum: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT set_config('vacuum_cost_delay', current_setting('autovacuum_vacuum_cost_delay'), false)
		WHERE current_setting('autovacuum_vacuum_cost_delay') <> '-1'`); err != nil {
		return fmt.Errorf("stand-in vacuum: %w", err)
	}
	t := time.NewTicker(v.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		rows, err := conn.Query(ctx, `
			SELECT format('%I.%I', s.schemaname, s.relname),
			       s.n_dead_tup > current_setting('autovacuum_vacuum_threshold')::float8
			                      + current_setting('autovacuum_vacuum_scale_factor')::float8 * greatest(c.reltuples, 0),
			       s.n_mod_since_analyze > current_setting('autovacuum_analyze_threshold')::float8
			                      + current_setting('autovacuum_analyze_scale_factor')::float8 * greatest(c.reltuples, 0)
			FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
			WHERE s.schemaname = $1 AND c.relkind = 'r' AND NOT c.relispartition`, v.schema)
		if err != nil {
			return ctxOr(ctx, fmt.Errorf("stand-in vacuum: %w", err))
		}
		type job struct {
			table           string
			vacuum, analyze bool
		}
		var jobs []job
		for rows.Next() {
			var j job
			if err := rows.Scan(&j.table, &j.vacuum, &j.analyze); err != nil {
				rows.Close()
				return ctxOr(ctx, fmt.Errorf("stand-in vacuum: %w", err))
			}
			if j.vacuum || j.analyze {
				jobs = append(jobs, j)
			}
		}
		if err := rows.Err(); err != nil {
			return ctxOr(ctx, fmt.Errorf("stand-in vacuum: %w", err))
		}
		for _, j := range jobs {
			var sql string
			switch {
			case j.vacuum && j.analyze:
				sql = `VACUUM (ANALYZE, SKIP_LOCKED) ` + j.table
			case j.vacuum:
				sql = `VACUUM (SKIP_LOCKED) ` + j.table
			default:
				sql = `ANALYZE (SKIP_LOCKED) ` + j.table
			}
			// A partition dropped meanwhile is no error: autovacuum
			// would have skipped it too.
			if _, err := conn.Exec(ctx, sql); err != nil && !isUndefinedTable(err) {
				return ctxOr(ctx, fmt.Errorf("stand-in vacuum: %s: %w", sql, err))
			}
			if j.vacuum {
				v.vacuums.Add(1)
			}
		}
	}
}

// ctxOr returns nil once ctx has ended (a statement cut short by the end
// of the run), else err.
func ctxOr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// isUndefinedTable reports whether err is PostgreSQL's undefined_table.
func isUndefinedTable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "42P01"
}
