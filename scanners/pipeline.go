package scanners

import (
	"context"
	"encoding/json"
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

// Pipeline is a registry of scanners bound to an Env, a filter and settings:
// it supplies the River workers, periodic jobs and queues of the whole
// tick → scan → item pipeline.
type Pipeline struct {
	reg      *Registry
	env      *Env
	filter   ff.Filter
	settings map[string]Settings
}

// NewPipeline resolves each scanner's settings (its defaults, overridden by
// the non-zero fields of overrides[name]) and checks them. An override for a
// scanner that is not registered is an error, so a typo is not silently
// ignored.
func NewPipeline(reg *Registry, env *Env, filter ff.Filter, overrides map[string]Settings) (*Pipeline, error) {
	if err := filter.Validate(); err != nil {
		return nil, err
	}
	for name := range overrides {
		if _, ok := reg.Lookup(name); !ok {
			return nil, ff.Validationf("scanner", "settings for %q, which is not registered (registered: %v)", name, reg.Names())
		}
	}
	p := &Pipeline{reg: reg, env: env, filter: filter, settings: map[string]Settings{}}
	for _, s := range reg.Scanners() {
		st := s.Defaults()
		if o, ok := overrides[s.Name()]; ok {
			if o.Interval != 0 {
				st.Interval = o.Interval
			}
			if o.Batch != 0 {
				st.Batch = o.Batch
			}
			st.Disabled = st.Disabled || o.Disabled
		}
		if st.Interval < 10*time.Millisecond {
			return nil, ff.Validationf("scanner", "%s: interval %s is below 10ms", s.Name(), st.Interval)
		}
		if st.Batch < 1 || st.Batch > 100_000 {
			return nil, ff.Validationf("scanner", "%s: batch %d is outside 1..100000", s.Name(), st.Batch)
		}
		p.settings[s.Name()] = st
	}
	return p, nil
}

// Registry returns the pipeline's registry.
func (p *Pipeline) Registry() *Registry { return p.reg }

// Env returns the pipeline's Env.
func (p *Pipeline) Env() *Env { return p.env }

// Filter returns the pipeline's scanner filter.
func (p *Pipeline) Filter() ff.Filter { return p.filter }

// Settings returns the resolved settings of the scanner called name.
func (p *Pipeline) Settings(name string) (Settings, bool) {
	s, ok := p.settings[name]
	return s, ok
}

// ScanQueue is the queue of this pipeline's ticks and scans.
func (p *Pipeline) ScanQueue() string { return jobs.ScanQueue(p.filter) }

// ApplyQueue is the queue of this pipeline's item jobs.
func (p *Pipeline) ApplyQueue() string { return jobs.ApplyQueue(p.filter) }

// AddWorkers registers the tick and scan workers, the flow advance worker
// (ff.advance) and every scanner's item workers with River's AddWorkerSafely: a kind registered twice is an error,
// not a panic.
func (p *Pipeline) AddWorkers(workers *river.Workers) error {
	if err := river.AddWorkerSafely(workers, &TickWorker{p: p}); err != nil {
		return fmt.Errorf("ffriver: adding the tick worker: %w", err)
	}
	if err := river.AddWorkerSafely(workers, &ScanWorker{p: p}); err != nil {
		return fmt.Errorf("ffriver: adding the scan worker: %w", err)
	}
	// Flow hops are enqueued by terminal transitions, whichever scanners run.
	if err := addAdvanceWorker(workers, p.env); err != nil {
		return fmt.Errorf("ffriver: adding the flow advance worker: %w", err)
	}
	for _, s := range p.reg.Scanners() {
		if err := s.AddWorkers(workers, p.env); err != nil {
			return fmt.Errorf("ffriver: adding the workers of scanner %s: %w", s.Name(), err)
		}
	}
	return nil
}

// TickInsertOpts are the insert options of this pipeline's ticks.
func (p *Pipeline) TickInsertOpts() *river.InsertOpts {
	return &river.InsertOpts{Queue: p.ScanQueue(), MaxAttempts: jobs.TickMaxAttempts, UniqueOpts: jobs.UniqueTick()}
}

// TickArgs returns the tick of the scanner called name, as the periodic job
// inserts it.
func (p *Pipeline) TickArgs(name string) (jobs.TickArgs, error) {
	s, ok := p.reg.Lookup(name)
	if !ok {
		return jobs.TickArgs{}, ff.Validationf("scanner", "%q is not registered", name)
	}
	params, err := scannerParams(s)
	if err != nil {
		return jobs.TickArgs{}, err
	}
	return jobs.TickArgs{Scanner: name, Batch: p.settings[name].Batch, Params: params, Filter: jobs.FilterOf(p.filter)}, nil
}

// PeriodicJobs returns one River periodic job per enabled scanner: a tick
// every Interval, run on start, unique while in flight within its second
// (jobs.UniqueTick: a tick still queued or running swallows the next ones
// of the same second, and a tick stuck in a dead process blocks no more).
// Only the elected leader inserts periodic jobs.
func (p *Pipeline) PeriodicJobs() ([]*river.PeriodicJob, error) {
	var out []*river.PeriodicJob
	for _, s := range p.reg.Scanners() {
		st := p.settings[s.Name()]
		if st.Disabled {
			continue
		}
		args, err := p.TickArgs(s.Name())
		if err != nil {
			return nil, err
		}
		opts := p.TickInsertOpts()
		out = append(out, river.NewPeriodicJob(river.PeriodicInterval(st.Interval),
			func() (river.JobArgs, *river.InsertOpts) { return args, opts },
			&river.PeriodicJobOpts{ID: "ff.tick:" + p.ScanQueue() + ":" + s.Name(), RunOnStart: true}))
	}
	return out, nil
}

// QueueFetchCooldown is the FetchCooldown of ffriver's two queues: the
// least time between two fetches of a queue's producer. River's default
// (100 ms) caps a queue at MaxWorkers jobs per 100 ms, whatever the jobs
// cost: 160 items/s for ffworker's 16 apply workers, and a tick's 256 scans
// spread over seconds. The cooldown only spaces fetches while jobs keep
// coming (they are woken by River's insert notifications and completions);
// an idle queue still polls once per FetchPollInterval.
const QueueFetchCooldown = 5 * time.Millisecond

// Queues returns the pipeline's two queues with the given worker counts and
// QueueFetchCooldown. A count of 0 leaves that queue out (a process that
// does not work it).
func (p *Pipeline) Queues(scanWorkers, applyWorkers int) map[string]river.QueueConfig {
	q := map[string]river.QueueConfig{}
	if scanWorkers > 0 {
		q[p.ScanQueue()] = river.QueueConfig{MaxWorkers: scanWorkers, FetchCooldown: QueueFetchCooldown}
	}
	if applyWorkers > 0 {
		q[p.ApplyQueue()] = river.QueueConfig{MaxWorkers: applyWorkers, FetchCooldown: QueueFetchCooldown}
	}
	return q
}

// ItemInsertOpts are the insert options of an item job of a pipeline with
// filter f: its apply queue, unique while in flight, a few attempts.
func ItemInsertOpts(f ff.Filter) *river.InsertOpts {
	return &river.InsertOpts{Queue: jobs.ApplyQueue(f), MaxAttempts: jobs.ItemMaxAttempts, UniqueOpts: jobs.UniqueInFlight()}
}

// ScanInsertOpts are the insert options of a scan job of a pipeline with
// filter f.
func ScanInsertOpts(f ff.Filter) *river.InsertOpts {
	return &river.InsertOpts{Queue: jobs.ScanQueue(f), MaxAttempts: jobs.ScanMaxAttempts, UniqueOpts: jobs.UniqueInFlight()}
}

// TickOutput is the River job output of a tick.
type TickOutput struct {
	DuePartitions int   `json:"due_partitions"`
	DueItems      int64 `json:"due_items"`
	Inserted      int   `json:"scans_inserted"`
	Duplicates    int   `json:"scans_in_flight"`
	// OutOfRange counts partitions outside the schema's partition count
	// (rows written by hand); they are not scanned.
	OutOfRange int `json:"out_of_range,omitempty"`
}

// TickWorker works ff.tick: one query for the partitions with due work,
// then the scan jobs, inserted and completed in one transaction: one per
// partition with a batch or more due, and the others grouped into scans of
// at most a batch of due items each.
type TickWorker struct {
	river.WorkerDefaults[jobs.TickArgs]
	p *Pipeline
}

// Timeout implements river.Worker.
func (w *TickWorker) Timeout(*river.Job[jobs.TickArgs]) time.Duration { return w.p.env.JobTimeout }

// Work implements river.Worker.
func (w *TickWorker) Work(ctx context.Context, job *river.Job[jobs.TickArgs]) error {
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
		due, err := s.Due(ctx, tx, DueRequest{Env: env, NowMs: env.NowMs(), Filter: filter, Params: job.Args.Params})
		if err != nil {
			return fmt.Errorf("scanner %s: due partitions: %w", s.Name(), err)
		}
		out := TickOutput{}
		seen := map[int16]bool{}
		var params []river.InsertManyParams
		scan := func(parts []int16) {
			a := jobs.ScanArgs{Scanner: s.Name(), Partition: parts[0], Batch: batch, Params: job.Args.Params, Filter: job.Args.Filter}
			if len(parts) > 1 {
				a.Partitions = parts[1:]
			}
			params = append(params, river.InsertManyParams{Args: a, InsertOpts: ScanInsertOpts(filter)})
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
			if d.Count >= int64(batch) {
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
		if out.OutOfRange > 0 {
			env.Logger.WarnContext(ctx, "ffriver: due rows in partitions outside the schema's partition count are not scanned",
				"scanner", s.Name(), "partitions", int(env.Partitions()), "out_of_range", out.OutOfRange)
		}
		ins, dup, err := insertMany(ctx, tx, params)
		if err != nil {
			return err
		}
		out.Inserted, out.Duplicates = ins, dup
		return complete(ctx, tx, job, out)
	})
}

// ScanOutput is the River job output of a scan.
type ScanOutput struct {
	Candidates int  `json:"candidates"`
	Inserted   int  `json:"items_inserted"`
	Duplicates int  `json:"items_in_flight"`
	Continued  bool `json:"continued"`
}

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
			res, err := s.Scan(ctx, tx, ScanRequest{Env: env, Partition: p, NowMs: now, Limit: batch,
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

// inTx runs fn in a transaction on env's pool; fn commits nothing itself.
func inTx(ctx context.Context, env *Env, fn func(pgx.Tx) error) error {
	return inTxOpts(ctx, env, pgx.TxOptions{}, fn)
}

// itemBegin begins an item transaction with generic plans forced for
// its statements, in the BEGIN's own round trip (SET LOCAL ends with the
// transaction). An item runs a handful of key lookups and single-row writes
// plus River's JobCompleteTx, whose statement (a CTE over unnested arrays)
// Postgres otherwise re-plans at every execution, because its generic plan
// is estimated for ten rows and the custom one for one: planning was about a
// quarter of the server's CPU per item (ffctl bench expire, perf).
const itemBegin = "BEGIN; SET LOCAL plan_cache_mode = force_generic_plan"

// inTxOpts is inTx with transaction options.
func inTxOpts(ctx context.Context, env *Env, opts pgx.TxOptions, fn func(pgx.Tx) error) error {
	tx, err := env.Pool().BeginTx(ctx, opts)
	if err != nil {
		return dbutil.MapErr(err, "begin")
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return dbutil.MapErr(err, "commit")
	}
	return nil
}

// complete records output and completes job inside tx.
func complete[T river.JobArgs](ctx context.Context, tx pgx.Tx, job *river.Job[T], output any) error {
	if err := river.RecordOutput(ctx, output); err != nil {
		return fmt.Errorf("recording job output: %w", err)
	}
	if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
		return dbutil.MapErr(err, "completing job")
	}
	return nil
}

// Output is the River job output of an item job: what the action did.
type Output struct {
	Outcome executions.Outcome `json:"outcome"`
	// Detail is the action's own report, if it has one.
	Detail any `json:"detail,omitempty"`
}

// Apply runs an item action the way every built-in item worker does: begin
// a transaction; run action in it; record its Output as the job's River
// output; complete the job with river.JobCompleteTx in the same transaction;
// commit; poke the outbox waker when the outcome is Processed. The
// transition, its outbox rows and the job's completion commit or roll back
// together: a job killed mid-way leaves nothing behind and is retried.
//
// A validation error (ff.ErrValidation: a malformed id, a partition outside
// the schema) cancels the job without retries. Any other error rolls back
// and fails the attempt; River retries it (jobs.ItemMaxAttempts attempts,
// short backoff) and then discards it, and the next scan re-creates the
// item if it is still due. Actions report a vanished, changed or locked row
// as an outcome (no_op, orphaned, skipped_locked), never as an error.
func Apply[T river.JobArgs](ctx context.Context, env *Env, job *river.Job[T], action func(ctx context.Context, tx pgx.Tx) (Output, error)) error {
	var out Output
	err := inTxOpts(ctx, env, pgx.TxOptions{BeginQuery: itemBegin}, func(tx pgx.Tx) error {
		var err error
		if out, err = action(ctx, tx); err != nil {
			return err
		}
		return complete(ctx, tx, job, out)
	})
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
		env.Waker.Poke()
	}
	return nil
}

// ItemWorker is the standard per-item worker: Work runs Action through
// Apply. Construct it with NewItemWorker.
type ItemWorker[T river.JobArgs] struct {
	river.WorkerDefaults[T]
	env    *Env
	action func(ctx context.Context, tx pgx.Tx, args T) (Output, error)
}

// NewItemWorker returns an ItemWorker running action in env.
func NewItemWorker[T river.JobArgs](env *Env, action func(ctx context.Context, tx pgx.Tx, args T) (Output, error)) *ItemWorker[T] {
	return &ItemWorker[T]{env: env, action: action}
}

// Timeout implements river.Worker.
func (w *ItemWorker[T]) Timeout(*river.Job[T]) time.Duration { return w.env.JobTimeout }

// NextRetry implements river.Worker: a short backoff (jobs.RetryDelay).
func (w *ItemWorker[T]) NextRetry(job *river.Job[T]) time.Time {
	return time.Now().Add(jobs.RetryDelay(job.Attempt))
}

// Work implements river.Worker.
func (w *ItemWorker[T]) Work(ctx context.Context, job *river.Job[T]) error {
	return Apply(ctx, w.env, job, func(ctx context.Context, tx pgx.Tx) (Output, error) {
		return w.action(ctx, tx, job.Args)
	})
}

// Backlog is one scanner's due work now.
type Backlog struct {
	Scanner string
	// Due items, over Partitions partitions.
	Due        int64
	Partitions int
	// OldestMs is when the oldest due item became due (0: nothing due, or
	// the scanner cannot tell).
	OldestMs int64
}

// Backlog runs every registered scanner's Due query, with the pipeline's
// filter and the scanner's params as its ticks carry them, and sums it up
// per scanner, in registration order.
func (p *Pipeline) Backlog(ctx context.Context, q Querier) ([]Backlog, error) {
	now := p.env.NowMs()
	var out []Backlog
	for _, s := range p.reg.Scanners() {
		params, err := scannerParams(s)
		if err != nil {
			return nil, err
		}
		due, err := s.Due(ctx, q, DueRequest{Env: p.env, NowMs: now, Filter: p.filter, Params: params})
		if err != nil {
			return nil, fmt.Errorf("scanner %s: due: %w", s.Name(), err)
		}
		b := Backlog{Scanner: s.Name()}
		for _, d := range due {
			if d.Count == 0 {
				continue
			}
			b.Due += d.Count
			b.Partitions++
			if d.OldestMs > 0 && (b.OldestMs == 0 || d.OldestMs < b.OldestMs) {
				b.OldestMs = d.OldestMs
			}
		}
		out = append(out, b)
	}
	return out, nil
}
