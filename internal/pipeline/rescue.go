package pipeline

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
// again rescueGrace after their timeout, with an error saying why, so they
// are redone within about the job timeout plus a few seconds. Re-running a
// job whose process is merely slow is safe: every ffriver job rechecks what
// it acts on under a lock, and a second run records no_op.

// rescueInterval is how often the leader looks for jobs to rescue early.
const rescueInterval = time.Second

// rescueGrace is how long past the job timeout a running job is left
// before it is presumed dead and rescued early.
const rescueGrace = time.Second

// RescueOutput is the River job output of ff.rescue.
type RescueOutput struct {
	Rescued int `json:"rescued"`
}

// rescueWorker works ff.rescue.
type rescueWorker struct {
	river.WorkerDefaults[jobs.RescueArgs]
	p *Pipeline
}

// Timeout implements river.Worker.
func (w *rescueWorker) Timeout(*river.Job[jobs.RescueArgs]) time.Duration { return w.p.env.JobTimeout }

// Work implements river.Worker.
func (w *rescueWorker) Work(ctx context.Context, job *river.Job[jobs.RescueArgs]) error {
	client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return fmt.Errorf("ffriver: no River client in the worker context: %w", err)
	}
	s := dbutil.Schema(client.Schema())
	return inTx(ctx, w.p.env, func(tx pgx.Tx) error {
		// The job's own row is excluded: it is running now.
		n, err := rescueStuck(ctx, tx, s, job.Args.Queues, job.Args.AfterMs, job.ID)
		if err != nil {
			return err
		}
		out := RescueOutput{Rescued: int(n)}
		if out.Rescued > 0 {
			w.p.env.Logger.WarnContext(ctx, "ffriver: re-queued jobs left running past the job timeout by a process presumed dead",
				"jobs", out.Rescued, "queues", job.Args.Queues, "running_for_more_than", time.Duration(job.Args.AfterMs)*time.Millisecond)
		}
		return complete(ctx, tx, job, out)
	})
}

// rescueSQL re-queues the running jobs of the queues $1 that started more
// than $2 ms ago, except $3 (the rescue's own job, running now).
const rescueSQL = `UPDATE {S}river_job SET state = 'available', scheduled_at = now(),
	errors = array_append(errors, jsonb_build_object('at', now(), 'attempt', attempt,
		'error', 'ffriver: still running '||$2::bigint||' ms after it started, past the job timeout: its process is presumed dead; re-queued by ff.rescue'))
	WHERE ` + rescueWhere

// rescueWhere selects the jobs rescueSQL re-queues.
const rescueWhere = `state = 'running' AND queue = ANY($1::text[]) AND id <> $3
	  AND attempted_at < now() - make_interval(secs => $2::bigint / 1000.0)`

// rescueScanSQL makes rescueSQL read river_job through a plain index scan
// (of River's river_job_prioritized_fetching_index, whose entries begin with
// state and queue), never a bitmap scan. Every job that ran leaves a dead
// index entry of its running version until river_job is vacuumed, which on
// a table holding a day of completed jobs is rare: under churn the running
// range of the index is almost all dead entries. A bitmap scan never marks
// an entry dead, so every rescue, every second, visited the heap page of
// each of them again (EXPLAIN after 200,000 jobs ran: 200,000 entries, 3,280
// heap pages, 28-180 ms, each time until a vacuum). A plain index scan
// marks the entries whose row is dead to every transaction (LP_DEAD) the
// first time, and later scans step over them in the index page without
// touching the heap (95 ms once, then 4 ms: the index pages of the running
// range and the heap pages of the 200 live running jobs only); Postgres
// removes the marked entries when it next needs room on their page.
const rescueScanSQL = `SET LOCAL enable_bitmapscan = off`

// rescueStuck runs rescueSQL in tx (which it leaves reading river_job by
// plain index scans: see rescueScanSQL) and returns how many jobs it
// re-queued.
func rescueStuck(ctx context.Context, tx pgx.Tx, s dbutil.Schema, queues []string, afterMs, self int64) (int64, error) {
	if _, err := tx.Exec(ctx, rescueScanSQL); err != nil {
		return 0, dbutil.MapErr(err, "rescuing jobs")
	}
	tag, err := tx.Exec(ctx, s.SQL(rescueSQL), queues, afterMs, self)
	if err != nil {
		return 0, dbutil.MapErr(err, "rescuing jobs")
	}
	return tag.RowsAffected(), nil
}

// rescueJob is the leader's periodic ff.rescue of the pipeline's queues.
func (p *Pipeline) rescueJob() *river.PeriodicJob {
	args := jobs.RescueArgs{Queues: []string{p.ScanQueue(), p.ApplyQueue()}, AfterMs: (p.env.JobTimeout + rescueGrace).Milliseconds()}
	opts := withTags(p.TickInsertOpts(), rescueTags(p.filter))
	return river.NewPeriodicJob(river.PeriodicInterval(rescueInterval),
		func() (river.JobArgs, *river.InsertOpts) { return args, opts },
		&river.PeriodicJobOpts{ID: "ff.rescue:" + p.ScanQueue()})
}
