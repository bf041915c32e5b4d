package executions_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/actions"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// groupFixture seeds a flow and groups with plain SQL, as the upstream
// writers do.
type groupFixture struct {
	*fixture
	flow uuid.UUID
	part int16
}

func newGroupFixture(t *testing.T) *groupFixture {
	f := newFixture(t)
	flow := uuid.New()
	p := f.st.Partitions().ForFlow(flow)
	f.Exec(`INSERT INTO ff_flow_core (partition_key, flow_id) VALUES ($1, $2)`, p, flow)
	return &groupFixture{fixture: f, flow: flow, part: p}
}

func (g *groupFixture) group(flag bool, members ...string) actions.GroupKey {
	g.t.Helper()
	k := actions.GroupKey{Partition: g.part, FlowID: g.flow, DownstreamEID: uuid.New()}
	g.Exec(`INSERT INTO ff_edge_group (partition_key, flow_id, downstream_eid, cancel_siblings_pending_flag, cancel_siblings_pending_members)
		VALUES ($1, $2, $3, $4, $5)`, k.Partition, k.FlowID, k.DownstreamEID, flag, append([]string{}, members...))
	g.pending(k)
	return k
}

func (g *groupFixture) pending(k actions.GroupKey) {
	g.t.Helper()
	g.Exec(`INSERT INTO ff_pending_cancel_groups (partition_key, flow_id, downstream_eid) VALUES ($1, $2, $3)`,
		k.Partition, k.FlowID, k.DownstreamEID)
}

func (g *groupFixture) pendingCount() int {
	g.t.Helper()
	return g.Count(`SELECT count(*) FROM ff_pending_cancel_groups`)
}

func (g *groupFixture) flag(k actions.GroupKey) (bool, []string) {
	var flag bool
	var members []string
	if err := g.db.Pool.QueryRow(g.ctx, `SELECT cancel_siblings_pending_flag, cancel_siblings_pending_members FROM ff_edge_group
		WHERE partition_key = $1 AND flow_id = $2 AND downstream_eid = $3`, k.Partition, k.FlowID, k.DownstreamEID).Scan(&flag, &members); err != nil {
		g.t.Fatal(err)
	}
	return flag, members
}

func (g *groupFixture) dispatch(k actions.GroupKey) actions.GroupResult {
	g.t.Helper()
	var r actions.GroupResult
	if err := g.InTx(func(tx pgx.Tx) error {
		var err error
		r, err = actions.Of(g.st.Pipeline()).DispatchCancelGroup(g.ctx, tx, k)
		return err
	}); err != nil {
		g.t.Fatalf("DispatchCancelGroup: %v", err)
	}
	return r
}

func (g *groupFixture) reconcile(k actions.GroupKey) actions.GroupResult {
	g.t.Helper()
	var r actions.GroupResult
	if err := g.InTx(func(tx pgx.Tx) error {
		var err error
		r, err = actions.Of(g.st.Pipeline()).ReconcileCancelGroup(g.ctx, tx, k)
		return err
	}); err != nil {
		g.t.Fatalf("ReconcileCancelGroup: %v", err)
	}
	return r
}

func (g *groupFixture) member(lane string) ff.ExecutionID {
	return g.Create(executions.CreateParams{Lane: lane, FlowID: g.flow})
}

var cancelledState = state{"terminal", "unowned", "not_applicable", "attempt_terminal", "cancelled"}

func TestDispatchCancelGroup(t *testing.T) {
	t.Parallel()
	g := newGroupFixture(t)
	leased := g.member("a")
	lease := g.ClaimOne("a", time.Hour)
	waiting := g.member("b")
	done := g.member("c")
	if err := g.st.Cancel(g.ctx, done, executions.CancelParams{}); err != nil {
		t.Fatal(err)
	}
	k := g.group(true, leased.UUID.String(), waiting.UUID.String(), done.UUID.String(), uuid.NewString(), "junk")

	r := g.dispatch(k)
	want := actions.GroupResult{Outcome: actions.Processed, Cancelled: 2, AlreadyTerminal: 1, Missing: 2}
	if r != want {
		t.Fatalf("dispatch = %+v, want %+v", r, want)
	}
	e := g.WantState(leased, cancelledState)
	if *e.CancellationReason != "sibling_quorum_satisfied" || *e.CancelledBy != "engine" {
		t.Errorf("reason %q by %q", *e.CancellationReason, *e.CancelledBy)
	}
	g.WantState(waiting, cancelledState)
	g.WantEvents(leased, []string{"acquired", "revoked"}, []string{"cancelled"})
	g.WantEvents(waiting, nil, []string{"cancelled"})
	g.WantEvents(done, nil, []string{"cancelled"})
	if flag, members := g.flag(k); flag || len(members) != 0 || g.pendingCount() != 0 {
		t.Errorf("after dispatch: flag %v members %v pending %d", flag, members, g.pendingCount())
	}
	// The fenced worker can no longer complete.
	wantErr(t, g.st.Complete(g.ctx, lease, nil), ff.ErrStaleLease)
	// Run twice: the pending row is gone, nothing happens.
	if r := g.dispatch(k); r.Outcome != actions.NoOp {
		t.Errorf("second dispatch = %+v", r)
	}
	g.WantEvents(leased, []string{"acquired", "revoked"}, []string{"cancelled"})
}

func TestDispatchCancelGroupSkipsAndOrphans(t *testing.T) {
	t.Parallel()
	g := newGroupFixture(t)
	m := g.member("a")
	cleared := g.group(false)
	if r := g.dispatch(cleared); r.Outcome != actions.SkippedForReconciler || g.pendingCount() != 1 {
		t.Errorf("flag false: %+v, %d pending", r, g.pendingCount())
	}
	orphan := actions.GroupKey{Partition: g.part, FlowID: g.flow, DownstreamEID: uuid.New()}
	g.pending(orphan)
	if r := g.dispatch(orphan); r.Outcome != actions.Orphaned || g.pendingCount() != 1 {
		t.Errorf("orphan: %+v, %d pending", r, g.pendingCount())
	}

	// A concurrent holder of the group: skipped, nothing written; after it
	// lets go, dispatched exactly once.
	k := g.group(true, m.UUID.String())
	blocker, err := g.db.Pool.Begin(g.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := blocker.Exec(g.ctx, `SELECT 1 FROM ff_edge_group WHERE downstream_eid = $1 FOR UPDATE`, k.DownstreamEID); err != nil {
		t.Fatal(err)
	}
	if r := g.dispatch(k); r.Outcome != actions.SkippedLocked {
		t.Errorf("locked: %+v", r)
	}
	if r := g.reconcile(k); r.Outcome != actions.NoOp {
		t.Errorf("reconcile while locked: %+v", r)
	}
	g.WantState(m, state{"runnable", "unowned", "eligible_now", "pending_first_attempt", "waiting"})
	_ = blocker.Rollback(g.ctx)
	if r := g.dispatch(k); r.Outcome != actions.Processed || r.Cancelled != 1 {
		t.Errorf("after unlock: %+v", r)
	}
	g.WantEvents(m, nil, []string{"cancelled"})

	if _, err := actions.Of(g.st.Pipeline()).DispatchCancelGroup(context.Background(), nil, actions.GroupKey{Partition: 9999}); err == nil {
		t.Error("partition outside the schema accepted")
	}
}

func TestReconcileCancelGroup(t *testing.T) {
	t.Parallel()
	g := newGroupFixture(t)
	running := g.member("a")
	done := g.member("b")
	if err := g.st.Cancel(g.ctx, done, executions.CancelParams{}); err != nil {
		t.Fatal(err)
	}

	stale := g.group(false, running.UUID.String())
	if r := g.reconcile(stale); r.Outcome != actions.SremmedStale {
		t.Errorf("flag false: %+v", r)
	}
	orphan := actions.GroupKey{Partition: g.part, FlowID: g.flow, DownstreamEID: uuid.New()}
	g.pending(orphan)
	if r := g.reconcile(orphan); r.Outcome != actions.SremmedStale {
		t.Errorf("group missing: %+v", r)
	}
	if n := g.pendingCount(); n != 0 {
		t.Fatalf("%d pending rows left", n)
	}

	busy := g.group(true, running.UUID.String(), done.UUID.String())
	if r := g.reconcile(busy); r.Outcome != actions.NoOp || r.Running != 1 || g.pendingCount() != 1 {
		t.Errorf("member running: %+v, %d pending", r, g.pendingCount())
	}
	if flag, members := g.flag(busy); !flag || !slices.Equal(members, []string{running.UUID.String(), done.UUID.String()}) {
		t.Errorf("reconciler touched a group the dispatcher owns: %v %v", flag, members)
	}
	g.WantState(running, state{"runnable", "unowned", "eligible_now", "pending_first_attempt", "waiting"})

	drained := g.group(true, done.UUID.String())
	if r := g.reconcile(drained); r.Outcome != actions.CompletedDrain || r.AlreadyTerminal != 1 {
		t.Errorf("all terminal: %+v", r)
	}
	empty := g.group(true)
	if r := g.reconcile(empty); r.Outcome != actions.CompletedDrain {
		t.Errorf("flag stuck with no members: %+v", r)
	}
	for _, k := range []actions.GroupKey{drained, empty} {
		if flag, _ := g.flag(k); flag {
			t.Errorf("group %v still flagged", k)
		}
	}
	if n := g.pendingCount(); n != 1 {
		t.Errorf("%d pending rows, want only the busy group's", n)
	}
	if r := g.reconcile(drained); r.Outcome != actions.NoOp {
		t.Errorf("second run: %+v", r)
	}
	g.WantEvents(done, nil, []string{"cancelled"})
}
