package workers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/jobs"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

// The per-item execution path: every item job, built-in or registered with
// a Plugin, runs through Apply and nothing else.

// Action is what an item job does, in the item's transaction: lock its row
// (FOR UPDATE or FOR NO KEY UPDATE, SKIP LOCKED when another transaction
// may hold it for long), recheck that the item is still due, write the
// transition and its outbox rows, and report an Output whose Outcome says
// what happened. It returns an error only for real failures; a vanished,
// changed or locked row is an outcome (no_op, orphaned, skipped_locked).
type Action[T river.JobArgs] func(ctx context.Context, tx pgx.Tx, args T) (Output, error)

// itemBegin begins an item transaction with generic plans forced for
// its statements, in the BEGIN's own round trip (SET LOCAL ends with the
// transaction). An item runs a handful of key lookups and single-row writes
// plus River's JobCompleteTx, whose statement (a CTE over unnested arrays)
// Postgres otherwise re-plans at every execution, because its generic plan
// is estimated for ten rows and the custom one for one: planning was about a
// quarter of the server's CPU per item (ffctl bench expire, perf).
const itemBegin = "BEGIN; SET LOCAL plan_cache_mode = force_generic_plan"

// Apply runs one item job: begin a transaction (itemBegin); run action in
// it; record its Output as the job's River output; complete the job with
// river.JobCompleteTx in the same transaction; insert Output.Then, if any,
// into the job's queue; commit; poke the Store's outbox waker when the
// outcome is Processed. The transition, its outbox rows and the job's
// completion commit or roll back together: a job killed mid-way leaves
// nothing behind and is retried.
//
// A validation error (ff.ErrValidation: a malformed id, a partition outside
// the schema) cancels the job without retries. Any other error rolls back
// and fails the attempt; River retries it (jobs.ItemMaxAttempts attempts,
// short backoff) and then discards it, and the next scan re-creates the
// item if it is still due.
func Apply[T river.JobArgs](ctx context.Context, env *Env, job *river.Job[T], action Action[T]) error {
	out, err := applyTx(ctx, env, job, action)
	if err != nil {
		if errors.Is(err, ff.ErrValidation) {
			env.Logger.WarnContext(ctx, "ffriver: item job cancelled: invalid input", "kind", job.Kind, "job_id", job.ID, "error", err)
			return river.JobCancel(err)
		}
		env.Logger.WarnContext(ctx, "ffriver: item action failed; River retries it", "kind", job.Kind, "job_id", job.ID,
			"attempt", job.Attempt, "max_attempts", job.MaxAttempts, "error", err)
		return err
	}
	if out.Outcome == executions.Processed {
		env.Store.Waker().Poke()
	}
	return nil
}

// applyTx is Apply's transaction.
func applyTx[T river.JobArgs](ctx context.Context, env *Env, job *river.Job[T], action Action[T]) (Output, error) {
	tx, err := env.Pool().BeginTx(ctx, pgx.TxOptions{BeginQuery: itemBegin})
	if err != nil {
		return Output{}, dbutil.MapErr(err, "begin")
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	out, err := action(ctx, tx, job.Args)
	if err != nil {
		return Output{}, err
	}
	if err := river.RecordOutput(ctx, out); err != nil {
		return Output{}, fmt.Errorf("recording job output: %w", err)
	}
	if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
		return Output{}, dbutil.MapErr(err, "completing job")
	}
	// The successor is inserted after this job's completion: it may have
	// the same unique arguments.
	if out.Then != nil {
		opts := &river.InsertOpts{Queue: job.Queue, MaxAttempts: jobs.ItemMaxAttempts, UniqueOpts: jobs.UniqueInFlight()}
		if _, _, err := insertMany(ctx, tx, []river.InsertManyParams{{Args: out.Then, InsertOpts: opts}}); err != nil {
			return Output{}, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return Output{}, dbutil.MapErr(err, "commit")
	}
	return out, nil
}

// itemWorker is the River worker of every item kind: Work runs its action
// through Apply.
type itemWorker[T river.JobArgs] struct {
	river.WorkerDefaults[T]
	env    *Env
	action Action[T]
}

// Timeout implements river.Worker.
func (w *itemWorker[T]) Timeout(*river.Job[T]) time.Duration { return w.env.JobTimeout }

// NextRetry implements river.Worker: a short backoff (jobs.RetryDelay).
func (w *itemWorker[T]) NextRetry(job *river.Job[T]) time.Time {
	return time.Now().Add(jobs.RetryDelay(job.Attempt))
}

// Work implements river.Worker.
func (w *itemWorker[T]) Work(ctx context.Context, job *river.Job[T]) error {
	return Apply(ctx, w.env, job, w.action)
}
