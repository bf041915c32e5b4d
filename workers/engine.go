package workers

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/apply"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/internal/jobopts"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

// The apply engine: how item jobs reach the database.
//
// Each item is its own River job, and its transition commits with its
// outbox rows in one transaction. What that transaction does not do is
// complete the River job: River's batch completer completes it after Work
// returns, many jobs per statement. A process that dies between the commit
// and the completion leaves the job running; River's rescuer runs it again
// and the action, which rechecks the row under its lock, finds it already
// changed and records no_op. Every action is idempotent and fenced for that
// reason (see the executions package).
//
// Items of a grouped kind (GroupItemOf: the built-in expire, promote and
// deadline) share transactions. Concurrent Work calls of one kind queue
// their jobs in the kind's engine; at most GroupLanes of them lead at a
// time, each leader taking up to GroupSize queued jobs (its own first)
// into one transaction and waking the others with their results. Nothing
// waits for a group to fill: a lone item runs alone at once, and groups
// form only when items arrive faster than a lane commits, which is exactly
// when sharing the commit (its WAL flush, with synchronous_commit on) pays.
// So there is no flush interval.
//
// A kind built with GroupItemOf (the built-in expire, promote and deadline)
// applies its group in one set-based pass (the ExpireAttemptMany transition and
// its siblings): one statement locks all of the group's rows, one batch
// carries all of their writes. Measured before that (ffctl bench expire,
// pg_stat_statements on a cluster of its own, group sizes counted): under
// load a group held about 62 jobs, nearly all of River's 64 workers, and
// its items ran one after the other, each a lock query and a write batch,
// about 0.7 ms per item; a group of 62 took some 44 ms while every worker
// waited, which capped the drain near 1,400 leases/s. With the pass the
// same run drained 2,522 leases/s (1,409 before, back to back).
//
// Group size and lanes, measured with ffctl bench expire on the 2-core
// reference machine (23 Nov 2026, set-based pass, 128 apply workers, two
// runs each on a machine shared with other work; ratio to River's own
// no-op burn-down at 64 workers in the same run): groups of 1 (no grouping)
// 0.23 and 0.15, of 32 0.38 and 0.40, of 64 0.41 and 0.33, of 128 0.21 and
// 0.35; with groups of 64, 1 lane 0.42 and 0.45, 2 lanes as above, 4 lanes
// 0.63 and 0.40. Grouping pays (about twice the drain of no grouping);
// sizes from 32 to 128 and 1 to 4 lanes are within the machine's noise of
// each other. Groups of 64 in 2 lanes are kept: with ffworker's 128
// workers both lanes take full groups, one can commit while the other
// works, lanes bound the connections a kind holds, and a larger group only
// holds its row locks longer.

// The cancel-group items (ff.cancel_group, ff.reconcile_group) and flow
// hops (ff.advance) are not grouped: they wait for their locks (a hop up to
// its lock_timeout, 2 s) instead of skipping them, so one waiting item
// would hold its whole group and every worker waiting on it, and they
// touch several executions' rows each, which a set-based pass could not
// split back into one outcome per job. They are rarer than expiries too
// (one per flow edge or cancelled group); nothing was measured for them.

// A failing item never takes its group with it: when an action returns an
// error the group's transaction is rolled back and the group is run again
// with a savepoint around each item, so the failing item's changes are
// rolled back alone, the others commit, and only the failing job is retried
// by River. An item whose row is locked elsewhere does not wait (the
// actions lock with SKIP LOCKED) and records skipped_locked.

// itemBegin begins an item transaction with generic plans forced for
// its statements, in the BEGIN's own round trip (SET LOCAL ends with the
// transaction). An item runs a handful of key lookups and single-row writes
// whose custom plans Postgres would otherwise re-plan at every execution:
// planning was about a quarter of the server's CPU per item (ffctl bench
// expire, perf).
//
// It also plans by key (dbutil.KeyedSettings), as the executions Store's
// own transactions do: they share statements (the finish's locks and
// guarded writes, the outbox inserts) on the same pool, and a generic plan
// made here first, while a table was small, would be the one a Store
// transaction on that connection then reuses.
const itemBegin = "BEGIN; SET LOCAL plan_cache_mode = force_generic_plan; " + dbutil.KeyedSettings

// errItem marks an error of one item of a group (its action failed), as
// opposed to an error of the group's transaction.
type errItem struct{ err error }

func (e *errItem) Error() string { return e.err.Error() }
func (e *errItem) Unwrap() error { return e.err }

// entry is one job waiting in an engine.
type entry[T river.JobArgs] struct {
	job *river.Job[T]
	out Output
	err error
	// done receives false when out/err are set by a leader, true when the
	// entry is handed a lane to lead its own group.
	done chan bool
	// lead is set (under the engine's lock) when the entry is handed a lane
	// instead of a result.
	lead bool
	// taken is set (under the engine's lock) when a leader took the entry
	// into its group: from then on only the leader finishes it.
	taken bool
}

// engine applies the jobs of one item kind.
type engine[T river.JobArgs] struct {
	env     *Env
	cfg     apply.Config
	action  action[T]
	grouped bool
	// many, when set, applies a whole group in one call (GroupItemOf).
	many groupAction[T]

	mu      sync.Mutex
	pending []*entry[T]
	lanes   int // leaders running
}

func newEngine[T river.JobArgs](env *Env, cfg apply.Config, action action[T], grouped bool) *engine[T] {
	return &engine[T]{env: env, cfg: cfg, action: action, grouped: grouped}
}

func (g *engine[T]) size() int {
	if g.cfg.GroupSize > 0 {
		return g.cfg.GroupSize
	}
	return apply.DefaultGroupSize
}

func (g *engine[T]) maxLanes() int {
	if g.cfg.GroupLanes > 0 {
		return g.cfg.GroupLanes
	}
	return apply.DefaultGroupLanes
}

func (g *engine[T]) timeout() time.Duration {
	if g.cfg.JobTimeout > 0 {
		return g.cfg.JobTimeout
	}
	return apply.DefaultJobTimeout
}

// work applies job, alone or in a group, and returns what River should
// record: nil, a JobCancel for invalid input, or the action's error.
func (g *engine[T]) work(ctx context.Context, job *river.Job[T]) error {
	e := &entry[T]{job: job, done: make(chan bool, 1)}
	if !g.grouped || g.size() <= 1 {
		g.run(ctx, []*entry[T]{e})
		return g.finish(ctx, e)
	}
	g.mu.Lock()
	g.pending = append(g.pending, e)
	leading := g.lanes < g.maxLanes()
	if leading {
		g.lanes++
		e.lead = true
	}
	g.mu.Unlock()
	if !leading {
		select {
		case leading = <-e.done:
		case <-ctx.Done():
			g.mu.Lock()
			if !e.taken && !e.lead {
				g.remove(e)
				g.mu.Unlock()
				return fmt.Errorf("waiting for a group transaction: %w", ctx.Err())
			}
			g.mu.Unlock()
			// Taken by a leader, or handed a lane: wait for that.
			leading = <-e.done
		}
	}
	if leading {
		g.lead(ctx, e)
	}
	return g.finish(ctx, e)
}

// lead runs own's group as one of the kind's lanes, then hands the lane to
// a waiting entry or gives it up.
func (g *engine[T]) lead(ctx context.Context, own *entry[T]) {
	g.mu.Lock()
	group := g.take(own)
	g.mu.Unlock()
	g.run(ctx, group)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.lanes--
	// Hand the lane on, so queued jobs never wait for a new arrival.
	for _, w := range g.pending {
		if g.lanes >= g.maxLanes() {
			break
		}
		if !w.lead {
			w.lead = true
			g.lanes++
			w.done <- true
		}
	}
}

// take removes own and up to size-1 other pending entries (not leading
// themselves) from pending, for own's group. Called with mu held.
func (g *engine[T]) take(own *entry[T]) []*entry[T] {
	group := []*entry[T]{own}
	own.taken = true
	rest := g.pending[:0]
	for _, w := range g.pending {
		switch {
		case w == own:
		case len(group) < g.size() && !w.lead:
			w.taken = true
			group = append(group, w)
		default:
			rest = append(rest, w)
		}
	}
	clear(g.pending[len(rest):])
	g.pending = rest
	return group
}

// remove drops e from pending. Called with mu held.
func (g *engine[T]) remove(e *entry[T]) {
	for i, w := range g.pending {
		if w == e {
			g.pending = append(g.pending[:i], g.pending[i+1:]...)
			return
		}
	}
}

// run applies group in one transaction and sets every entry's result. The
// transaction runs on a context detached from the leader's cancellation
// (the leader carries other jobs) but bounded by the job timeout.
func (g *engine[T]) run(ctx context.Context, group []*entry[T]) {
	gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.timeout())
	defer cancel()
	err := g.runTx(gctx, group, false)
	var ie *errItem
	if errors.As(err, &ie) && len(group) > 1 {
		// One item failed: redo the group with each item in a savepoint,
		// so that item alone rolls back.
		for _, e := range group {
			e.out, e.err = Output{}, nil
		}
		err = g.runTx(gctx, group, true)
	}
	processed := false
	for _, e := range group {
		if err != nil && e.err == nil {
			e.err = err
		}
		if e.err == nil && e.out.Outcome == Processed {
			processed = true
		}
		if e.err != nil {
			var ie *errItem
			if errors.As(e.err, &ie) {
				e.err = ie.err
			}
		}
	}
	if processed {
		g.env.Store.Waker().Poke()
	}
	// The first entry is the leader's own (or the only one): its goroutine
	// is the caller. The others wait for done.
	for _, e := range group[1:] {
		e.done <- false
	}
}

// runTx is one attempt at a group's transaction. Without savepoints the
// first failing item aborts it (an *errItem); with them, a failing item
// is rolled back to its savepoint and keeps its error, and the rest
// commit.
func (g *engine[T]) runTx(ctx context.Context, group []*entry[T], savepoints bool) error {
	tx, err := g.env.Pool().BeginTx(ctx, pgx.TxOptions{BeginQuery: itemBegin})
	if err != nil {
		return dbutil.MapErr(err, "begin")
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	switch {
	case savepoints:
		for _, e := range group {
			if _, err := tx.Exec(ctx, "SAVEPOINT ff_item"); err != nil {
				return dbutil.MapErr(err, "savepoint")
			}
			e.out, e.err = g.applyOne(ctx, tx, e)
			release := "RELEASE SAVEPOINT ff_item"
			if e.err != nil {
				release = "ROLLBACK TO SAVEPOINT ff_item"
			}
			if _, err := tx.Exec(ctx, release); err != nil {
				return dbutil.MapErr(err, "savepoint")
			}
		}
	case g.many != nil && len(group) > 1:
		if err := g.applyMany(ctx, tx, group); err != nil {
			return &errItem{err}
		}
	default:
		for _, e := range group {
			if e.out, e.err = g.applyOne(ctx, tx, e); e.err != nil {
				return &errItem{e.err}
			}
		}
	}
	if err := tx.Commit(ctx); err != nil {
		for _, e := range group {
			e.err = nil
		}
		return dbutil.MapErr(err, "commit")
	}
	return nil
}

// applyMany runs the group action over group in tx and sets each entry's
// output. An error is the group's: the engine then redoes the items one by
// one, each in a savepoint, to find the failing one.
func (g *engine[T]) applyMany(ctx context.Context, tx pgx.Tx, group []*entry[T]) error {
	args := make([]T, len(group))
	for i, e := range group {
		args[i] = e.job.Args
	}
	outs, err := g.many(ctx, tx, args)
	if err != nil {
		return err
	}
	if len(outs) != len(group) {
		return fmt.Errorf("group action of %s returned %d outputs for %d jobs", group[0].job.Kind, len(outs), len(group))
	}
	for i, e := range group {
		if e.out, err = g.then(ctx, tx, e, outs[i]); err != nil {
			return err
		}
	}
	return nil
}

// applyOne runs one item's action in tx.
func (g *engine[T]) applyOne(ctx context.Context, tx pgx.Tx, e *entry[T]) (Output, error) {
	out, err := g.action(ctx, tx, e.job.Args)
	if err != nil {
		return Output{}, err
	}
	return g.then(ctx, tx, e, out)
}

// then inserts out's Then successor, if any, in tx. It needs e's job
// completed first, in tx, since it may carry the same unique arguments.
func (g *engine[T]) then(ctx context.Context, tx pgx.Tx, e *entry[T], out Output) (Output, error) {
	if out.Then != nil {
		if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, e.job); err != nil {
			return Output{}, dbutil.MapErr(err, "completing job")
		}
		// The successor carries on the same item: it keeps its tags.
		opts := &river.InsertOpts{Queue: e.job.Queue, MaxAttempts: jobopts.ItemMaxAttempts, UniqueOpts: jobopts.UniqueInFlight(),
			Tags: slices.Clone(e.job.Tags)}
		if _, _, err := apply.InsertMany(ctx, tx, []river.InsertManyParams{{Args: out.Then, InsertOpts: opts}}); err != nil {
			return Output{}, err
		}
	}
	return out, nil
}

// finish turns e's result into what Work returns, in the job's own
// goroutine (River's output is recorded on the job's context).
func (g *engine[T]) finish(ctx context.Context, e *entry[T]) error {
	job := e.job
	if e.err != nil {
		var snooze *river.JobSnoozeError
		if errors.As(e.err, &snooze) {
			// Not a failure: River tries again later without spending an attempt.
			return e.err
		}
		if errors.Is(e.err, ff.ErrValidation) {
			g.env.Logger.WarnContext(ctx, "ffriver: item job cancelled: invalid input", "kind", job.Kind, "job_id", job.ID, "error", e.err)
			return river.JobCancel(e.err)
		}
		g.env.Logger.WarnContext(ctx, "ffriver: item action failed; River retries it", "kind", job.Kind, "job_id", job.ID,
			"attempt", job.Attempt, "max_attempts", job.MaxAttempts, "error", e.err)
		return e.err
	}
	if err := river.RecordOutput(ctx, e.out); err != nil {
		return fmt.Errorf("recording job output: %w", err)
	}
	if e.out.Outcome == SkippedLocked {
		// The row is still due and another transaction holds it: the job
		// stays in flight and tries again shortly (a snooze spends no
		// attempt), rather than leaving the row to a later scan, which
		// reads on from its cursor and would find it only at its next sweep.
		return river.JobSnooze(apply.LockedRetryAfter)
	}
	return nil
}
