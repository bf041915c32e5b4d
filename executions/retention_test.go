package executions_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/actions"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// remove runs RemoveExecutions for p in a transaction of its own.
func (f *fixture) remove(p actions.RemoveParams) actions.RemoveResult {
	f.t.Helper()
	return inTxValue(f, "RemoveExecutions", func(tx pgx.Tx) (actions.RemoveResult, error) {
		return actions.Of(f.st.Pipeline()).RemoveExecutions(f.ctx, tx, p)
	})
}

func (f *fixture) cancel(id ff.ExecutionID) {
	f.t.Helper()
	if err := f.st.Cancel(f.ctx, id, executions.CancelParams{}); err != nil {
		f.t.Fatalf("Cancel(%s): %v", id, err)
	}
}

// countWhere returns how many rows of table (of ffriver's) match where,
// with args.
func (f *fixture) countWhere(table, where string, args ...any) int {
	f.t.Helper()
	return f.Count(`SELECT count(*) FROM `+table+` WHERE `+where, args...)
}

func (f *fixture) exists(id ff.ExecutionID) bool {
	f.t.Helper()
	return f.countWhere("ff_exec_core", "partition_key = $1 AND execution_id = $2", id.Partition, id.UUID) == 1
}

// wantRemoved checks that Get of id says removed by retention.
func (f *fixture) wantRemoved(id ff.ExecutionID, public string, terminalAtMs int64) {
	f.t.Helper()
	_, err := f.st.Get(f.ctx, id)
	var rm *ff.RemovedError
	if !errors.As(err, &rm) || !errors.Is(err, ff.ErrNotFound) {
		f.t.Fatalf("Get(%s) = %v, want a RemovedError matching ErrNotFound", id, err)
	}
	if rm.PublicState != public || rm.TerminalAtMs != terminalAtMs || rm.RemovedAtMs != f.clock.NowMs() || rm.ID != id {
		f.t.Fatalf("Get(%s): %+v, want %s since %d removed at %d", id, rm, public, terminalAtMs, f.clock.NowMs())
	}
}

// flowOf creates a flow of two members in lane-a, down depending on up,
// in a partition not among avoid.
func (f *fixture) flowOf(avoid ...int16) (flow uuid.UUID, up, down ff.ExecutionID) {
	f.t.Helper()
	for {
		flow = uuid.New()
		if !slices.Contains(avoid, f.st.Partitions().ForFlow(flow)) {
			break
		}
	}
	if _, err := f.st.CreateFlow(f.ctx, flow); err != nil {
		f.t.Fatal(err)
	}
	up = f.Create(executions.CreateParams{FlowID: flow})
	down = f.Create(executions.CreateParams{FlowID: flow})
	if err := f.st.AddDependencies(f.ctx, executions.DependencyParams{FlowID: flow, Downstream: down, Upstreams: []ff.ExecutionID{up}}); err != nil {
		f.t.Fatal(err)
	}
	return flow, up, down
}

func (f *fixture) flowRows(part int16, flow uuid.UUID) (rows [5]int) {
	f.t.Helper()
	for i, table := range []string{"ff_flow_core", "ff_exec_core", "ff_edge", "ff_edge_group", "ff_pending_cancel_groups"} {
		rows[i] = f.countWhere(table, "partition_key = $1 AND flow_id = $2", part, flow)
	}
	return rows
}

// TestRemoveExecutions: a solo execution past retention goes with its
// attempts and leaves a tombstone; a recent terminal one, a live one, and a
// flow with a member within the retention stay whole; a flow whose every
// member is past retention goes whole, with its graph.
func TestRemoveExecutions(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	old := f.Create(executions.CreateParams{})
	l := f.ClaimOne("lane-a", time.Minute)
	if err := f.st.Complete(f.ctx, l, []byte("ok")); err != nil {
		t.Fatal(err)
	}
	live := f.Create(executions.CreateParams{})
	recent := f.Create(executions.CreateParams{})
	partly, partlyUp, partlyDown := f.flowOf()
	whole, wholeUp, wholeDown := f.flowOf()
	f.cancel(partlyUp)
	f.cancel(wholeUp)
	f.cancel(wholeDown)
	f.clock.Advance(time.Hour)
	f.cancel(recent)
	f.cancel(partlyDown)
	cutoff := t0 + (30 * time.Minute).Milliseconds()

	if got := f.countWhere("ff_attempt", "execution_id = $1", old.UUID); got != 1 {
		t.Fatalf("attempts of the completed execution = %d, want 1", got)
	}
	wantWhole := [5]int{1, 2, 1, 1, 0}
	if got := f.flowRows(wholeUp.Partition, whole); got != wantWhole {
		t.Fatalf("rows of the flow before = %v, want %v", got, wantWhole)
	}
	for _, part := range []int16{old.Partition, partlyUp.Partition, wholeUp.Partition} {
		f.remove(actions.RemoveParams{Partition: part, CutoffMs: cutoff, Limit: 100})
	}
	if f.exists(old) || f.countWhere("ff_attempt", "execution_id = $1", old.UUID) != 0 {
		t.Fatal("the old solo execution or its attempt is still there")
	}
	f.wantRemoved(old, ff.PublicCompleted, t0)
	for _, id := range []ff.ExecutionID{live, recent, partlyUp, partlyDown} {
		if !f.exists(id) {
			t.Fatalf("%s was removed", id)
		}
	}
	if got := f.flowRows(partlyUp.Partition, partly); got != [5]int{1, 2, 1, 1, 0} {
		t.Fatalf("rows of the partly recent flow = %v, want all kept", got)
	}
	if got := f.flowRows(wholeUp.Partition, whole); got != [5]int{} {
		t.Fatalf("rows of the old flow = %v, want none", got)
	}
	f.wantRemoved(wholeUp, ff.PublicCancelled, t0)
	f.wantRemoved(wholeDown, ff.PublicCancelled, t0)
	// Events outlive their execution: outbox retention is separate.
	if got := f.CompletionEvents(old); len(got) != 1 {
		t.Fatalf("completion events of the removed execution = %v, want its one event kept", got)
	}
	// An unknown id is plain not found.
	_, err := f.st.Get(f.ctx, ff.NewExecutionID(old.Partition))
	var rm *ff.RemovedError
	if !errors.Is(err, ff.ErrNotFound) || errors.As(err, &rm) {
		t.Fatalf("Get(unknown) = %v, want plain not found", err)
	}
	// Once the whole flow is past retention, it goes.
	f.clock.Advance(time.Hour)
	res := f.remove(actions.RemoveParams{Partition: partlyUp.Partition, CutoffMs: f.clock.NowMs() - time.Minute.Milliseconds(), Limit: 100})
	if res.Flows != 1 || res.FlowMembers != 2 || f.exists(partlyUp) || f.exists(partlyDown) {
		t.Fatalf("second run: %+v, members still there: %v %v", res, f.exists(partlyUp), f.exists(partlyDown))
	}
	// Tombstones expire once older than the cutoff.
	f.clock.Advance(time.Hour)
	res = f.remove(actions.RemoveParams{Partition: old.Partition, CutoffMs: f.clock.NowMs() - time.Minute.Milliseconds(), Limit: 100})
	if res.TombstonesExpired == 0 {
		t.Fatalf("no tombstone expired: %+v", res)
	}
	_, err = f.st.Get(f.ctx, old)
	if !errors.Is(err, ff.ErrNotFound) || errors.As(err, &rm) {
		t.Fatalf("Get(expired tombstone) = %v, want plain not found", err)
	}
}

// TestRemoveExecutionsSkipsLocked: an execution, or a member of a flow,
// that another transaction holds stays, and goes at a later run.
func TestRemoveExecutionsSkipsLocked(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	solo := f.Create(executions.CreateParams{})
	// The flow is in another partition than solo: each run below removes
	// from one partition, and counts what it kept there.
	flow, up, down := f.flowOf(solo.Partition)
	for _, id := range []ff.ExecutionID{solo, up, down} {
		f.cancel(id)
	}
	f.clock.Advance(time.Hour)
	lock := func(id ff.ExecutionID) *holder {
		return f.hold(func(tx pgx.Tx) error {
			_, err := tx.Exec(f.ctx, `SELECT FROM ff_exec_core WHERE partition_key = $1 AND execution_id = $2 FOR UPDATE`, id.Partition, id.UUID)
			return err
		})
	}
	hs, hd := lock(solo), lock(down)
	p := func(id ff.ExecutionID) actions.RemoveParams {
		return actions.RemoveParams{Partition: id.Partition, CutoffMs: f.clock.NowMs() - 1, Limit: 100}
	}
	if res := f.remove(p(solo)); res.Executions != 0 || res.Kept != 1 {
		t.Fatalf("with the solo execution locked: %+v, want it kept", res)
	}
	if res := f.remove(p(up)); res.Executions != 0 || res.Kept != 2 {
		t.Fatalf("with a flow member locked: %+v, want the flow kept", res)
	}
	if !f.exists(solo) || !f.exists(up) || !f.exists(down) {
		t.Fatal("a locked execution or its flow was removed")
	}
	for _, h := range []*holder{hs, hd} {
		if err := h.tx.Rollback(f.ctx); err != nil {
			t.Fatal(err)
		}
	}
	f.remove(p(solo))
	if res := f.remove(p(up)); res.Flows != 1 {
		t.Fatalf("after the locks went: %+v", res)
	}
	if f.exists(solo) || f.exists(up) || f.flowRows(up.Partition, flow) != [5]int{} {
		t.Fatal("not removed once the locks were released")
	}
}

// TestRemoveExecutionsFilter: a filtered run removes only its own
// executions, and a flow only when every member is its own.
func TestRemoveExecutionsFilter(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	mine := f.Create(executions.CreateParams{Namespace: "a", Tags: map[string]string{ff.InstanceTagKey: "i1"}})
	otherNS := f.Create(executions.CreateParams{Namespace: "b", Tags: map[string]string{ff.InstanceTagKey: "i1"}})
	otherTag := f.Create(executions.CreateParams{Namespace: "a", Tags: map[string]string{ff.InstanceTagKey: "i2"}})
	flow := f.Flow()
	m1 := f.Create(executions.CreateParams{FlowID: flow, Namespace: "a", Tags: map[string]string{ff.InstanceTagKey: "i1"}})
	m2 := f.Create(executions.CreateParams{FlowID: flow, Namespace: "b", Tags: map[string]string{ff.InstanceTagKey: "i1"}})
	for _, id := range []ff.ExecutionID{mine, otherNS, otherTag, m1, m2} {
		f.cancel(id)
	}
	f.clock.Advance(time.Hour)
	filter := ff.Filter{Namespace: "a", InstanceTag: &ff.Tag{Key: ff.InstanceTagKey, Value: "i1"}}
	for _, part := range []int16{mine.Partition, m1.Partition} {
		f.remove(actions.RemoveParams{Partition: part, CutoffMs: f.clock.NowMs() - 1, Filter: filter, Limit: 100})
	}
	if f.exists(mine) || !f.exists(otherNS) || !f.exists(otherTag) || !f.exists(m1) || !f.exists(m2) {
		t.Fatalf("after a filtered run: mine %v, other namespace %v, other tag %v, flow %v %v (want only mine gone)",
			f.exists(mine), f.exists(otherNS), f.exists(otherTag), f.exists(m1), f.exists(m2))
	}
	// The tombstone carries the filter: another namespace's run keeps it.
	f.clock.Advance(time.Hour)
	res := f.remove(actions.RemoveParams{Partition: mine.Partition, CutoffMs: f.clock.NowMs() - 1, Filter: ff.Filter{Namespace: "b"}, Limit: 100})
	if res.TombstonesExpired != 0 {
		t.Fatalf("namespace b's run expired namespace a's tombstone: %+v", res)
	}
	res = f.remove(actions.RemoveParams{Partition: mine.Partition, CutoffMs: f.clock.NowMs() - 1, Filter: filter, Limit: 100})
	if res.TombstonesExpired != 1 {
		t.Fatalf("the owner's run: %+v, want its tombstone expired", res)
	}
}

// TestRemoveExecutionsBatches: a run examines at most the limit, says when
// it filled its batch, and the next run from its position carries on.
func TestRemoveExecutionsBatches(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var ids []ff.ExecutionID
	for range 5 {
		id := f.Create(executions.CreateParams{})
		f.cancel(id)
		ids = append(ids, id)
		f.clock.Advance(time.Millisecond)
	}
	f.clock.Advance(time.Hour)
	p := actions.RemoveParams{Partition: ids[0].Partition, CutoffMs: f.clock.NowMs() - 1, Limit: 2}
	var removed []int64
	for range 10 {
		res := f.remove(p)
		removed = append(removed, res.Executions)
		if !res.Full(p.Limit) {
			break
		}
		p.After = res.Next
	}
	if len(removed) != 3 || removed[0] != 2 || removed[1] != 2 || removed[2] != 1 {
		t.Fatalf("removed per run = %v, want [2 2 1]", removed)
	}
	for _, id := range ids {
		if f.exists(id) {
			t.Fatalf("%s is still there", id)
		}
	}
	if _, err := actions.Of(f.st.Pipeline()).RemoveExecutions(f.ctx, nil, actions.RemoveParams{Partition: ids[0].Partition, Limit: 0}); !errors.Is(err, ff.ErrValidation) {
		t.Fatalf("limit 0: %v, want a validation error", err)
	}
}
