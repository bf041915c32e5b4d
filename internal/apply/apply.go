// Package apply is what the apply engine of package workers (engine.go:
// the one execution path of every item job) runs with, and the link
// through which the pipeline (internal/pipeline) registers the workers of
// the item kinds a plug-in built with workers.ItemOf. It is internal so
// that none of the runtime is part of the plug-in API; it imports nothing
// of package workers, which imports it.
package apply

import (
	"context"
	"fmt"
	"time"

	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// Config is how a pipeline runs its item jobs.
type Config struct {
	// JobTimeout of every ffriver job (River cancels the job's context
	// after it; River's rescuer re-runs a job stuck longer than the
	// client's RescueStuckJobsAfter).
	JobTimeout time.Duration
	// GroupSize is the most item jobs of one grouped kind applied in one
	// transaction (0: DefaultGroupSize; 1 disables grouping).
	GroupSize int
	// GroupLanes is how many group transactions of one kind a process runs
	// at once (0: DefaultGroupLanes).
	GroupLanes int
}

// DefaultJobTimeout is Config.JobTimeout unless set.
const DefaultJobTimeout = 30 * time.Second

// DefaultGroupSize is Config.GroupSize unless set (measured in package
// workers' engine.go).
const DefaultGroupSize = 64

// DefaultGroupLanes is Config.GroupLanes unless set.
const DefaultGroupLanes = 2

// LockedRetryAfter is how long an item job whose execution was locked by
// another transaction (outcome skipped_locked), or a flow hop that waited
// for a lock until its lock_timeout, waits before it tries again.
const LockedRetryAfter = time.Second

// addWorker is package workers' registration of an item's worker, a
// func(workers.Item, *river.Workers, *workers.Env, Config) error. It is
// written once, by package workers' init, before anything runs, and only
// read after: a link between two packages, not state.
var addWorker any

// SetAddWorker is called by package workers' init with the function that
// registers the worker of an item kind (I is workers.Item, E *workers.Env).
func SetAddWorker[I, E any](f func(item I, w *river.Workers, env E, cfg Config) error) { addWorker = f }

// AddWorker registers the worker of item, whose actions run with env,
// through the apply engine run as cfg says.
func AddWorker[I, E any](item I, w *river.Workers, env E, cfg Config) error {
	return addWorker.(func(I, *river.Workers, E, Config) error)(item, w, env, cfg)
}

// InsertMany inserts params in tx with the River client of the worker's
// context; it returns how many were inserted and how many were skipped as
// duplicates of jobs in flight.
func InsertMany(ctx context.Context, tx pgx.Tx, params []river.InsertManyParams) (inserted, duplicates int, err error) {
	res, err := InsertManyResults(ctx, tx, params)
	if err != nil {
		return 0, 0, err
	}
	inserted, duplicates = Count(res)
	return inserted, duplicates, nil
}

// Count returns how many of res were inserted and how many skipped as
// duplicates of jobs in flight.
func Count(res []*rivertype.JobInsertResult) (inserted, duplicates int) {
	for _, r := range res {
		if r.UniqueSkippedAsDuplicate {
			duplicates++
		} else {
			inserted++
		}
	}
	return inserted, duplicates
}

// InsertManyResults is InsertMany returning River's result of each insert
// (River does not say in which order): a duplicate's Job is the job in
// flight that it duplicates, in its state.
func InsertManyResults(ctx context.Context, tx pgx.Tx, params []river.InsertManyParams) ([]*rivertype.JobInsertResult, error) {
	if len(params) == 0 {
		return nil, nil
	}
	client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return nil, fmt.Errorf("ffriver: no River client in the worker context: %w", err)
	}
	res, err := client.InsertManyTx(ctx, tx, params)
	if err != nil {
		return nil, dbutil.MapErr(err, "inserting jobs")
	}
	return res, nil
}
