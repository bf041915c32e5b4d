package workers

import (
	"context"
	"time"

	"github.com/ffriver/ffriver/internal/jobopts"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
)

// The per-item execution path: every item job, built-in or registered with
// a Plugin, runs through its kind's engine (engine.go) and nothing else.

// action is what an item job does, in the item's transaction: lock its row
// (FOR UPDATE or FOR NO KEY UPDATE, SKIP LOCKED when another transaction
// may hold it for long), recheck that the item is still due, write the
// transition and its outbox rows, and report an Output whose Outcome says
// what happened. It returns an error only for real failures; a vanished,
// changed or locked row is an outcome (no_op, orphaned, skipped_locked).
type action[T river.JobArgs] func(ctx context.Context, tx pgx.Tx, args T) (Output, error)

// groupAction is an action over the jobs of a group transaction at once
// (GroupItemOf): one Output per args, in order. It returns an error only
// for real failures, which fail the whole group: the engine then redoes the
// group's jobs one by one with the action, each in a savepoint, so the
// failing job alone is retried.
type groupAction[T river.JobArgs] func(ctx context.Context, tx pgx.Tx, args []T) ([]Output, error)

// itemWorker is the River worker of every item kind: Work hands the job to
// the kind's engine.
type itemWorker[T river.JobArgs] struct {
	river.WorkerDefaults[T]
	engine *engine[T]
}

// Timeout implements river.Worker.
func (w *itemWorker[T]) Timeout(*river.Job[T]) time.Duration { return w.engine.timeout() }

// NextRetry implements river.Worker: a short backoff (jobopts.RetryDelay).
func (w *itemWorker[T]) NextRetry(job *river.Job[T]) time.Time {
	return time.Now().Add(jobopts.RetryDelay(job.Attempt))
}

// Work implements river.Worker.
func (w *itemWorker[T]) Work(ctx context.Context, job *river.Job[T]) error {
	return w.engine.work(ctx, job)
}
