package workers

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/jobs"
	"github.com/ffriver/ffriver/scanners"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
)

// ScanWorker works ff.scan: it selects up to a batch of due items of its
// partition, or of each of its partitions (filter applied in SQL), inserts
// one item job per distinct item not already in flight, re-enqueues a scan
// of a partition after its last candidate when that partition filled the
// batch, and completes itself, all in one transaction.
type ScanWorker struct {
	river.WorkerDefaults[jobs.ScanArgs]
	p *Pipeline
}

// Timeout implements river.Worker.
func (w *ScanWorker) Timeout(*river.Job[jobs.ScanArgs]) time.Duration { return w.p.env.JobTimeout }

// NextRetry implements river.Worker.
func (w *ScanWorker) NextRetry(job *river.Job[jobs.ScanArgs]) time.Time {
	return time.Now().Add(jobs.RetryDelay(job.Attempt))
}

// Work implements river.Worker.
func (w *ScanWorker) Work(ctx context.Context, job *river.Job[jobs.ScanArgs]) error {
	env := w.p.env
	a := job.Args
	s, ok := w.p.reg.Lookup(a.Scanner)
	if !ok {
		return river.JobCancel(fmt.Errorf("scan for scanner %q, which this process has not registered (registered: %v)", a.Scanner, w.p.reg.Names()))
	}
	parts := append([]int16{a.Partition}, a.Partitions...)
	for _, p := range parts {
		if !env.Partitions().Contains(p) {
			return river.JobCancel(ff.Validationf("partition", "%d is outside this schema's 0..%d", p, int(env.Partitions())-1))
		}
	}
	if len(parts) > 1 && len(a.After) > 0 {
		return river.JobCancel(ff.Validationf("after", "a scan of several partitions has no cursor"))
	}
	filter := a.Filter.FF()
	if err := filter.Validate(); err != nil {
		return river.JobCancel(err)
	}
	batch := a.Batch
	if batch <= 0 {
		batch = s.Defaults().Batch
	}
	return inTx(ctx, env, func(tx pgx.Tx) error {
		now := env.NowMs()
		var items []river.JobArgs
		var next []river.InsertManyParams
		out := ScanOutput{}
		for _, p := range parts {
			res, err := s.Scan(ctx, tx, scanners.ScanRequest{Store: env.Store, Partition: p, NowMs: now, Limit: batch,
				Filter: filter, Params: a.Params, After: a.After})
			if err != nil {
				return fmt.Errorf("scanner %s: scanning partition %d: %w", s.Name(), p, err)
			}
			out.Candidates += res.Candidates
			items = append(items, res.Items...)
			if res.Candidates >= batch && len(res.Next) > 0 {
				// This partition continues on its own after its last candidate.
				n := a
				n.Partition, n.Partitions, n.After = p, nil, res.Next
				next = append(next, river.InsertManyParams{Args: n, InsertOpts: ScanInsertOpts(filter)})
			}
		}
		params, err := dedupe(items, ItemInsertOpts(filter))
		if err != nil {
			return err
		}
		client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
		if err != nil {
			return fmt.Errorf("ffriver: no River client in the worker context: %w", err)
		}
		params, skipped, err := skipInFlight(ctx, tx, client.Schema(), params)
		if err != nil {
			return err
		}
		ins, dup, err := insertMany(ctx, tx, params)
		if err != nil {
			return err
		}
		out.Inserted, out.Duplicates = ins, dup+skipped
		if len(next) > 0 {
			if _, _, err := insertMany(ctx, tx, next); err != nil {
				return err
			}
			out.Continued = true
		}
		return complete(ctx, tx, job, out)
	})
}

// dedupe turns items into insert params, dropping exact duplicates: River
// fails a whole InsertMany that carries one unique key twice.
func dedupe(items []river.JobArgs, opts *river.InsertOpts) ([]river.InsertManyParams, error) {
	seen := map[string]bool{}
	out := make([]river.InsertManyParams, 0, len(items))
	for _, it := range items {
		b, err := json.Marshal(it)
		if err != nil {
			return nil, fmt.Errorf("encoding item %s: %w", it.Kind(), err)
		}
		key := it.Kind() + "\x00" + string(b)
		if seen[key] {
			continue
		}
		seen[key] = true
		out = append(out, river.InsertManyParams{Args: it, InsertOpts: opts})
	}
	return out, nil
}

// insertMany inserts params in tx with the River client of the worker's
// context; it returns how many were inserted and how many were skipped as
// duplicates of jobs in flight.
func insertMany(ctx context.Context, tx pgx.Tx, params []river.InsertManyParams) (inserted, duplicates int, err error) {
	if len(params) == 0 {
		return 0, 0, nil
	}
	client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("ffriver: no River client in the worker context: %w", err)
	}
	res, err := client.InsertManyTx(ctx, tx, params)
	if err != nil {
		return 0, 0, dbutil.MapErr(err, "inserting jobs")
	}
	for _, r := range res {
		if r.UniqueSkippedAsDuplicate {
			duplicates++
		} else {
			inserted++
		}
	}
	return inserted, duplicates, nil
}
