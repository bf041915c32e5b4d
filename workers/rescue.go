package workers

import (
	"context"
	"fmt"
	"time"

	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/jobs"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
)

// Early rescue of the jobs of a dead process.
//
// A process killed while it runs ffriver jobs (an item, a partition's scan)
// leaves them "running" in River's table. River's rescuer retries such
// jobs once they have run for RescueStuckJobsAfter, checking every 30 s
// (not configurable in River v0.51): ffscheduler's minute plus up to 30 s,
// during which the item's execution waits. Every ffriver job is bounded by
// the job timeout (River cancels Work's context after it, and the apply
// engine's transactions end with it too), so a job still running well past
// that belongs to a process that is gone (or hung). ff.rescue, a periodic
// job of the leader, makes such jobs of its filter's queues available
// again RescueGrace after their timeout, with an error saying why, so they
// are redone within about the job timeout plus a few seconds. Re-running a
// job whose process is merely slow is safe: every ffriver job rechecks what
// it acts on under a lock, and a second run records no_op.

// RescueInterval is how often the leader looks for jobs to rescue early.
const RescueInterval = time.Second

// RescueGrace is how long past the job timeout a running job is left
// before it is presumed dead and rescued early.
const RescueGrace = time.Second

// RescueOutput is the River job output of ff.rescue.
type RescueOutput struct {
	Rescued int `json:"rescued"`
}

// RescueWorker works ff.rescue.
type RescueWorker struct {
	river.WorkerDefaults[jobs.RescueArgs]
	p *Pipeline
}

// Timeout implements river.Worker.
func (w *RescueWorker) Timeout(*river.Job[jobs.RescueArgs]) time.Duration { return w.p.env.JobTimeout }

// Work implements river.Worker.
func (w *RescueWorker) Work(ctx context.Context, job *river.Job[jobs.RescueArgs]) error {
	client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return fmt.Errorf("ffriver: no River client in the worker context: %w", err)
	}
	s := dbutil.Schema(client.Schema())
	return inTx(ctx, w.p.env, func(tx pgx.Tx) error {
		// The job's own row is excluded: it is running now.
		tag, err := tx.Exec(ctx, s.SQL(`UPDATE {S}river_job SET state = 'available', scheduled_at = now(),
			errors = array_append(errors, jsonb_build_object('at', now(), 'attempt', attempt,
				'error', 'ffriver: still running '||$2::bigint||' ms after it started, past the job timeout: its process is presumed dead; re-queued by ff.rescue'))
			WHERE state = 'running' AND queue = ANY($1::text[]) AND id <> $3
			  AND attempted_at < now() - make_interval(secs => $2::bigint / 1000.0)`), job.Args.Queues, job.Args.AfterMs, job.ID)
		if err != nil {
			return dbutil.MapErr(err, "rescuing jobs")
		}
		out := RescueOutput{Rescued: int(tag.RowsAffected())}
		if out.Rescued > 0 {
			w.p.env.Logger.WarnContext(ctx, "ffriver: re-queued jobs left running past the job timeout by a process presumed dead",
				"jobs", out.Rescued, "queues", job.Args.Queues, "running_for_more_than", time.Duration(job.Args.AfterMs)*time.Millisecond)
		}
		return complete(ctx, tx, job, out)
	})
}

// rescueJob is the leader's periodic ff.rescue of the pipeline's queues.
func (p *Pipeline) rescueJob() *river.PeriodicJob {
	args := jobs.RescueArgs{Queues: []string{p.ScanQueue(), p.ApplyQueue()}, AfterMs: (p.env.JobTimeout + RescueGrace).Milliseconds()}
	opts := withTags(p.TickInsertOpts(), RescueTags(p.filter))
	return river.NewPeriodicJob(river.PeriodicInterval(RescueInterval),
		func() (river.JobArgs, *river.InsertOpts) { return args, opts },
		&river.PeriodicJobOpts{ID: "ff.rescue:" + p.ScanQueue()})
}
