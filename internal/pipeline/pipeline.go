package pipeline

import (
	"context"
	"fmt"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/apply"
	"github.com/ffriver/ffriver/internal/jobopts"
	"github.com/ffriver/ffriver/internal/settings"
	"github.com/ffriver/ffriver/jobs"
	"github.com/ffriver/ffriver/workers"
	"github.com/riverqueue/river"
)

// Pipeline is a set of plugins bound to an Env, a filter and settings: it
// supplies the River workers, periodic jobs and queues of the whole
// tick → scan → item pipeline.
type Pipeline struct {
	reg      *registry
	items    []workers.Item
	env      *Env
	filter   ff.Filter
	settings map[string]workers.Settings
	// unprocessable rate-limits the ticks' reports of unprocessable rows.
	unprocessable unprocessableLog
	// holding rate-limits the warnings about consumers that hold outbox
	// retention back.
	holding holdingLog
	// scannerOf maps each item kind to its scanner's name (flowScanner for
	// ff.advance), the label of its metrics and spans.
	scannerOf map[string]string
}

// New registers the plugins' scanners (valid, unique names) and item kinds, resolves each scanner's settings (its
// defaults, overridden by the non-zero fields of overrides[name]) and checks
// them. An override for a scanner that is not registered is an error, so a
// typo is not silently ignored.
func New(env *Env, plugins []workers.Plugin, filter ff.Filter, overrides map[string]workers.Settings) (*Pipeline, error) {
	if err := filter.Validate(); err != nil {
		return nil, err
	}
	reg := newRegistry()
	items := []workers.Item{flowItem()}
	scannerOf := map[string]string{items[0].Kind(): flowScanner}
	for _, pl := range plugins {
		for _, it := range pl.Items {
			if pl.Scanner != nil {
				scannerOf[it.Kind()] = pl.Scanner.Name()
			} else if _, ok := scannerOf[it.Kind()]; !ok {
				scannerOf[it.Kind()] = it.Kind()
			}
		}
		if pl.Scanner != nil {
			if err := reg.Register(pl.Scanner); err != nil {
				return nil, err
			}
		}
		items = append(items, pl.Items...)
	}
	for name := range overrides {
		if _, ok := reg.Lookup(name); !ok {
			return nil, ff.Validationf("scanner", "settings for %q, which is not registered (registered: %v)", name, reg.Names())
		}
	}
	p := &Pipeline{reg: reg, items: items, env: env, filter: filter, settings: map[string]workers.Settings{}, scannerOf: scannerOf}
	for _, s := range reg.Scanners() {
		st := s.Defaults()
		if o, ok := overrides[s.Name()]; ok {
			if o.Interval != 0 {
				st.Interval = o.Interval
			}
			if o.Batch != 0 {
				st.Batch = o.Batch
			}
			switch o.Sweep {
			case 0: // the default
			case workers.NoSweep:
				st.Sweep = 0
			default:
				st.Sweep = o.Sweep
			}
			st.Disabled = st.Disabled || o.Disabled
		}
		if st.Interval < settings.MinInterval {
			return nil, ff.Validationf("scanner", "%s: interval %s is below %s", s.Name(), st.Interval, settings.MinInterval)
		}
		if st.Sweep < 0 {
			return nil, ff.Validationf("scanner", "%s: sweep %s is negative (workers.NoSweep turns the scan cursors off)", s.Name(), st.Sweep)
		}
		if st.Batch < settings.MinBatch || st.Batch > settings.MaxBatch {
			return nil, ff.Validationf("scanner", "%s: batch %d is outside %d..%d", s.Name(), st.Batch, settings.MinBatch, settings.MaxBatch)
		}
		p.settings[s.Name()] = st
	}
	return p, nil
}

// Scanners returns the pipeline's scanners, in registration order.
func (p *Pipeline) Scanners() []workers.Scanner { return p.reg.Scanners() }

// ScannerNames returns the names of the pipeline's scanners, in
// registration order.
func (p *Pipeline) ScannerNames() []string { return p.reg.Names() }

// Env returns the pipeline's Env.
func (p *Pipeline) Env() *Env { return p.env }

// Filter returns the pipeline's scanner filter.
func (p *Pipeline) Filter() ff.Filter { return p.filter }

// Settings returns the resolved settings of the scanner called name.
func (p *Pipeline) Settings(name string) (workers.Settings, bool) {
	s, ok := p.settings[name]
	return s, ok
}

// ScanQueue is the queue of this pipeline's ticks and scans.
func (p *Pipeline) ScanQueue() string { return jobs.ScanQueue(p.filter) }

// ApplyQueue is the queue of this pipeline's item jobs.
func (p *Pipeline) ApplyQueue() string { return jobs.ApplyQueue(p.filter) }

// AddWorkers registers the tick and scan workers, the flow advance worker
// (ff.advance) and every plugin's item workers with River's
// AddWorkerSafely: a kind registered twice is an error, not a panic.
func (p *Pipeline) AddWorkers(workers *river.Workers) error {
	if err := river.AddWorkerSafely(workers, &tickWorker{p: p}); err != nil {
		return fmt.Errorf("ffriver: adding the tick worker: %w", err)
	}
	if err := river.AddWorkerSafely(workers, &scanWorker{p: p}); err != nil {
		return fmt.Errorf("ffriver: adding the scan worker: %w", err)
	}
	if err := river.AddWorkerSafely(workers, &rescueWorker{p: p}); err != nil {
		return fmt.Errorf("ffriver: adding the rescue worker: %w", err)
	}
	for _, it := range p.items {
		if err := apply.AddWorker(it, workers, p.env.Env, p.env.Config); err != nil {
			return err
		}
	}
	return nil
}

// TickInsertOpts are the insert options of this pipeline's ticks.
func (p *Pipeline) TickInsertOpts() *river.InsertOpts {
	return &river.InsertOpts{Queue: p.ScanQueue(), MaxAttempts: jobopts.TickMaxAttempts, UniqueOpts: jobopts.UniqueTick()}
}

// TickArgs returns the tick of the scanner called name, as the periodic job
// inserts it (with TickInsertOpts).
func (p *Pipeline) TickArgs(name string) (river.JobArgs, error) {
	s, ok := p.reg.Lookup(name)
	if !ok {
		return nil, ff.Validationf("scanner", "%q is not registered", name)
	}
	params, err := ParamsOf(s)
	if err != nil {
		return nil, err
	}
	st := p.settings[name]
	return jobs.TickArgs{Scanner: name, Batch: st.Batch, Params: params, Filter: jobs.FilterOf(p.filter), SweepMs: st.Sweep.Milliseconds(),
		Schema: p.env.Schema()}, nil
}

// PeriodicJobs returns one River periodic job per enabled scanner: a tick
// every Interval, run on start, unique while in flight within its second
// (a tick still queued or running swallows the next ones of the same
// second, and a tick stuck in a dead process blocks no more).
// Only the elected leader inserts periodic jobs. The last is ff.rescue
// (rescue.go), which re-queues jobs left running by a dead process.
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
		opts := withTags(p.TickInsertOpts(), TickTags(s.Name(), p.filter))
		out = append(out, river.NewPeriodicJob(river.PeriodicInterval(st.Interval),
			func() (river.JobArgs, *river.InsertOpts) { return args, opts },
			&river.PeriodicJobOpts{ID: "ff.tick:" + p.ScanQueue() + ":" + s.Name(), RunOnStart: true}))
	}
	out = append(out, p.rescueJob())
	return out, nil
}

// Queues returns the pipeline's two queues with the given worker counts and
// jobopts.QueueFetchCooldown. A count of 0 leaves that queue out (a process that
// does not work it).
func (p *Pipeline) Queues(scanWorkers, applyWorkers int) map[string]river.QueueConfig {
	q := map[string]river.QueueConfig{}
	if scanWorkers > 0 {
		q[p.ScanQueue()] = river.QueueConfig{MaxWorkers: scanWorkers, FetchCooldown: jobopts.QueueFetchCooldown}
	}
	if applyWorkers > 0 {
		q[p.ApplyQueue()] = river.QueueConfig{MaxWorkers: applyWorkers, FetchCooldown: jobopts.QueueFetchCooldown}
	}
	return q
}

// itemInsertOpts are the insert options of an item job of a pipeline with
// filter f: its apply queue, unique while in flight, a few attempts.
func itemInsertOpts(f ff.Filter) *river.InsertOpts {
	return &river.InsertOpts{Queue: jobs.ApplyQueue(f), MaxAttempts: jobopts.ItemMaxAttempts, UniqueOpts: jobopts.UniqueInFlight()}
}

// scanInsertOpts are the insert options of a scan job of a pipeline with
// filter f.
func scanInsertOpts(f ff.Filter) *river.InsertOpts {
	return &river.InsertOpts{Queue: jobs.ScanQueue(f), MaxAttempts: jobopts.ScanMaxAttempts, UniqueOpts: jobopts.UniqueInFlight()}
}

// scanInsert is the insert of scan a of a pipeline with filter f: its
// options (scanInsertOpts), tagged with its scanner and partitions.
func scanInsert(a jobs.ScanArgs, f ff.Filter) river.InsertManyParams {
	parts := append([]int16{a.Partition}, a.Partitions...)
	return river.InsertManyParams{Args: a, InsertOpts: withTags(scanInsertOpts(f), scanTags(a.Scanner, f, parts))}
}

// Backlog is one scanner's due work now.
type Backlog struct {
	Scanner string
	// Due items, over Partitions partitions, each partition's counted up
	// to the scanner's batch (DueRequest.Cap, as its ticks count
	// them): with AtLeast set, at least Due (a partition had more).
	Due        int64
	AtLeast    bool
	Partitions int
	// OldestMs is when the oldest due item became due (0: nothing due, or
	// the scanner cannot tell).
	OldestMs int64
	// Unprocessable are the rows that look due but that no scan can
	// process (Pipeline.Unprocessable), never counted in Due.
	Unprocessable []workers.Unprocessable
	// AtMs is the pipeline clock's time the backlog was read at.
	AtMs int64
}

// OldestOverdue is how long the oldest due item had been due when the
// backlog was read: 0 when nothing is due or the scanner cannot tell.
func (b Backlog) OldestOverdue() time.Duration {
	if b.OldestMs <= 0 || b.OldestMs >= b.AtMs {
		return 0
	}
	return time.Duration(b.AtMs-b.OldestMs) * time.Millisecond
}

// BacklogCap is the most due items of a partition Backlog counts (or the
// scanner's batch, when smaller): an operator's read (ffctl status, the
// live page) stays cheap on a store of any size, and says "at least" past
// it; which partitions have work and the oldest overdue age stay exact.
// On a store of 2,000,000 executions, execution_retention's due count up
// to its batch (1,001 candidates in each of 256 partitions) took 45 ms of
// status's 200; at 10,000,000 executions, up to 100 in each took 29.5 ms
// of its 69 ms of execution (ffctl bench scale, the 2-core VM).
const BacklogCap = 10

// Backlog runs every registered scanner's Due query, with the pipeline's
// filter, the scanner's params (a stored setting's, StoredParamsProvider,
// where one is stored) and its batch (at most BacklogCap) as the
// cap, and sums it up per scanner, in registration order: the due items of
// the partitions its ticks scan (at least, where a partition has more than
// the cap due), and apart from them the rows no scan can process.
func (p *Pipeline) Backlog(ctx context.Context, q workers.Querier) ([]Backlog, error) {
	now := p.env.NowMs()
	var out []Backlog
	for _, s := range p.reg.Scanners() {
		params, err := ParamsOf(s)
		if err != nil {
			return nil, err
		}
		// As the ticks do: a stored setting wins over the pipeline's.
		if params, err = p.storedParams(ctx, q, s, params); err != nil {
			return nil, err
		}
		st, _ := p.Settings(s.Name())
		req := workers.DueRequest{Store: p.env.Store, NowMs: now, Filter: p.filter, Params: params, Cap: min(st.Batch, BacklogCap)}
		due, err := s.Due(ctx, q, req)
		if err != nil {
			return nil, fmt.Errorf("scanner %s: due: %w", s.Name(), err)
		}
		b := Backlog{Scanner: s.Name(), AtMs: now}
		if b.Unprocessable, err = p.Unprocessable(ctx, q, s, req, due); err != nil {
			return nil, err
		}
		for _, d := range due {
			if (d.Count == 0 && !d.Capped) || !p.env.Partitions().Contains(d.Partition) {
				continue
			}
			b.Due += d.Count
			b.AtLeast = b.AtLeast || d.Capped
			b.Partitions++
			if d.OldestMs > 0 && (b.OldestMs == 0 || d.OldestMs < b.OldestMs) {
				b.OldestMs = d.OldestMs
			}
		}
		out = append(out, b)
	}
	return out, nil
}

// ofService is package ffriver's func(*ffriver.Service) *Pipeline (this
// package cannot import ffriver, which imports it). It is written once,
// by package ffriver's init, before anything runs, and only read after.
var ofService any

// SetOfService is called by package ffriver's init with the function that
// returns a Service's pipeline.
func SetOfService[S any](f func(S) *Pipeline) { ofService = f }

// Of returns the pipeline of s, an *ffriver.Service: what the binaries
// (ffctl status, the live page, the demo) and the tests read of it that is
// no part of the Service's API.
func Of[S any](s S) *Pipeline { return ofService.(func(S) *Pipeline)(s) }
