package pipeline_test

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ffriver/ffriver"
	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/pipeline"
	"github.com/ffriver/ffriver/scanners"
	"github.com/ffriver/ffriver/workers"
	"github.com/google/uuid"
)

// poison writes, by hand, rows that look due to the built-in scanners but
// that none can process, next to ones they can: an expired lease of an
// attempt of no execution, of an execution in a state outside the
// alphabet, and left on an ended attempt; delays come due on an execution
// blocked by its dependencies and on one in an unknown eligibility_state;
// an execution not eligible until a time it records nowhere;
// a cleared cancel group still pending; rows in partition 300, outside the
// schema's 256.
func (h *harness) poison() {
	h.t.Helper()
	now := h.clock.NowMs()
	// Due, processable: an expired lease, a delay and a deadline come due.
	h.Create(executions.CreateParams{Lane: "ok"})
	h.ClaimOne("ok", time.Second)
	h.Create(executions.CreateParams{Lane: "delayed", DelayUntil: time.UnixMilli(now + 500)})
	h.Create(executions.CreateParams{Lane: "deadline", Deadline: time.UnixMilli(now + 500)})

	// An attempt with no execution.
	h.Exec(`INSERT INTO ff_attempt (partition_key, execution_id, attempt_index, lease_expires_at_ms) VALUES (7, $1, 0, $2)`, uuid.New(), now)
	// An execution in a foreign lifecycle_phase, with an expired lease.
	odd := h.Create(executions.CreateParams{Lane: "odd"})
	h.ClaimOne("odd", time.Second)
	h.Exec(`UPDATE ff_exec_core SET lifecycle_phase = 'Active' WHERE execution_id = $1`, odd.UUID)
	// A lease left on an attempt its execution has moved past.
	stale := h.Create(executions.CreateParams{Lane: "stale"})
	h.ClaimOne("stale", time.Second)
	h.Exec(`UPDATE ff_exec_core SET attempt_index = 3 WHERE execution_id = $1`, stale.UUID)
	// A delay come due on an execution in an unknown eligibility_state.
	elig := h.Create(executions.CreateParams{Lane: "elig", DelayUntil: time.UnixMilli(now + 500)})
	h.Exec(`UPDATE ff_exec_core SET eligibility_state = 'later' WHERE execution_id = $1`, elig.UUID)
	// Not eligible until a time it records nowhere: neither in
	// delay_until_ms nor where upstream writes one.
	nodue := h.Create(executions.CreateParams{Lane: "nodue"})
	h.Exec(`UPDATE ff_exec_core SET eligibility_state = 'not_eligible_until_time', public_state = 'delayed' WHERE execution_id = $1`, nodue.UUID)
	// A delay come due on an execution waiting for its flow: not due, and
	// not unprocessable either (its flow releases it).
	flow := h.Flow()
	up := h.Create(executions.CreateParams{FlowID: flow, Lane: "up"})
	down := h.Create(executions.CreateParams{FlowID: flow, Lane: "down", DelayUntil: time.UnixMilli(now + 500)})
	h.depend(flow, down, []ff.ExecutionID{up}, executions.AllOf())
	// A pending cancel group whose flag is cleared: the reconciler's, not
	// the dispatcher's.
	h.Exec(`INSERT INTO ff_pending_cancel_groups (partition_key, flow_id, downstream_eid, enqueued_at_ms) VALUES ($1, $2, $3, $4)`,
		down.Partition, flow, down.UUID, now)
	// Rows in a partition outside the schema's count.
	h.Exec(`INSERT INTO ff_exec_core (partition_key, execution_id, lane_id, lifecycle_phase, ownership_state, eligibility_state,
		public_state, attempt_state, delay_until_ms, deadline_at_ms)
		VALUES (300, $1, 'far', 'runnable', 'unowned', 'not_eligible_until_time', 'delayed', 'pending_first_attempt', $2, $2)`, uuid.New(), now)
	h.Exec(`INSERT INTO ff_attempt (partition_key, execution_id, attempt_index, lease_expires_at_ms) VALUES (300, $1, 0, $2)`, uuid.New(), now)
	h.Exec(`INSERT INTO ff_pending_cancel_groups (partition_key, flow_id, downstream_eid, enqueued_at_ms) VALUES (300, $1, $2, $3)`, uuid.New(), uuid.New(), now)
	h.clock.Advance(2 * time.Second)
}

// Every built-in scanner's Due counts exactly what its Scan returns over the
// schema's partitions; what neither returns because no scan can process it
// is counted apart, by reason, with a query that lists it.
func TestDueAndScanAgreeUnprocessableApart(t *testing.T) {
	t.Parallel()
	h := newHarness(t, ffriver.Config{Scanners: disabled()})
	h.poison()
	p := pipeline.Of(h.ff)
	for _, s := range p.Scanners() {
		params, err := pipeline.ParamsOf(s)
		if err != nil {
			t.Fatal(err)
		}
		req := workers.DueRequest{Store: h.st, NowMs: h.clock.NowMs(), Params: params}
		due, err := s.Due(h.ctx, h.db.Pool, req)
		if err != nil {
			t.Fatalf("%s: Due: %v", s.Name(), err)
		}
		dueIn := map[int16]int64{}
		for _, d := range due {
			// A partition due with no item counted (outbox_retention's
			// partitions to create ahead) is scanned for items that are
			// no candidates: both maps leave it out.
			if h.st.Partitions().Contains(d.Partition) && d.Count > 0 {
				dueIn[d.Partition] += d.Count
			}
		}
		scanned := map[int16]int64{}
		for part := range int16(h.st.Partitions()) {
			res, err := s.Scan(h.ctx, h.db.Pool, workers.ScanRequest{Store: h.st, Partition: part, NowMs: req.NowMs, Limit: 100_000, Params: params})
			if err != nil {
				t.Fatalf("%s: Scan(%d): %v", s.Name(), part, err)
			}
			if res.Candidates > 0 {
				scanned[part] = int64(res.Candidates)
			}
		}
		if !mapsEqual(dueIn, scanned) {
			t.Errorf("%s: Due counts %v per partition, Scan returns %v", s.Name(), dueIn, scanned)
		}
	}

	backlog, err := p.Backlog(h.ctx, h.db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	due := map[string]int64{}
	for _, b := range backlog {
		due[b.Scanner] = b.Due
		for _, u := range b.Unprocessable {
			got[b.Scanner] = append(got[b.Scanner], u.Reason)
			// The listing query lists exactly the rows counted.
			if n := h.Count(`SELECT count(*) FROM (` + u.List + `) x`); int64(n) != u.Count {
				t.Errorf("%s: %q counts %d, its query lists %d: %s", b.Scanner, u.Reason, u.Count, n, u.List)
			}
			if u.Count != 1 {
				t.Errorf("%s: %q counts %d, want 1", b.Scanner, u.Reason, u.Count)
			}
		}
	}
	want := map[string][]string{
		scanners.AttemptTimeout: {"partition outside 0..255", "attempt of no execution", "execution in an unknown lifecycle_phase",
			"lease left on an attempt that is not running"},
		scanners.DelayedPromoter: {"partition outside 0..255", "not eligible until a time it does not record",
			"runnable with an unknown eligibility_state"},
		scanners.ExecutionDeadline:    {"partition outside 0..255"},
		scanners.EdgeCancelDispatcher: {"partition outside 0..255"},
		scanners.EdgeCancelReconciler: {"partition outside 0..255"},
	}
	for name, reasons := range want {
		if !slices.Equal(got[name], reasons) {
			t.Errorf("%s: unprocessable %q, want %q", name, got[name], reasons)
		}
	}
	wantDue := map[string]int64{scanners.AttemptTimeout: 1, scanners.DelayedPromoter: 1, scanners.ExecutionDeadline: 1,
		scanners.EdgeCancelDispatcher: 0, scanners.EdgeCancelReconciler: 1}
	for name, n := range wantDue {
		if due[name] != n {
			t.Errorf("%s: due %d, want %d", name, due[name], n)
		}
	}
}

func mapsEqual(a, b map[int16]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// warnings is a slog handler keeping the warnings it gets.
type warnings struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (w *warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.recs = append(w.recs, r.Clone())
	return nil
}
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnings) WithGroup(string) slog.Handler      { return w }

// of returns the messages of the warnings naming scanner.
func (w *warnings) of(scanner string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, r := range w.recs {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "scanner" && a.Value.String() == scanner {
				out = append(out, r.Message)
			}
			return true
		})
	}
	return out
}

// Poison rows are reported once per interval, not on every tick: a tick
// every 50 ms for a second logs them once; with NoUnprocessableReport,
// never (a negative interval fell back to the default before).
func TestUnprocessableRowsReportedOncePerInterval(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		every time.Duration
		want  int
	}{{"hourly", time.Hour, 1}, {"never", pipeline.NoUnprocessableReport, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			logs := &warnings{}
			over := disabled()
			over[scanners.AttemptTimeout] = fast(1000)
			h := newHarness(t, ffriver.Config{Scanners: over, Logger: slog.New(logs)})
			pipeline.Of(h.ff).Env().UnprocessableReportInterval = tc.every
			h.Exec(`INSERT INTO ff_attempt (partition_key, execution_id, attempt_index, lease_expires_at_ms) VALUES (300, $1, 0, 1)`, uuid.New())
			h.Exec(`INSERT INTO ff_attempt (partition_key, execution_id, attempt_index, lease_expires_at_ms) VALUES (7, $1, 0, 1)`, uuid.New())
			h.client(true, nil)
			h.Await("20 attempt_timeout ticks", func() bool {
				return h.Count(`SELECT count(*) FROM river_job WHERE kind = 'ff.tick' AND state = 'completed'`) >= 20
			})
			got := logs.of(scanners.AttemptTimeout)
			if len(got) != tc.want {
				t.Fatalf("%d warnings about attempt_timeout over 20 ticks, want %d: %q", len(got), tc.want, got)
			}
			// Nothing was scanned for them: no scan, no item.
			if n := h.Count(`SELECT count(*) FROM river_job WHERE kind = 'ff.scan' OR queue = $1`, pipeline.Of(h.ff).ApplyQueue()); n != 0 {
				t.Fatalf("%d scan or item jobs for rows no scan can process", n)
			}
			for _, o := range h.outputs("ff.tick") {
				if o["due_items"] != 0.0 {
					t.Fatalf("tick output %v: want no due items", o)
				}
			}
		})
	}
}

// A filtered deployment's auditors count only the rows of its own
// executions, as its scanners scan only those (issue 23, item 8: they
// counted every tenant's rows, and rows of no execution, whatever the
// filter). The list queries list exactly what is counted, with the
// filter's values (quotes and backslashes included) written in.
func TestUnprocessableHonoursTheFilter(t *testing.T) {
	t.Parallel()
	h := newHarness(t, ffriver.Config{Scanners: disabled()})
	const ns = `it's\a`
	now := h.clock.NowMs()
	// The tenant's own unprocessable rows: an execution in a foreign
	// lifecycle_phase with an expired lease, and one in a partition
	// outside the schema's count whose delay and deadline came due.
	odd := h.Create(executions.CreateParams{Lane: "tenant-odd", Namespace: ns})
	h.ClaimOne("tenant-odd", time.Second)
	h.Exec(`UPDATE ff_exec_core SET lifecycle_phase = 'Active' WHERE execution_id = $1`, odd.UUID)
	h.Exec(`INSERT INTO ff_exec_core (partition_key, execution_id, lane_id, raw_fields, lifecycle_phase, ownership_state,
		eligibility_state, public_state, attempt_state, delay_until_ms, deadline_at_ms)
		VALUES (301, $1, 'far', jsonb_build_object('namespace', $3::text), 'runnable', 'unowned', 'not_eligible_until_time', 'delayed',
		'pending_first_attempt', $2, $2)`, uuid.New(), now, ns)
	h.poison() // every other tenant's, and rows of no execution at all

	want := map[string][]string{
		scanners.AttemptTimeout:    {"execution in an unknown lifecycle_phase"},
		scanners.DelayedPromoter:   {"partition outside 0..255"},
		scanners.ExecutionDeadline: {"partition outside 0..255"},
	}
	for _, s := range pipeline.Of(h.ff).Scanners() {
		a, ok := s.(workers.Auditor)
		if !ok {
			continue
		}
		params, err := pipeline.ParamsOf(s)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range []ff.Filter{{Namespace: ns}, {Namespace: "nobody"}, {InstanceTag: &ff.Tag{Key: "k'\\", Value: "v"}}} {
			req := workers.DueRequest{Store: h.st, NowMs: h.clock.NowMs(), Params: params, Filter: f}
			sets, err := a.Unprocessable(h.ctx, h.db.Pool, req)
			if err != nil {
				t.Fatalf("%s, filter %+v: %v", s.Name(), f, err)
			}
			var got []string
			for _, u := range sets {
				got = append(got, u.Reason)
				if n := h.Count(`SELECT count(*) FROM (` + u.List + `) x`); int64(n) != u.Count || u.Count != 1 {
					t.Errorf("%s, filter %+v: %q counts %d, its query lists %d (want 1): %s", s.Name(), f, u.Reason, u.Count, n, u.List)
				}
			}
			var wantHere []string
			if f.Namespace == ns {
				wantHere = want[s.Name()]
			}
			if !slices.Equal(got, wantHere) {
				t.Errorf("%s, filter %+v: unprocessable %q, want %q", s.Name(), f, got, wantHere)
			}
		}
	}
}
