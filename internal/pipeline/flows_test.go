package pipeline_test

import (
	"slices"
	"testing"
	"time"

	"github.com/ffriver/ffriver"
	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/google/uuid"
)

var (
	stWaiting   = state{"runnable", "unowned", "eligible_now", "pending_first_attempt", "waiting"}
	stBlocked   = state{"runnable", "unowned", "blocked_by_dependencies", "pending_first_attempt", "waiting_children"}
	stCancelled = state{"terminal", "unowned", "not_applicable", "attempt_terminal", "cancelled"}
	stSkipped   = state{"terminal", "unowned", "not_applicable", "attempt_terminal", "skipped"}
)

func (h *harness) depend(flow uuid.UUID, down ff.ExecutionID, ups []ff.ExecutionID, p executions.EdgePolicy) {
	h.t.Helper()
	if err := h.st.AddDependencies(h.ctx, executions.DependencyParams{FlowID: flow, Downstream: down, Upstreams: ups, Policy: p}); err != nil {
		h.t.Fatal(err)
	}
}

// AnyOf cancel_remaining end to end on River: the winner's completion
// enqueues its hop in its own transaction, the hop satisfies the group and
// flags the siblings, the dispatcher cancels them (the running one fenced),
// and their cancellations advance their own downstream groups.
func TestFlowAnyOfCancelsSiblingsThroughRiver(t *testing.T) {
	t.Parallel()
	h := newHarness(t, ffriver.Config{})
	flow := h.Flow()
	a := h.Create(executions.CreateParams{FlowID: flow, Lane: "a", Namespace: "ns"})
	b := h.Create(executions.CreateParams{FlowID: flow, Lane: "b", Namespace: "ns"})
	c := h.Create(executions.CreateParams{FlowID: flow, Lane: "c", Namespace: "ns"})
	merge := h.Create(executions.CreateParams{FlowID: flow, Lane: "merge"})
	// c also feeds an AllOf step, which c's cancellation must skip.
	after := h.Create(executions.CreateParams{FlowID: flow, Lane: "after"})
	h.depend(flow, merge, []ff.ExecutionID{a, b, c}, executions.AnyOf(executions.CancelRemaining))
	h.depend(flow, after, []ff.ExecutionID{c}, executions.AllOf())

	cLease := h.ClaimOne("c", time.Hour)
	aLease := h.ClaimOne("a", time.Hour)
	if err := h.st.Complete(h.ctx, aLease, nil); err != nil {
		t.Fatal(err)
	}
	if n := h.Count(`SELECT count(*) FROM river_job WHERE kind = 'ff.advance'`); n != 1 {
		t.Fatalf("advance jobs after the completion = %d, want 1 (inserted with it)", n)
	}
	h.client(true, nil)
	h.AwaitState(b, stCancelled)
	h.AwaitState(c, stCancelled)
	h.WantState(merge, stWaiting)
	h.AwaitState(after, stSkipped)
	h.WantEventStrings(c, []string{"acquired/ns//1", "revoked/ns//1"}, []string{"cancelled/ns/"})
	h.WantEventStrings(b, nil, []string{"cancelled/ns/"})
	h.WantEventStrings(after, nil, []string{"skipped//"})
	if _, err := h.st.Renew(h.ctx, cLease, time.Minute); err == nil {
		t.Fatal("the cancelled sibling's worker could still renew")
	}
	e := h.Get(c)
	if *e.CancellationReason != "sibling_quorum_satisfied" {
		t.Errorf("reason = %q", *e.CancellationReason)
	}
	h.Await("the pending group to be drained", func() bool {
		return h.Count(`SELECT count(*) FROM ff_pending_cancel_groups`) == 0
	})
	// Every completion was dispatched; nothing is left for the dependency scanner.
	if n := h.Count(`SELECT count(*) FROM ff_completion_event WHERE dispatched_at_ms IS NULL`); n != 0 {
		t.Fatalf("%d completion events left undispatched", n)
	}
}

// An upstream made terminal by plain SQL (an upstream engine's writer, with
// its completion event or without one) is found from the data by the
// dependency scanner once stale: its edge has no outcome, so the scanner
// enqueues the hop, which is counted exactly once.
func TestDependencyScannerAdvancesPlainSQLCompletions(t *testing.T) {
	t.Parallel()
	h := newHarness(t, ffriver.Config{})
	flow := h.Flow()
	up := h.Create(executions.CreateParams{FlowID: flow, Lane: "up"})
	up2 := h.Create(executions.CreateParams{FlowID: flow, Lane: "up"})
	down := h.Create(executions.CreateParams{FlowID: flow, Lane: "down"})
	h.depend(flow, down, []ff.ExecutionID{up, up2}, executions.AllOf())
	h.Exec(`UPDATE ff_exec_core SET lifecycle_phase = 'terminal', public_state = 'completed' WHERE execution_id = ANY($1)`, []uuid.UUID{up.UUID, up2.UUID})
	h.Exec(`INSERT INTO ff_completion_event (partition_key, execution_id, flow_id, outcome, namespace, instance_tag, occurred_at_ms)
		VALUES ($1, $2, $3, 'success', NULL, NULL, $4)`, up.Partition, up.UUID, flow, time.Now().UnixMilli())
	// Not yet stale by the scanner's clock (the trigger marked the edges
	// with the database's clock): a tick runs and leaves them alone.
	h.clock.Set(time.Now().UnixMilli())
	h.client(true, nil)
	h.Await("a dependency tick", func() bool {
		return h.Count(`SELECT count(*) FROM river_job WHERE kind = 'ff.tick' AND state = 'completed' AND args->>'scanner' = 'dependency'`) > 0
	})
	h.WantState(down, stBlocked)
	h.clock.Set(time.Now().Add(time.Minute).UnixMilli())
	h.AwaitState(down, stWaiting)
	h.Await("jobs to settle", func() bool { return h.jobsSettled() })
	if got := h.outcomes("ff.advance"); !slices.Equal(got, []string{"processed", "processed"}) {
		t.Fatalf("advance outcomes = %v, want two processed", got)
	}
	h.wantCounted(down, 2)
}

// A hop waiting on a long lock of its edge group is not spent by waiting:
// its ff.advance job snoozes (no attempt, no error recorded) for as long as
// the lock is held, then counts the upstream once.
func TestFlowHopWaitingOnALockSnoozes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, ffriver.Config{})
	flow := h.Flow()
	up := h.Create(executions.CreateParams{FlowID: flow, Lane: "up"})
	down := h.Create(executions.CreateParams{FlowID: flow, Lane: "down"})
	h.depend(flow, down, []ff.ExecutionID{up}, executions.AllOf())
	blocker, err := h.db.Pool.Begin(h.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = blocker.Rollback(h.ctx) }()
	if _, err := blocker.Exec(h.ctx, `SELECT 1 FROM ff_edge_group WHERE downstream_eid = $1 FOR UPDATE`, down.UUID); err != nil {
		t.Fatal(err)
	}
	if err := h.st.Complete(h.ctx, h.ClaimOne("up", time.Hour), nil); err != nil {
		t.Fatal(err)
	}
	h.client(true, nil)
	h.Await("the hop to snooze twice on the lock", func() bool {
		return h.Count(`SELECT COALESCE(max((metadata->>'snoozes')::int), 0) FROM river_job WHERE kind = 'ff.advance'`) >= 2
	})
	if n := h.Count(`SELECT count(*) FROM river_job WHERE kind = 'ff.advance' AND (cardinality(errors) > 0 OR state IN ('discarded', 'cancelled'))`); n != 0 {
		t.Fatalf("%d ff.advance jobs spent attempts while waiting on the lock", n)
	}
	h.WantState(down, stBlocked)
	if err := blocker.Rollback(h.ctx); err != nil {
		t.Fatal(err)
	}
	h.AwaitState(down, stWaiting)
	h.Await("jobs to settle", func() bool { return h.jobsSettled() })
	h.wantCounted(down, 1)
	if got := h.outcomes("ff.advance"); !slices.Equal(got, []string{"processed"}) {
		t.Fatalf("advance outcomes = %v, want one processed", got)
	}
}
