package workers

import (
	"context"
	"fmt"

	"github.com/ffriver/ffriver/scanners"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
)

// Plugin is a scanner with the item job kinds its scans produce: the one
// value that registers both in a pipeline (ffriver.Config.Plugins). The
// built-in scanners are plugins too (Builtins), registered the same way.
type Plugin struct {
	// Scanner finds the due items (nil: items only, for kinds inserted by
	// something other than a scan).
	Scanner scanners.Scanner
	// Items are the kinds of job args Scanner.Scan returns, each with its
	// action.
	Items []Item
}

// Item is one item job kind and its action. Build it with ItemOf.
type Item struct {
	kind string
	add  func(workers *river.Workers, env *Env) error
}

// Kind is the item's River job kind.
func (i Item) Kind() string { return i.kind }

// ItemOf returns the item of job args type T (a struct type: its zero
// value's Kind names the kind) whose action is fn, called with the
// pipeline's Env. Its worker runs fn through Apply: one transaction with
// the job's completion, River output from the returned Output, retries
// with a short backoff, validation errors cancelling the job.
func ItemOf[T river.JobArgs](fn func(ctx context.Context, tx pgx.Tx, env *Env, args T) (Output, error)) Item {
	var zero T
	return Item{kind: zero.Kind(), add: func(workers *river.Workers, env *Env) error {
		action := func(ctx context.Context, tx pgx.Tx, args T) (Output, error) { return fn(ctx, tx, env, args) }
		if err := river.AddWorkerSafely(workers, &itemWorker[T]{env: env, action: action}); err != nil {
			return fmt.Errorf("ffriver: adding the worker of item kind %s: %w", zero.Kind(), err)
		}
		return nil
	}}
}
