package leasecheck

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ffriver/ffriver/internal/pgcluster"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Faults says which faults a run injects while its clients work. Each is
// toggled on its own; the verdict must hold under every one.
type Faults struct {
	// KillWorker: kill -9 an ffworker, then start another.
	KillWorker bool
	// KillScheduler: kill -9 the leading ffscheduler, then start another.
	KillScheduler bool
	// TerminateBackends: pg_terminate_backend of random connections of
	// the application processes (their calls then end with an unknown
	// outcome) and of the binaries.
	TerminateBackends bool
	// LongLocks: a transaction holds several execution rows and an edge
	// group for a few seconds.
	LongLocks bool
	// DuplicateJobs: copies of ff_apply jobs are inserted.
	DuplicateJobs bool
	// CancelJobs: some available or scheduled River jobs are cancelled.
	CancelJobs bool
	// ClockSkew: the application processes' clocks are up to this far
	// apart (each offset from the system clock by up to half of it).
	ClockSkew time.Duration
	// BinaryClockSkew: the same for the binaries' clocks
	// ($FF_CLOCK_OFFSET): each ffscheduler and ffworker started runs
	// offset by up to half of it. (A scanner whose clock is ahead of a
	// writer's by more than a lease's TTL passes due rows with its scan
	// cursor; the catch-up read finds them, in about 3 s.)
	BinaryClockSkew time.Duration
	// OutboxRetention, when set, runs the scheduler with this outbox
	// retention (its partitions rotate during the run, every
	// outboxRetentionInterval), and IdleReaders opens, among the
	// faults, transactions that read the outbox and then sit idle for up
	// to 3 s, as pg_dump and BI sessions do. The checker reads the outbox
	// from its own copies (commitOrderSQL); the streams must still deliver
	// every event exactly once and never go silent for longer than
	// maxStreamSilence while clients write.
	OutboxRetention time.Duration
	IdleReaders     bool
	// Failover, when set, runs the whole history on a primary and a
	// synchronous streaming standby of the run's own (internal/pgcluster)
	// instead of the shared server, every process given the multi-host
	// URL of the two, and about every Failover (0.5–1.5 of it) kills the
	// primary (immediate), promotes the standby and makes the old primary
	// its standby again (a new pg_basebackup). Calls cut off by it have an
	// unknown outcome, resolved by the outbox: with synchronous
	// replication nothing acknowledged is lost, so the histories must
	// hold as they are.
	Failover time.Duration
	// ExecutionRetention, when set, runs the scheduler with this execution
	// retention (its pass every executionRetentionInterval), so terminal
	// executions are removed during the run, and the workload creates some
	// of their ids again while clients still use the removed incarnations'
	// leases (WorkloadConfig.Recreate).
	ExecutionRetention time.Duration
	// Every is the mean time between two injections.
	Every time.Duration
}

// outboxRetentionInterval is the scheduler's outbox_retention tick when
// Faults.OutboxRetention is set.
const outboxRetentionInterval = 500 * time.Millisecond

// executionRetentionInterval is the scheduler's execution_retention tick
// when Faults.ExecutionRetention is set.
const executionRetentionInterval = 250 * time.Millisecond

func (f Faults) kinds() []string {
	var out []string
	for _, k := range []struct {
		on   bool
		name string
	}{{f.KillWorker, "kill -9 ffworker"}, {f.KillScheduler, "kill -9 leading ffscheduler"},
		{f.TerminateBackends, "pg_terminate_backend"}, {f.LongLocks, "long lock"},
		{f.DuplicateJobs, "duplicated jobs"}, {f.CancelJobs, "cancelled jobs"}, {f.IdleReaders, "idle reader"}} {
		if k.on {
			out = append(out, k.name)
		}
	}
	return out
}

// String lists the faults that are on.
func (f Faults) String() string {
	k := f.kinds()
	if f.ClockSkew > 0 {
		k = append(k, fmt.Sprintf("clocks %s apart", f.ClockSkew))
	}
	if f.BinaryClockSkew > 0 {
		k = append(k, fmt.Sprintf("binaries' clocks %s apart", f.BinaryClockSkew))
	}
	if f.OutboxRetention > 0 {
		k = append(k, fmt.Sprintf("outbox retention %s", f.OutboxRetention))
	}
	if f.Failover > 0 {
		k = append(k, fmt.Sprintf("failover every %s", f.Failover))
	}
	if f.ExecutionRetention > 0 {
		k = append(k, fmt.Sprintf("execution retention %s", f.ExecutionRetention))
	}
	if len(k) == 0 {
		return "none"
	}
	return strings.Join(k, ", ")
}

// injector injects a run's faults.
type injector struct {
	f       Faults
	admin   *pgxpool.Pool
	cluster *Cluster
	tag     string
	rng     *rand.Rand
	// repl is the run's own primary and standby when f.Failover is set.
	repl *pgcluster.Replication

	mu         sync.Mutex
	counts     map[string]int
	promotions []time.Duration
	errs       []string
	wg         sync.WaitGroup
}

func newInjector(f Faults, admin *pgxpool.Pool, cluster *Cluster, tag string, seed uint64) *injector {
	return &injector{f: f, admin: admin, cluster: cluster, tag: tag, rng: rand.New(rand.NewPCG(seed, 7)), counts: map[string]int{}}
}

func (in *injector) counted(kind string, n int) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.counts[kind] += n
}

func (in *injector) failed(kind string, err error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if len(in.errs) < 10 {
		in.errs = append(in.errs, fmt.Sprintf("%s: %v", kind, err))
	}
}

// Counts are the faults injected, by kind.
func (in *injector) Counts() map[string]int {
	in.mu.Lock()
	defer in.mu.Unlock()
	out := map[string]int{}
	for k, v := range in.counts {
		out[k] = v
	}
	return out
}

// run injects a fault every f.Every on average until ctx is done. Long
// locks run in goroutines of their own (they last seconds), and so does
// terminateCalls.
func (in *injector) run(ctx context.Context) {
	if in.f.Failover > 0 && in.repl != nil {
		rng := rand.New(rand.NewPCG(in.rng.Uint64(), 9))
		in.wg.Go(func() { in.failovers(ctx, rng) })
	}
	kinds := in.f.kinds()
	if len(kinds) == 0 || in.f.Every <= 0 {
		<-ctx.Done()
		in.wg.Wait()
		return
	}
	if in.f.TerminateBackends {
		rng := rand.New(rand.NewPCG(in.rng.Uint64(), 8)) // its own: in.rng is this goroutine's
		in.wg.Go(func() { in.terminateCalls(ctx, rng) })
	}
	for {
		wait := time.Duration(float64(in.f.Every) * (0.5 + in.rng.Float64()))
		select {
		case <-ctx.Done():
			in.wg.Wait()
			return
		case <-time.After(wait):
		}
		kind := kinds[in.rng.IntN(len(kinds))]
		if err := in.inject(ctx, kind); err != nil && ctx.Err() == nil {
			in.failed(kind, err)
		}
	}
}

func (in *injector) inject(ctx context.Context, kind string) error {
	switch kind {
	case "kill -9 ffworker":
		ids := in.cluster.Running(false)
		if len(ids) == 0 {
			return nil
		}
		in.cluster.Kill(ids[in.rng.IntN(len(ids))])
		in.counted(kind, 1)
		return in.restartLater(ctx, false)
	case "kill -9 leading ffscheduler":
		leader := Leader(ctx, in.admin)
		if !slices.Contains(in.cluster.Running(true), leader) {
			return nil
		}
		in.cluster.Kill(leader)
		in.counted(kind, 1)
		return in.restartLater(ctx, true)
	case "pg_terminate_backend":
		// Any connection of the application pools or the binaries; never
		// the checker's own (streams, snapshots, this injector). The
		// application's calls in flight are hit by terminateCalls.
		var n int
		err := in.admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM (
			SELECT pid FROM pg_stat_activity WHERE application_name LIKE $1 || '-%' AND pid <> pg_backend_pid()
			ORDER BY random() LIMIT $2) t`, in.tag, 1+in.rng.IntN(2)).Scan(&n)
		in.counted(kind, n)
		return err
	case "long lock":
		// The random choices are made here: the injector's rng is not
		// shared with the goroutine.
		hold := time.Duration(500+in.rng.IntN(1500)) * time.Millisecond
		rows := 2 + in.rng.IntN(2)
		in.wg.Go(func() {
			if err := in.longLock(ctx, rows, hold); err != nil && ctx.Err() == nil {
				in.failed(kind, err)
			}
		})
		in.counted(kind, 1)
		return nil
	case "duplicated jobs":
		tag, err := in.admin.Exec(ctx, `INSERT INTO river_job (args, kind, max_attempts, priority, queue, state, scheduled_at, metadata, tags)
			SELECT args, kind, max_attempts, priority, queue, 'available', now(), '{"fault_copy": true}', tags
			FROM river_job WHERE queue LIKE 'ff_apply%' ORDER BY id DESC LIMIT $1`, 5+in.rng.IntN(20))
		in.counted(kind, int(tag.RowsAffected()))
		return err
	case "idle reader":
		// A session reads the outbox in a transaction, then sits idle in
		// it: partition maintenance must not make anyone queue behind it.
		hold := time.Duration(500+in.rng.IntN(2500)) * time.Millisecond
		in.wg.Go(func() {
			if err := in.idleReader(ctx, hold); err != nil && ctx.Err() == nil {
				in.failed(kind, err)
			}
		})
		in.counted(kind, 1)
		return nil
	case "cancelled jobs":
		tag, err := in.admin.Exec(ctx, `UPDATE river_job SET state = 'cancelled', finalized_at = now()
			WHERE id IN (SELECT id FROM river_job WHERE state IN ('available', 'scheduled') ORDER BY random() LIMIT $1)`, 1+in.rng.IntN(5))
		in.counted(kind, int(tag.RowsAffected()))
		return err
	}
	return fmt.Errorf("unknown fault %q", kind)
}

// terminateCalls terminates, every 100-500 ms, the connection of an
// application call in flight (a statement running, or a transaction open),
// if there is one: that call then ends with an unknown outcome, which the
// outbox resolves.
func (in *injector) terminateCalls(ctx context.Context, rng *rand.Rand) {
	const kind = "pg_terminate_backend of a call in flight"
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(100+rng.IntN(400)) * time.Millisecond):
		}
		var n int
		err := in.admin.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM (
			SELECT pid FROM pg_stat_activity WHERE application_name LIKE $1 || '-app%' AND state <> 'idle'
			ORDER BY random() LIMIT 1) t`, in.tag).Scan(&n)
		if err != nil && ctx.Err() == nil {
			in.failed(kind, err)
		}
		in.counted(kind, n)
	}
}

// restartLater starts a replacement after a short while.
func (in *injector) restartLater(ctx context.Context, scheduler bool) error {
	select {
	case <-ctx.Done():
		return nil
	case <-time.After(time.Duration(300+in.rng.IntN(1200)) * time.Millisecond):
	}
	_, err := in.cluster.Start(scheduler)
	return err
}

// longLock holds rows non-terminal executions and an edge group (the
// fault's own transaction, which writes nothing) for hold.
func (in *injector) longLock(ctx context.Context, rows int, hold time.Duration) error {
	tx, err := in.admin.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM ff_exec_core WHERE (partition_key, execution_id) IN (
		SELECT partition_key, execution_id FROM ff_exec_core WHERE lifecycle_phase <> 'terminal' ORDER BY random() LIMIT $1)
		ORDER BY partition_key, execution_id FOR UPDATE`, rows); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM ff_edge_group WHERE (partition_key, flow_id, downstream_eid) IN (
		SELECT partition_key, flow_id, downstream_eid FROM ff_edge_group ORDER BY random() LIMIT 1) FOR UPDATE`); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-time.After(hold):
	}
	return nil
}

// Errors are the injector's own failures (a fault that could not be
// injected).
func (in *injector) Errors() []string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return slices.Clone(in.errs)
}

// idleReader reads both outbox tables in a transaction, then holds it open
// and idle for hold.
func (in *injector) idleReader(ctx context.Context, hold time.Duration) error {
	tx, err := in.admin.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `SELECT count(*) FROM ff_lease_event; SELECT count(*) FROM ff_completion_event`); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-time.After(hold):
	}
	return nil
}

// failovers fails the run's replication over about every f.Failover until
// ctx is done, each time making the old primary a standby again before the
// next. A failover or rebuild once begun runs to its end (up to 2 minutes),
// whatever ctx says: a half-promoted standby would end the run with no
// server.
func (in *injector) failovers(ctx context.Context, rng *rand.Rand) {
	for {
		wait := time.Duration(float64(in.f.Failover) * (0.5 + rng.Float64()))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		took, err := in.repl.Failover(octx)
		if err == nil {
			in.counted("failover", 1)
			in.mu.Lock()
			in.promotions = append(in.promotions, took)
			in.mu.Unlock()
			err = in.repl.Rebuild(octx)
		}
		cancel()
		if err != nil {
			in.failed("failover", err)
			return
		}
	}
}

// Promotions are how long each failover's promotion took.
func (in *injector) Promotions() []time.Duration {
	in.mu.Lock()
	defer in.mu.Unlock()
	return slices.Clone(in.promotions)
}
