package pipeline_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ffriver/ffriver"
	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/actions"
	"github.com/ffriver/ffriver/internal/outboxretention"
	"github.com/ffriver/ffriver/internal/pipeline"
	"github.com/ffriver/ffriver/jobs"
	"github.com/ffriver/ffriver/scanners"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

// insertOnly returns a River client that inserts and administers jobs but
// works none (never started): the jobs it inserts wait until a pipeline runs.
func (h *harness) insertOnly() *river.Client[pgx.Tx] {
	h.t.Helper()
	c, err := river.NewClient(riverpgxv5.New(h.db.Pool), &river.Config{})
	if err != nil {
		h.t.Fatal(err)
	}
	return c
}

// lose makes job id lost the way an operator or River can: "discard"
// (River's state after its last failed attempt), "cancel" (River UI's
// cancel, through the client) or "delete" (River UI's delete, a plain
// DELETE of the row).
func (h *harness) lose(c *river.Client[pgx.Tx], mode string, id int64) {
	h.t.Helper()
	switch mode {
	case "discard":
		h.Exec(`UPDATE river_job SET state = 'discarded', finalized_at = now(), attempt = max_attempts,
			errors = ARRAY['{"at":"2026-01-01T00:00:00Z","attempt":1,"error":"test: discarded"}'::jsonb] WHERE id = $1`, id)
	case "cancel":
		if _, err := c.JobCancel(h.ctx, id); err != nil {
			h.t.Fatalf("JobCancel(%d): %v", id, err)
		}
	case "delete":
		h.Exec(`DELETE FROM river_job WHERE id = $1`, id)
	default:
		h.t.Fatalf("lose: mode %q", mode)
	}
}

var lossModes = []string{"discard", "cancel", "delete"}

// loseEach inserts args three times with opts (its kind's insert options),
// and loses each copy in turn: discarded, cancelled, deleted. Every loss
// leaves nothing in flight, so the next copy is a new job, as a scan
// re-creating it would insert.
func (h *harness) loseEach(args river.JobArgs, opts *river.InsertOpts) {
	h.t.Helper()
	c := h.insertOnly()
	for _, mode := range lossModes {
		res, err := c.Insert(h.ctx, args, opts)
		if err != nil {
			h.t.Fatalf("insert %s: %v", args.Kind(), err)
		}
		if res.UniqueSkippedAsDuplicate {
			h.t.Fatalf("insert %s before %s: a duplicate of a job in flight", args.Kind(), mode)
		}
		h.lose(c, mode, res.Job.ID)
	}
	if n := h.Count(`SELECT count(*) FROM river_job WHERE kind = $1 AND state NOT IN ('discarded', 'cancelled')`, args.Kind()); n != 0 {
		h.t.Fatalf("%d %s jobs left in flight", n, args.Kind())
	}
}

// Nothing is carried only by a River job: for every ffriver job kind, the
// jobs of a due item are discarded, cancelled and deleted before anything
// works them, and the work still completes, exactly once, once a pipeline
// runs.
func TestLostJobsDelayWorkNeverLoseIt(t *testing.T) {
	t.Parallel()
	item := pipeline.ItemInsertOpts(ff.Filter{})
	scan := pipeline.ScanInsertOpts(ff.Filter{})
	// expiredLease is an execution whose lease ran out (by the manual clock).
	expiredLease := func(h *harness) ff.ExecutionID {
		id := h.Create(executions.CreateParams{Lane: "l"})
		h.ClaimOne("l", time.Second)
		h.clock.Advance(2 * time.Second)
		return id
	}
	// satisfiedFlow is an AnyOf(cancel_remaining) group whose winner has
	// completed and been counted (its hop applied by hand): the group is
	// flagged and its running sibling waits for the dispatcher.
	satisfiedFlow := func(h *harness) (sibling ff.ExecutionID, key jobs.GroupKey) {
		flow := h.Flow()
		a := h.Create(executions.CreateParams{FlowID: flow, Lane: "a"})
		b := h.Create(executions.CreateParams{FlowID: flow, Lane: "b"})
		merge := h.Create(executions.CreateParams{FlowID: flow, Lane: "merge"})
		h.depend(flow, merge, []ff.ExecutionID{a, b}, executions.AnyOf(executions.CancelRemaining))
		if err := h.st.Complete(h.ctx, h.ClaimOne("a", time.Hour), nil); err != nil {
			h.t.Fatal(err)
		}
		tx, err := h.db.Pool.Begin(h.ctx)
		if err != nil {
			h.t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(h.ctx) }()
		if out, err := actions.Of(h.st.Pipeline()).Advance(h.ctx, tx, actions.Hop{Upstream: a, FlowID: flow, Downstream: merge.UUID, Outcome: ff.OutcomeSuccess}); err != nil || out != actions.Processed {
			h.t.Fatalf("Advance = %s, %v", out, err)
		}
		if err := tx.Commit(h.ctx); err != nil {
			h.t.Fatal(err)
		}
		return b, jobs.GroupKey{Partition: merge.Partition, FlowID: flow, DownstreamEID: merge.UUID}
	}
	// chain is up → down (AllOf), with up completed through the store: the
	// Cascader inserted up's ff.advance job in the completion's transaction.
	chain := func(h *harness) (up, down ff.ExecutionID, flow uuid.UUID) {
		f := h.Flow()
		up = h.Create(executions.CreateParams{FlowID: f, Lane: "up"})
		down = h.Create(executions.CreateParams{FlowID: f, Lane: "down"})
		h.depend(f, down, []ff.ExecutionID{up}, executions.AllOf())
		if err := h.st.Complete(h.ctx, h.ClaimOne("up", time.Hour), nil); err != nil {
			h.t.Fatal(err)
		}
		return up, down, f
	}

	for _, tc := range []struct {
		kind string
		// run sets up a due item, loses its jobs and returns the check that
		// the work was done (awaited once the pipeline runs).
		run func(h *harness) func()
	}{
		{jobs.KindTick, func(h *harness) func() {
			id := expiredLease(h)
			args, err := pipeline.Of(h.ff).TickArgs(scanners.AttemptTimeout)
			if err != nil {
				h.t.Fatal(err)
			}
			h.loseEach(args, pipeline.Of(h.ff).TickInsertOpts())
			return func() { h.AwaitState(id, terminalExpired) }
		}},
		{jobs.KindScan, func(h *harness) func() {
			id := expiredLease(h)
			h.loseEach(jobs.ScanArgs{Scanner: scanners.AttemptTimeout, Partition: id.Partition, Batch: 1000}, scan)
			return func() { h.AwaitState(id, terminalExpired) }
		}},
		{jobs.KindExpireAttempt, func(h *harness) func() {
			id := expiredLease(h)
			h.loseEach(jobs.ExpireAttemptArgs{ID: id}, item)
			return func() {
				h.AwaitState(id, terminalExpired)
				h.WantEventStrings(id, []string{"acquired///1", "expired///1"}, []string{"expired//"})
			}
		}},
		{jobs.KindPromoteDelayed, func(h *harness) func() {
			id := h.Create(executions.CreateParams{Lane: "l", DelayUntil: time.UnixMilli(t0).Add(time.Second)})
			h.clock.Advance(2 * time.Second)
			h.loseEach(jobs.PromoteDelayedArgs{ID: id}, item)
			return func() { h.AwaitState(id, stWaiting) }
		}},
		{jobs.KindExpireDeadline, func(h *harness) func() {
			id := h.Create(executions.CreateParams{Lane: "l", Deadline: time.UnixMilli(t0).Add(time.Second)})
			h.clock.Advance(2 * time.Second)
			h.loseEach(jobs.ExpireDeadlineArgs{ID: id}, item)
			return func() {
				h.AwaitState(id, state{"terminal", "unowned", "not_applicable", "attempt_terminal", "expired"})
				h.WantEventStrings(id, nil, []string{"expired//"})
			}
		}},
		{jobs.KindCancelGroup, func(h *harness) func() {
			sibling, key := satisfiedFlow(h)
			h.loseEach(jobs.CancelGroupArgs{GroupKey: key}, item)
			return func() {
				h.AwaitState(sibling, stCancelled)
				h.WantEventStrings(sibling, nil, []string{"cancelled//"})
			}
		}},
		{jobs.KindReconcileGroup, func(h *harness) func() {
			// A pending row whose group's flag is cleared: stale, only the
			// reconciler removes it.
			_, key := satisfiedFlow(h)
			h.Exec(`UPDATE ff_edge_group SET cancel_siblings_pending_flag = false WHERE downstream_eid = $1`, key.DownstreamEID)
			h.loseEach(jobs.ReconcileGroupArgs{GroupKey: key}, item)
			return func() {
				h.Await("the stale pending group to be removed", func() bool {
					return h.Count(`SELECT count(*) FROM ff_pending_cancel_groups`) == 0
				})
			}
		}},
		{jobs.KindTrimOutbox, func(h *harness) func() {
			h.Create(executions.CreateParams{Lane: "l2"})
			if err := h.st.Complete(h.ctx, h.ClaimOne("l2", time.Hour), nil); err != nil {
				h.t.Fatal(err)
			}
			h.clock.Advance(8 * 24 * time.Hour)
			cutoff := h.clock.NowMs() - scanners.DefaultOutboxRetention.Milliseconds()
			// Each pass also carries its table's partition maintenance:
			// the partitions are created ahead all the same.
			width := outboxretention.PartitionWidth(scanners.DefaultOutboxRetention).Milliseconds()
			h.loseEach(jobs.TrimOutboxArgs{Table: jobs.OutboxLease, CutoffMs: cutoff, Limit: 1000, PartitionMs: width}, item)
			h.loseEach(jobs.TrimOutboxArgs{Table: jobs.OutboxCompletion, CutoffMs: cutoff, Limit: 1000, PartitionMs: width}, item)
			return func() {
				h.Await("the old events to be trimmed", func() bool {
					return h.Count(`SELECT (SELECT count(*) FROM ff_lease_event) + (SELECT count(*) FROM ff_completion_event)`) == 0
				})
				h.Await("both outboxes' partitions to be created ahead", func() bool {
					return h.Count(`SELECT count(DISTINCT stream) FROM ff_outbox_partition WHERE lo_ms IS NOT NULL`) == 2
				})
			}
		}},
		{jobs.KindRemoveExecutions, func(h *harness) func() {
			id := h.Create(executions.CreateParams{Lane: "l3"})
			if err := h.st.Cancel(h.ctx, id, executions.CancelParams{}); err != nil {
				h.t.Fatal(err)
			}
			h.clock.Advance(8 * 24 * time.Hour)
			cutoff := h.clock.NowMs() - scanners.DefaultExecutionRetention.Milliseconds()
			h.loseEach(jobs.RemoveExecutionsArgs{Partition: id.Partition, CutoffMs: cutoff, Limit: 1000}, item)
			return func() {
				h.Await("the old execution to be removed", func() bool {
					return h.Count(`SELECT count(*) FROM ff_exec_core`) == 0
				})
				if _, err := h.st.Get(h.ctx, id); !errors.As(err, new(*ff.RemovedError)) {
					h.t.Errorf("Get of the removed execution: %v, want removed by retention", err)
				}
			}
		}},
		{jobs.KindDispatchCompletion, func(h *harness) func() {
			// An upstream engine's writer: the upstream made terminal and its
			// completion event inserted by plain SQL, nothing enqueued.
			f := h.Flow()
			up := h.Create(executions.CreateParams{FlowID: f, Lane: "up"})
			down := h.Create(executions.CreateParams{FlowID: f, Lane: "down"})
			h.depend(f, down, []ff.ExecutionID{up}, executions.AllOf())
			h.Exec(`UPDATE ff_exec_core SET lifecycle_phase = 'terminal', public_state = 'completed' WHERE execution_id = $1`, up.UUID)
			var event int64
			if err := h.db.Pool.QueryRow(h.ctx, `INSERT INTO ff_completion_event (partition_key, execution_id, flow_id, outcome, occurred_at_ms)
				VALUES ($1, $2, $3, 'success', $4) RETURNING event_id`, up.Partition, up.UUID, f, h.clock.NowMs()).Scan(&event); err != nil {
				h.t.Fatal(err)
			}
			h.loseEach(jobs.DispatchCompletionArgs{EventID: event}, item)
			return func() {
				h.AwaitState(down, stWaiting)
				h.wantCounted(down, 1)
			}
		}},
		{jobs.KindAdvance, func(h *harness) func() {
			up, down, f := chain(h)
			// The completion's own hop job is lost first, then two more copies.
			var first int64
			if err := h.db.Pool.QueryRow(h.ctx, `SELECT id FROM river_job WHERE kind = 'ff.advance'`).Scan(&first); err != nil {
				h.t.Fatalf("the completion's hop job: %v", err)
			}
			c := h.insertOnly()
			h.lose(c, "delete", first)
			hop := jobs.AdvanceArgs{Upstream: up, FlowID: f, Downstream: down.UUID, Outcome: ff.OutcomeSuccess}
			h.loseEach(hop, item)
			h.clock.Advance(time.Minute) // past the dependency scanner's staleness threshold
			return func() {
				h.AwaitState(down, stWaiting)
				h.wantCounted(down, 1)
			}
		}},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, ffriver.Config{})
			check := tc.run(h)
			h.client(true, nil)
			check()
			h.awaitSettled()
		})
	}
}

// wantCounted fails unless down's edge group counted n upstream outcomes,
// each once.
func (h *harness) wantCounted(down ff.ExecutionID, n int) {
	h.t.Helper()
	got := h.Count(`SELECT success_count + fail_count + skip_count FROM ff_edge_group WHERE downstream_eid = $1`, down.UUID)
	edges := h.Count(`SELECT count(*) FROM ff_edge WHERE downstream_eid = $1 AND upstream_outcome IS NOT NULL`, down.UUID)
	if got != n || edges != n {
		h.t.Fatalf("%s's group counted %d outcomes over %d edges, want %d", down, got, edges, n)
	}
}
