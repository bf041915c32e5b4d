package workers

import (
	"context"
	"fmt"

	"github.com/ffriver/ffriver/internal/apply"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
)

// Plugin is a scanner with the item job kinds its scans produce: the one
// value that registers both in a pipeline (ffriver.Config.Plugins). The
// built-in scanners are plugins too (scanners.Builtins), registered the
// same way.
type Plugin struct {
	// Scanner finds the due items (nil: items only, for kinds inserted by
	// something other than a scan).
	Scanner Scanner
	// Items are the kinds of job args Scanner.Scan returns, each with its
	// action.
	Items []Item
}

// Item is one item job kind and its action. Build it with ItemOf or
// GroupItemOf.
type Item struct {
	kind string
	add  func(workers *river.Workers, env *Env, cfg apply.Config) error
}

// Kind is the item's River job kind.
func (i Item) Kind() string { return i.kind }

// The pipeline (internal/pipeline) registers the items' workers through
// package apply: nothing of it is part of this package's API.
func init() {
	apply.SetAddWorker(func(i Item, w *river.Workers, env *Env, cfg apply.Config) error { return i.add(w, env, cfg) })
}

// ItemOf returns the item of job args type T (a struct type: its zero
// value's Kind names the kind) whose action is fn, called with the
// pipeline's Env. Its worker runs fn through the apply engine: the
// transition and its outbox rows in one transaction, River output from the
// returned Output, the job completed by River after the commit, retries
// with a short backoff, validation errors cancelling the job. Each job has
// a transaction of its own; GroupItemOf builds a kind whose concurrent
// jobs share one.
func ItemOf[T river.JobArgs](fn func(ctx context.Context, tx pgx.Tx, env *Env, args T) (Output, error)) Item {
	return itemOf(fn, nil, false)
}

// GroupItemOf returns a grouped item of job args type T: concurrent jobs
// of the kind share a transaction (the apply engine's group apply,
// engine.go). one applies a single job: it must then touch only its own
// execution's rows, lock them without waiting (SKIP LOCKED or NOWAIT), and
// keep no state across calls, since the items of a group run one after
// the other in one transaction and a failing one is rolled back to a
// savepoint. many, when not nil, applies all the jobs of a group
// transaction in one call (one Output per args, in order: set-based
// statements over the group); one then runs a group of one, and redoes a
// group one job at a time, each in a savepoint, when many fails, so a
// failing job is retried alone. Both must decide each execution alike;
// many must lock without waiting and treat an execution named twice as
// one applied after the other.
func GroupItemOf[T river.JobArgs](one func(ctx context.Context, tx pgx.Tx, env *Env, args T) (Output, error),
	many func(ctx context.Context, tx pgx.Tx, env *Env, args []T) ([]Output, error)) Item {
	return itemOf(one, many, true)
}

// itemOf is ItemOf and GroupItemOf: many only with grouped.
func itemOf[T river.JobArgs](one func(ctx context.Context, tx pgx.Tx, env *Env, args T) (Output, error),
	many func(ctx context.Context, tx pgx.Tx, env *Env, args []T) ([]Output, error), grouped bool) Item {
	var zero T
	return Item{kind: zero.Kind(), add: func(workers *river.Workers, env *Env, cfg apply.Config) error {
		e := newEngine(env, cfg, func(ctx context.Context, tx pgx.Tx, args T) (Output, error) { return one(ctx, tx, env, args) }, grouped)
		if many != nil {
			e.many = func(ctx context.Context, tx pgx.Tx, args []T) ([]Output, error) { return many(ctx, tx, env, args) }
		}
		return addItemWorker(workers, e)
	}}
}

// addItemWorker registers the worker of an item kind that runs through e.
func addItemWorker[T river.JobArgs](workers *river.Workers, e *engine[T]) error {
	if err := river.AddWorkerSafely(workers, &itemWorker[T]{engine: e}); err != nil {
		var zero T
		return fmt.Errorf("ffriver: adding the worker of item kind %s: %w", zero.Kind(), err)
	}
	return nil
}
