package demo

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/internal/pipeline"
	"github.com/ffriver/ffriver/jobs"
	"github.com/ffriver/ffriver/scanners"
	"github.com/ffriver/ffriver/subscribe"
	"github.com/jackc/pgx/v5"
)

// LeaseTypes are the lease event types, in the order they are shown.
func LeaseTypes() []string {
	return []string{ff.LeaseAcquired, ff.LeaseRenewed, ff.LeaseExpired, ff.LeaseReclaimed, ff.LeaseRevoked}
}

// Outcomes are the completion outcomes, in the order they are shown.
func Outcomes() []string {
	return []string{ff.OutcomeSuccess, ff.OutcomeFailed, ff.OutcomeExpired, ff.OutcomeCancelled, ff.OutcomeSkipped}
}

// CascadeName is the row of the flow cascade (ff.advance jobs) among the
// scanners' rows: it is not a scanner, terminal transitions of flow members
// enqueue it.
const CascadeName = "flow cascade"

// Snapshot is the demo's state at one moment: the stream counts, the
// scanners' backlog and actions, the executions by state.
type Snapshot struct {
	// Leases counts lease events by type, Completions completion events by
	// outcome, as delivered by the streams so far.
	Leases      map[string]int64
	Completions map[string]int64
	// Scanners, in registration order, then the flow cascade.
	Scanners []ScannerStats
	// States counts executions by public state.
	States map[string]int64
	// Workload is what the simulated workers did.
	Workload WorkloadStats
	// Waiting are the open transactions that wrote to an outbox and whose
	// events the streams wait for (subscribe.Options.OnWait).
	Waiting []subscribe.Wait
}

// ScannerStats is one scanner's backlog and what its River jobs did.
type ScannerStats struct {
	Name string
	// ItemKind is the River kind of the scanner's per-item job.
	ItemKind string
	// Backlog is how many items are due now (the scanner's own due query,
	// each partition counted up to the batch): with BacklogAtLeast set, at
	// least that many.
	Backlog        int64
	BacklogAtLeast bool
	// Ticks and Scans: completed River jobs of the scanner.
	Ticks, Scans int64
	// Actions counts the item jobs by what they did: the outcome of their
	// River job output (processed, no_op, …) for completed jobs, else the
	// job state when the job errored (retryable, discarded, cancelled).
	Actions map[string]int64
}

// Processed is how many of the scanner's items applied their transition.
func (s ScannerStats) Processed() int64 { return s.Actions[string(processedOutcome)] }

const processedOutcome = "processed"

// Missing returns the guaranteed event types with no event yet, as "lease
// reclaimed" or "completion skipped".
func (s *Snapshot) Missing() []string {
	var out []string
	for _, t := range LeaseTypes() {
		if s.Leases[t] == 0 {
			out = append(out, "lease "+t)
		}
	}
	for _, o := range Outcomes() {
		if s.Completions[o] == 0 {
			out = append(out, "completion "+o)
		}
	}
	return out
}

// itemKinds maps the built-in scanners' item job kinds to their scanners.
func itemKinds() map[string]string {
	return map[string]string{
		jobs.KindExpireAttempt:    scanners.AttemptTimeout,
		jobs.KindPromoteDelayed:   scanners.DelayedPromoter,
		jobs.KindExpireDeadline:   scanners.ExecutionDeadline,
		jobs.KindCancelGroup:      scanners.EdgeCancelDispatcher,
		jobs.KindReconcileGroup:   scanners.EdgeCancelReconciler,
		jobs.KindTrimOutbox:       scanners.OutboxRetention,
		jobs.KindRemoveExecutions: scanners.ExecutionRetention,
		jobs.KindAdvance:          CascadeName,
	}
}

// watcher counts the streams' events and reads the rest of a Snapshot.
type watcher struct {
	d           *demo
	c           *cluster
	leases      *subscribe.Stream[subscribe.LeaseEvent]
	completions *subscribe.Stream[subscribe.CompletionEvent]
	cancel      context.CancelFunc
	wg          sync.WaitGroup
	// failed receives a stream's terminal error.
	failed chan error

	mu          sync.Mutex
	leaseN      map[string]int64
	completionN map[string]int64
	waiting     map[waitKey]subscribe.Wait
}

// waitKey identifies an open writer in the watcher's waiting set.
type waitKey struct {
	stream string
	pid    int
	xact   int64
}

// onWait records what the streams say they wait for.
func (w *watcher) onWait(wt subscribe.Wait) {
	w.mu.Lock()
	defer w.mu.Unlock()
	k := waitKey{wt.Stream, wt.PID, wt.Xact}
	if wt.Done {
		delete(w.waiting, k)
	} else {
		w.waiting[k] = wt
	}
}

// newWatcher subscribes to both streams from the beginning of the outbox
// and starts counting.
func newWatcher(ctx context.Context, d *demo, c *cluster) (*watcher, error) {
	// The streams outlive ctx: after Ctrl-C they still catch up for the
	// summary.
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w := &watcher{d: d, c: c, cancel: cancel, failed: make(chan error, 2),
		leaseN: map[string]int64{}, completionN: map[string]int64{}, waiting: map[waitKey]subscribe.Wait{}}
	opts := subscribe.Options{Schema: string(d.schema), Start: subscribe.StartBeginning, Logger: d.opts.RiverLogger,
		ApplicationName: "ffctl demo stream", OnWait: w.onWait, MeterProvider: d.opts.MeterProvider}
	var err error
	if w.leases, err = subscribe.Leases(sctx, d.admin, opts); err != nil {
		cancel()
		return nil, fmt.Errorf("subscribing to lease events: %w", err)
	}
	if w.completions, err = subscribe.Completions(sctx, d.admin, opts); err != nil {
		w.leases.Close()
		cancel()
		return nil, fmt.Errorf("subscribing to completions: %w", err)
	}
	w.wg.Go(func() {
		consume(sctx, w, w.leases, func(ev subscribe.LeaseEvent) {
			w.mu.Lock()
			w.leaseN[ev.Type]++
			w.mu.Unlock()
		})
	})
	w.wg.Go(func() {
		consume(sctx, w, w.completions, func(ev subscribe.CompletionEvent) {
			w.mu.Lock()
			w.completionN[ev.Outcome]++
			w.mu.Unlock()
		})
	})
	return w, nil
}

// consume counts s's events until it ends; a terminal error goes to
// w.failed.
func consume[E any](ctx context.Context, w *watcher, s *subscribe.Stream[E], count func(E)) {
	for ev, err := range s.All(ctx) {
		var disc *subscribe.DisconnectedError
		if errors.As(err, &disc) {
			continue // it reconnects by itself and loses nothing
		}
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, subscribe.ErrClosed) {
				w.failed <- fmt.Errorf("stream: %w", err)
			}
			return
		}
		count(ev)
	}
}

// close stops the streams.
func (w *watcher) close() {
	w.cancel()
	w.leases.Close()
	w.completions.Close()
	w.wg.Wait()
}

// counts copies the stream counts.
func (w *watcher) counts() (leases, completions map[string]int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	leases, completions = map[string]int64{}, map[string]int64{}
	for k, v := range w.leaseN {
		leases[k] = v
	}
	for k, v := range w.completionN {
		completions[k] = v
	}
	return leases, completions
}

// drain waits until the streams have delivered as many events as the
// outbox tables hold (call it once nothing writes any more).
func (w *watcher) drain(ctx context.Context) error {
	var wantL, wantC int64
	err := w.d.admin.QueryRow(ctx, w.d.schema.SQL(`SELECT (SELECT count(*) FROM {S}ff_lease_event), (SELECT count(*) FROM {S}ff_completion_event)`)).
		Scan(&wantL, &wantC)
	if err != nil {
		return dbutil.MapErr(err, "counting the outbox")
	}
	for {
		l, c := w.counts()
		gotL, gotC := sum(l), sum(c)
		if gotL >= wantL && gotC >= wantC {
			return nil
		}
		if !sleep(ctx, 50*time.Millisecond) {
			return fmt.Errorf("delivered %d of %d lease events and %d of %d completions: %w", gotL, wantL, gotC, wantC, ctx.Err())
		}
	}
}

func sum(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// snapshot reads the stream counts, the scanners' backlog (each scanner's
// own due query, as its tick runs it), River's jobs and the executions'
// states.
func (w *watcher) snapshot(ctx context.Context) (*Snapshot, error) {
	snap := &Snapshot{States: map[string]int64{}}
	snap.Leases, snap.Completions = w.counts()
	w.mu.Lock()
	for _, wt := range w.waiting {
		snap.Waiting = append(snap.Waiting, wt)
	}
	w.mu.Unlock()
	slices.SortFunc(snap.Waiting, func(a, b subscribe.Wait) int { return cmp.Compare(b.Age, a.Age) })

	p := pipeline.Of(w.c.scheduler.ff)
	byName := map[string]*ScannerStats{}
	kinds := itemKinds()
	backlog, err := p.Backlog(ctx, w.d.admin)
	if err != nil {
		return nil, err
	}
	for _, b := range backlog {
		st := ScannerStats{Name: b.Scanner, Actions: map[string]int64{}, Backlog: b.Due, BacklogAtLeast: b.AtLeast}
		for kind, name := range kinds {
			if name == b.Scanner {
				st.ItemKind = kind
			}
		}
		if b.Scanner == scanners.Dependency {
			// It re-enqueues lost flow hops; their jobs count under the cascade.
			st.ItemKind = jobs.KindAdvance
		}
		snap.Scanners = append(snap.Scanners, st)
	}
	snap.Scanners = append(snap.Scanners, ScannerStats{Name: CascadeName, ItemKind: jobs.KindAdvance, Actions: map[string]int64{}})
	for i := range snap.Scanners {
		byName[snap.Scanners[i].Name] = &snap.Scanners[i]
	}

	rows, err := w.d.admin.Query(ctx, w.d.schema.SQL(`SELECT kind, coalesce(args->>'scanner', ''), state::text,
		coalesce(metadata->'output'->>'outcome', ''), count(*) FROM {S}river_job GROUP BY 1, 2, 3, 4`))
	if err != nil {
		return nil, dbutil.MapErr(err, "reading River's jobs")
	}
	var kind, scanner, state, outcome string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&kind, &scanner, &state, &outcome, &n}, func() error {
		switch kind {
		case jobs.KindTick, jobs.KindScan:
			st := byName[scanner]
			if st == nil || state != "completed" {
				return nil
			}
			if kind == jobs.KindTick {
				st.Ticks += n
			} else {
				st.Scans += n
			}
			return nil
		}
		st := byName[kinds[kind]]
		if st == nil {
			return nil
		}
		switch state {
		case "completed":
			if outcome == "" {
				outcome = "completed"
			}
			st.Actions[outcome] += n
		case "retryable", "discarded", "cancelled":
			st.Actions[state] += n
		}
		return nil
	})
	if err != nil {
		return nil, dbutil.MapErr(err, "reading River's jobs")
	}

	rows, err = w.d.admin.Query(ctx, w.d.schema.SQL(`SELECT public_state, count(*) FROM {S}ff_exec_core GROUP BY 1`))
	if err != nil {
		return nil, dbutil.MapErr(err, "reading the executions")
	}
	_, err = pgx.ForEachRow(rows, []any{&state, &n}, func() error {
		snap.States[state] = n
		return nil
	})
	if err != nil {
		return nil, dbutil.MapErr(err, "reading the executions")
	}
	return snap, nil
}
