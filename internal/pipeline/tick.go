package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/apply"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/internal/outboxretention"
	"github.com/ffriver/ffriver/jobs"
	"github.com/ffriver/ffriver/subscribe"
	"github.com/ffriver/ffriver/workers"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// retentionScanner is a scanner that knows the outbox retention its ticks
// run with (the outbox_retention scanner of package scanners; not
// execution_retention, whose retention is another one).
type retentionScanner interface {
	OutboxRetention(params json.RawMessage) (time.Duration, error)
}

// tickWorker works ff.tick: one query for the partitions with due work,
// each counted up to the batch (DueRequest.Cap), then the scan
// jobs, inserted and completed in one transaction: one per partition with
// a batch or more due, and the others grouped into scans of at most a batch
// of due items each.
type tickWorker struct {
	river.WorkerDefaults[jobs.TickArgs]
	p *Pipeline
}

// Timeout implements river.Worker.
func (w *tickWorker) Timeout(*river.Job[jobs.TickArgs]) time.Duration { return w.p.env.JobTimeout }

// Work implements river.Worker.
func (w *tickWorker) Work(ctx context.Context, job *river.Job[jobs.TickArgs]) error {
	env := w.p.env
	s, ok := w.p.reg.Lookup(job.Args.Scanner)
	if !ok {
		return river.JobCancel(fmt.Errorf("tick for scanner %q, which this process has not registered (registered: %v); every process must register the same scanners",
			job.Args.Scanner, w.p.reg.Names()))
	}
	filter := job.Args.Filter.FF()
	batch := job.Args.Batch
	if batch <= 0 {
		batch = s.Defaults().Batch
	}
	return inTx(ctx, env, func(tx pgx.Tx) error {
		// The tick needs to know, per partition, whether anything is due
		// and whether a batch or more is: it counts no further.
		// A setting stored in the schema (a retention) wins over the
		// params the leader inserted the tick with: a takeover by a
		// scheduler started with other flags changes nothing.
		params, err := w.p.storedParams(ctx, tx, s, job.Args.Params)
		if err != nil {
			return err
		}
		req := workers.DueRequest{Store: env.Store, NowMs: env.NowMs(), Filter: filter, Params: params, Cap: batch, AfterMs: wakeAfter(job.Metadata)}
		if rs, ok := s.(workers.RangeScanner); ok && req.AfterMs > 0 {
			out, done, err := w.wakeItems(ctx, tx, rs, req, batch)
			if err != nil {
				return err
			}
			if done {
				return complete(ctx, tx, job, out)
			}
		}
		due, err := s.Due(ctx, tx, req)
		if err != nil {
			return fmt.Errorf("scanner %s: due partitions: %w", s.Name(), err)
		}
		env.Metrics.recordDue(ctx, s.Name(), due, env.NowMs())
		if r, ok := s.(retentionScanner); ok {
			if err := w.watchRetention(ctx, tx, s.Name(), r, params); err != nil {
				return err
			}
		}
		out := TickOutput{}
		seen := map[int16]bool{}
		// A partition whose oldest due item has waited a tenth of the
		// sweep period is caught up (jobs.ScanArgs.CatchUp).
		late := map[int16]bool{}
		if catchUp := job.Args.SweepMs / 10; catchUp > 0 {
			for _, d := range due {
				late[d.Partition] = d.OldestMs > 0 && req.NowMs-d.OldestMs >= catchUp
			}
		}
		var inserts []river.InsertManyParams
		scan := func(parts []int16) {
			a := jobs.ScanArgs{Scanner: s.Name(), Partition: parts[0], Batch: batch, Params: params, Filter: job.Args.Filter,
				SweepMs: job.Args.SweepMs}
			if len(parts) > 1 {
				a.Partitions = parts[1:]
			}
			for _, p := range parts {
				if late[p] {
					a.CatchUp = append(a.CatchUp, p)
				}
			}
			inserts = append(inserts, scanInsert(a, filter))
		}
		// Partitions with less than a batch due share scans of at most a
		// batch of due items: a scan job costs a River round (insert, fetch,
		// transaction, completion) whatever it finds, and 256 of them a
		// second took a second to work through (ffctl bench lag).
		var group []int16
		var groupItems int64
		for _, d := range due {
			if !env.Partitions().Contains(d.Partition) {
				out.OutOfRange++
				continue
			}
			if seen[d.Partition] {
				continue
			}
			seen[d.Partition] = true
			out.DuePartitions++
			out.DueItems += d.Count
			out.DueAtLeast = out.DueAtLeast || d.Capped
			if d.Capped || d.Count >= int64(batch) {
				scan([]int16{d.Partition})
				continue
			}
			if len(group) > 0 && groupItems+d.Count > int64(batch) {
				scan(group)
				group, groupItems = nil, 0
			}
			group = append(group, d.Partition)
			groupItems += d.Count
		}
		if len(group) > 0 {
			scan(group)
		}
		// Rows no scan can process (partitions outside the count, foreign
		// states) are logged at most once per interval, never per tick.
		w.p.reportUnprocessable(ctx, s, req, due)
		res, err := apply.InsertManyResults(ctx, tx, inserts)
		if err != nil {
			return err
		}
		behind, err := scansBehind(res, filter, s.Name())
		if err != nil {
			return err
		}
		if out.Behind, _, err = apply.InsertMany(ctx, tx, behind); err != nil {
			return err
		}
		out.Inserted, out.Duplicates = apply.Count(res)
		return complete(ctx, tx, job, out)
	})
}

// wakeItems is a wake tick's work for a RangeScanner: it reads the items
// that came due since the previous wake tick (after req.AfterMs), across
// partitions, and when there are at most a batch of them inserts their
// item jobs itself (done). A scan job and the scan cursors' locks were the
// slowest hop of a lease's expiry at 1,000 expiries/s (ffctl bench lag on
// the 2-core VM: wake ticks' scans of 30-170 partitions ran 17 ms at the
// median and 308 ms at p99, waiting for the cursors of overlapping scans).
// When more than a batch came due the tick fans out scans as a periodic one
// does. The scan cursors stay where they are: the next periodic scan of a
// partition reads these items again if they are still due (skipping those
// whose jobs are in flight), so an item whose job is lost before then is
// found by it, and one lost later by the sweep, as any item. The backlog
// gauge and the report of unprocessable rows are left to the periodic
// ticks, which count everything due.
func (w *tickWorker) wakeItems(ctx context.Context, tx pgx.Tx, s workers.RangeScanner, req workers.DueRequest, batch int) (out TickOutput, done bool, err error) {
	q, err := s.DueRangeQuery(req, batch+1)
	if err != nil {
		return out, false, fmt.Errorf("scanner %s: items due: %w", s.Name(), err)
	}
	var res workers.ScanResult
	err = dbutil.ScopedRead(ctx, tx, dbutil.PlannerSettings, q.SQL, q.Args, func(rows pgx.Rows) (err error) {
		res, err = q.Read(rows)
		return err
	})
	if err != nil {
		return out, false, fmt.Errorf("scanner %s: items due: %w", s.Name(), err)
	}
	if res.Candidates > batch {
		return out, false, nil
	}
	parts := map[int16]bool{}
	for _, it := range res.Items {
		if p, _, ok := itemExecution(it); ok {
			parts[p] = true
		}
	}
	out = TickOutput{DuePartitions: len(parts), DueItems: int64(res.Candidates), Direct: true}
	out.ItemsInserted, out.ItemsInFlight, err = insertItems(ctx, tx, w.p.env, s.Name(), req.Filter, nil, res.Items)
	return out, err == nil, err
}

// scansBehind returns a scan marked Behind (jobs.ScanArgs.Behind) for each
// of a tick's scans that River skipped as the duplicate of a scan
// running now. A scan reads its candidates once, at its start, and the
// running one may have read before the items this tick found came due; a
// wake tick counts only what came due after the previous one, so those
// items would wait for the next periodic tick (up to its interval, a
// second by default). A scan still queued reads after the tick, and one
// behind that is itself running again leaves its items to a later tick.
func scansBehind(res []*rivertype.JobInsertResult, filter ff.Filter, scanner string) ([]river.InsertManyParams, error) {
	var out []river.InsertManyParams
	for _, r := range res {
		if !r.UniqueSkippedAsDuplicate || r.Job.State != rivertype.JobStateRunning {
			continue
		}
		var a jobs.ScanArgs
		if err := json.Unmarshal(r.Job.EncodedArgs, &a); err != nil {
			return nil, fmt.Errorf("scanner %s: reading the args of running scan %d: %w", scanner, r.Job.ID, err)
		}
		if a.Behind {
			continue // a guard: the tick's own scans are never behind
		}
		a.Behind = true
		out = append(out, scanInsert(a, filter))
	}
	return out, nil
}

// watchRetention is the outbox retention tick's look at what holds
// retention back: the named consumers, of which one that holds retention
// is warned about at once (then at most every ConsumerWarnInterval per
// process), and, with metrics, their gauges and the outboxes' maintenance
// waits, so that both are visible to alerts.
func (w *tickWorker) watchRetention(ctx context.Context, tx pgx.Tx, scanner string, r retentionScanner, params json.RawMessage) error {
	env := w.p.env
	retention, err := r.OutboxRetention(params)
	if err != nil {
		return err
	}
	cs, err := subscribe.Consumers(ctx, tx, env.Schema())
	if err != nil {
		return fmt.Errorf("scanner %s: %w", scanner, err)
	}
	w.p.warnHolding(ctx, cs, retention)
	if !env.Metrics.metered() {
		return nil
	}
	env.Metrics.recordConsumers(cs, retention)
	waits, err := outboxretention.Waits(ctx, tx, dbutil.Schema(env.Schema()))
	if err != nil {
		return fmt.Errorf("scanner %s: %w", scanner, err)
	}
	env.Metrics.recordWaits(waits)
	return nil
}
