package executions_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/internal/actions"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// hopQueue is a Cascader that keeps enqueued hops in memory, standing in
// for the River jobs. It keeps hops even if their transaction rolls back,
// which these tests never do to a transition that enqueues.
type hopQueue struct {
	mu   sync.Mutex
	hops []actions.Hop
}

func (q *hopQueue) EnqueueHopsTx(ctx context.Context, tx pgx.Tx, hops []actions.Hop) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.hops = append(q.hops, hops...)
	return nil
}

func (q *hopQueue) take() []actions.Hop {
	q.mu.Lock()
	defer q.mu.Unlock()
	h := q.hops
	q.hops = nil
	return h
}

type flowFixture struct {
	*fixture
	q *hopQueue
}

func newFlowFixture(t *testing.T) *flowFixture {
	t.Helper()
	q := &hopQueue{}
	k := fftest.New(t, &fftest.KitOptions{Config: executions.Config{Cascader: q}})
	return &flowFixture{fixture: kitFixture(t, k), q: q}
}

// drain applies enqueued hops (and the hops they cause) until none remain,
// returning the outcomes in order.
func (f *flowFixture) drain() []actions.Outcome {
	f.t.Helper()
	var out []actions.Outcome
	for {
		hops := f.q.take()
		if len(hops) == 0 {
			return out
		}
		for _, h := range hops {
			out = append(out, f.advance(h))
		}
	}
}

func (f *flowFixture) advance(h actions.Hop) actions.Outcome {
	f.t.Helper()
	return f.action(func(tx pgx.Tx) (actions.Outcome, error) { return actions.Of(f.st.Pipeline()).Advance(f.ctx, tx, h) })
}

// members creates n executions in flow, each in its own lane.
func (f *flowFixture) members(flow uuid.UUID, lanes ...string) []ff.ExecutionID {
	var ids []ff.ExecutionID
	for _, l := range lanes {
		ids = append(ids, f.Create(executions.CreateParams{FlowID: flow, Lane: l}))
	}
	return ids
}

func (f *flowFixture) finish(lane string, ok bool) {
	f.t.Helper()
	l := f.ClaimOne(lane, time.Minute)
	if ok {
		if err := f.st.Complete(f.ctx, l, nil); err != nil {
			f.t.Fatal(err)
		}
		return
	}
	if _, err := f.st.Fail(f.ctx, l, executions.FailParams{Permanent: true}); err != nil {
		f.t.Fatal(err)
	}
}

func (f *flowFixture) group(flow uuid.UUID, down ff.ExecutionID) (state string, flag bool, members []string, pending int) {
	f.t.Helper()
	if err := f.db.Pool.QueryRow(f.ctx, `SELECT group_state, cancel_siblings_pending_flag, cancel_siblings_pending_members,
		(SELECT count(*) FROM ff_pending_cancel_groups p WHERE p.flow_id = g.flow_id AND p.downstream_eid = g.downstream_eid)
		FROM ff_edge_group g WHERE flow_id = $1 AND downstream_eid = $2`, flow, down.UUID).Scan(&state, &flag, &members, &pending); err != nil {
		f.t.Fatal(err)
	}
	slices.Sort(members)
	return
}

var stBlocked = state{"runnable", "unowned", "blocked_by_dependencies", "pending_first_attempt", "waiting_children"}

func TestFlowAllOf(t *testing.T) {
	t.Parallel()
	f := newFlowFixture(t)
	flow := f.Flow()
	ups := f.members(flow, "u1", "u2", "u3")
	down := f.Create(executions.CreateParams{FlowID: flow, Lane: "down"})
	if err := f.st.AddDependencies(f.ctx, executions.DependencyParams{FlowID: flow, Downstream: down, Upstreams: ups}); err != nil {
		t.Fatal(err)
	}
	f.WantState(down, stBlocked)
	if leases, err := f.st.Claim(f.ctx, executions.ClaimParams{Lane: "down", LeaseTTL: time.Second}); err != nil || len(leases) != 0 {
		t.Fatalf("a blocked downstream was claimable: %v %v", leases, err)
	}
	for i, lane := range []string{"u1", "u2", "u3"} {
		f.finish(lane, true)
		if got := f.drain(); !slices.Equal(got, []actions.Outcome{actions.Processed}) {
			t.Fatalf("hop %d outcomes = %v", i, got)
		}
		if i < 2 {
			f.WantState(down, stBlocked)
		}
	}
	f.WantState(down, stWaiting)
	if st, flag, _, pending := f.group(flow, down); st != "satisfied" || flag || pending != 0 {
		t.Fatalf("group = %s flag %v pending %d", st, flag, pending)
	}
	f.ClaimOne("down", time.Minute)
	// Every upstream completion was dispatched by the cascade itself.
	var undispatched int
	if err := f.db.Pool.QueryRow(f.ctx, `SELECT count(*) FROM ff_completion_event WHERE dispatched_at_ms IS NULL`).Scan(&undispatched); err != nil || undispatched != 0 {
		t.Fatalf("undispatched completion events = %d, %v", undispatched, err)
	}
}

func TestFlowAnyOfCancelRemainingFlagsSiblings(t *testing.T) {
	t.Parallel()
	f := newFlowFixture(t)
	flow := f.Flow()
	ups := f.members(flow, "a", "b", "c")
	down := f.Create(executions.CreateParams{FlowID: flow, Lane: "down"})
	if err := f.st.AddDependencies(f.ctx, executions.DependencyParams{FlowID: flow, Downstream: down, Upstreams: ups,
		Policy: executions.AnyOf(executions.CancelRemaining)}); err != nil {
		t.Fatal(err)
	}
	f.ClaimOne("c", time.Minute) // c is running when a wins
	f.finish("a", true)
	f.drain()
	f.WantState(down, stWaiting)
	st, flag, members, pending := f.group(flow, down)
	want := []string{ups[1].UUID.String(), ups[2].UUID.String()}
	slices.Sort(want)
	if st != "satisfied" || !flag || !slices.Equal(members, want) || pending != 1 {
		t.Fatalf("group = %s flag %v members %v pending %d; want satisfied, flagged, %v, 1", st, flag, members, pending, want)
	}
	// A later success neither re-resolves nor re-flags the group.
	f.finish("b", true)
	f.drain()
	if _, _, members2, pending2 := f.group(flow, down); !slices.Equal(members2, want) || pending2 != 1 {
		t.Fatalf("after a later success: members %v pending %d", members2, pending2)
	}
}

func TestFlowQuorumLetRun(t *testing.T) {
	t.Parallel()
	f := newFlowFixture(t)
	flow := f.Flow()
	ups := f.members(flow, "a", "b", "c")
	down := f.Create(executions.CreateParams{FlowID: flow, Lane: "down"})
	if err := f.st.AddDependencies(f.ctx, executions.DependencyParams{FlowID: flow, Downstream: down, Upstreams: ups,
		Policy: executions.Quorum(2, executions.LetRun)}); err != nil {
		t.Fatal(err)
	}
	f.finish("a", true)
	f.finish("b", false)
	f.drain()
	f.WantState(down, stBlocked)
	f.finish("c", true)
	f.drain()
	f.WantState(down, stWaiting)
	if st, flag, _, pending := f.group(flow, down); st != "satisfied" || flag || pending != 0 {
		t.Fatalf("group = %s flag %v pending %d", st, flag, pending)
	}
}

// Quorum impossible skips the downstream, and the skip cascades hop by hop.
func TestFlowImpossibleSkipCascadesThreeHops(t *testing.T) {
	t.Parallel()
	f := newFlowFixture(t)
	flow := f.Flow()
	ups := f.members(flow, "a", "b", "c")
	d1 := f.Create(executions.CreateParams{FlowID: flow, Lane: "d1"})
	d2 := f.Create(executions.CreateParams{FlowID: flow, Lane: "d2"})
	d3 := f.Create(executions.CreateParams{FlowID: flow, Lane: "d3"})
	add := func(down ff.ExecutionID, ups []ff.ExecutionID, p executions.EdgePolicy) {
		if err := f.st.AddDependencies(f.ctx, executions.DependencyParams{FlowID: flow, Downstream: down, Upstreams: ups, Policy: p}); err != nil {
			t.Fatal(err)
		}
	}
	add(d1, ups, executions.Quorum(2, executions.LetRun))
	add(d2, []ff.ExecutionID{d1}, executions.AllOf())
	add(d3, []ff.ExecutionID{d2}, executions.AllOf())
	f.finish("a", false)
	f.drain()
	f.WantState(d1, stBlocked)
	f.finish("b", false) // 2 of 3 failed: k=2 is out of reach
	if got := f.drain(); len(got) != 3 {
		t.Fatalf("cascade outcomes = %v, want three hops", got)
	}
	stSkipped := state{"terminal", "unowned", "not_applicable", "attempt_terminal", "skipped"}
	for _, d := range []ff.ExecutionID{d1, d2, d3} {
		f.WantState(d, stSkipped)
		f.WantEvents(d, nil, []string{"skipped"})
	}
	// c's later success is counted but changes nothing.
	f.finish("c", true)
	f.drain()
	f.WantState(d1, stSkipped)
}

func TestFlowReplayedHopIsNoOp(t *testing.T) {
	t.Parallel()
	f := newFlowFixture(t)
	flow := f.Flow()
	ups := f.members(flow, "a", "b")
	down := f.Create(executions.CreateParams{FlowID: flow, Lane: "down"})
	if err := f.st.AddDependencies(f.ctx, executions.DependencyParams{FlowID: flow, Downstream: down, Upstreams: ups}); err != nil {
		t.Fatal(err)
	}
	f.finish("a", true)
	hops := f.q.take()
	if len(hops) != 1 {
		t.Fatalf("hops = %v", hops)
	}
	if got := f.advance(hops[0]); got != actions.Processed {
		t.Fatalf("first = %q", got)
	}
	if got := f.advance(hops[0]); got != actions.NoOp {
		t.Fatalf("replay = %q, want no_op", got)
	}
	var success int
	if err := f.db.Pool.QueryRow(f.ctx, `SELECT success_count FROM ff_edge_group WHERE downstream_eid = $1`, down.UUID).Scan(&success); err != nil || success != 1 {
		t.Fatalf("success_count = %d, %v; want 1", success, err)
	}
}

// Many upstreams succeed at once; their hops run concurrently: the group
// resolves exactly once and flags its siblings once.
func TestFlowGroupResolvesOnceUnderConcurrentHops(t *testing.T) {
	t.Parallel()
	f := newFlowFixture(t)
	flow := f.Flow()
	lanes := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	ups := f.members(flow, lanes...)
	down := f.Create(executions.CreateParams{FlowID: flow, Lane: "down"})
	if err := f.st.AddDependencies(f.ctx, executions.DependencyParams{FlowID: flow, Downstream: down, Upstreams: ups,
		Policy: executions.Quorum(3, executions.CancelRemaining)}); err != nil {
		t.Fatal(err)
	}
	for _, l := range lanes {
		f.finish(l, true)
	}
	hops := f.q.take()
	var wg sync.WaitGroup
	outcomes := make([]actions.Outcome, len(hops))
	for i, h := range hops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := pgx.BeginFunc(f.ctx, f.db.Pool, func(tx pgx.Tx) error {
				var err error
				outcomes[i], err = actions.Of(f.st.Pipeline()).Advance(f.ctx, tx, h)
				return err
			})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	var resolved int
	var success int
	if err := f.db.Pool.QueryRow(f.ctx, `SELECT count(*) FILTER (WHERE group_state = 'satisfied'), max(success_count)
		FROM ff_edge_group WHERE downstream_eid = $1`, down.UUID).Scan(&resolved, &success); err != nil {
		t.Fatal(err)
	}
	if resolved != 1 || success != len(lanes) {
		t.Fatalf("resolved groups %d, success_count %d; want 1 and %d", resolved, success, len(lanes))
	}
	// All upstreams were terminal already: nothing left to cancel.
	if _, flag, _, pending := f.group(flow, down); flag || pending != 0 {
		t.Fatalf("flag %v pending %d with no running sibling", flag, pending)
	}
	f.WantState(down, stWaiting)
}

func TestFlowDependenciesOnFinishedUpstreams(t *testing.T) {
	t.Parallel()
	f := newFlowFixture(t)
	flow := f.Flow()
	ups := f.members(flow, "a", "b")
	f.finish("a", true)
	f.finish("b", true)
	f.drain()
	down := f.Create(executions.CreateParams{FlowID: flow, Lane: "down"})
	if err := f.st.AddDependencies(f.ctx, executions.DependencyParams{FlowID: flow, Downstream: down, Upstreams: ups}); err != nil {
		t.Fatal(err)
	}
	f.WantState(down, stWaiting)
}

// TestFlowRejectsCyclesAndBadPolicies: AddDependencies rejects cycles,
// bad policies and edges it cannot place with validation errors, and a
// missing flow with ff.ErrNotFound naming the flow, wherever the flow's id
// hashes to. The flows that decide which check answers (one in the
// upstreams' partition, one elsewhere) are chosen, not left to chance.
func TestFlowRejectsCyclesAndBadPolicies(t *testing.T) {
	t.Parallel()
	f := newFlowFixture(t)
	flow := f.Flow()
	ids := f.members(flow, "a", "b", "c")
	part := ids[0].Partition
	// flowID returns a fresh flow id whose partition is part (here true)
	// or another one (here false).
	flowID := func(here bool) uuid.UUID {
		for {
			id := uuid.New()
			if (f.st.Partitions().ForFlow(id) == part) == here {
				return id
			}
		}
	}
	memberOfNewFlow := func(here bool) ff.ExecutionID {
		t.Helper()
		other, err := f.st.CreateFlow(f.ctx, flowID(here))
		if err != nil {
			t.Fatal(err)
		}
		return f.Create(executions.CreateParams{FlowID: other, Lane: "x"})
	}
	sameParted, otherParted := memberOfNewFlow(true), memberOfNewFlow(false)
	missingHere, missingElsewhere := flowID(true), flowID(false)
	solo := f.Create(executions.CreateParams{Lane: "solo"})
	add := func(down ff.ExecutionID, ups []ff.ExecutionID, p executions.EdgePolicy) error {
		return f.st.AddDependencies(f.ctx, executions.DependencyParams{FlowID: flow, Downstream: down, Upstreams: ups, Policy: p})
	}
	addTo := func(flow uuid.UUID) error {
		return f.st.AddDependencies(f.ctx, executions.DependencyParams{FlowID: flow, Downstream: ids[0], Upstreams: ids[1:2]})
	}
	if err := add(ids[1], ids[:1], executions.AllOf()); err != nil { // a → b
		t.Fatal(err)
	}
	if err := add(ids[2], ids[1:2], executions.AllOf()); err != nil { // b → c
		t.Fatal(err)
	}
	cases := []struct {
		name string
		err  error
		want error
		// msg, when set, is a part of the error's text.
		msg string
	}{
		{"cycle c → a", add(ids[0], ids[2:3], executions.AllOf()), ff.ErrValidation, "cycle"},
		{"self edge", add(ids[0], ids[:1], executions.AllOf()), ff.ErrValidation, "depends on itself"},
		{"quorum k=0", add(ids[0], ids[1:], executions.Quorum(0, executions.LetRun)), ff.ErrValidation, ""},
		{"quorum k>n", add(ids[0], ids[1:], executions.Quorum(3, executions.LetRun)), ff.ErrValidation, ""},
		{"bad on_satisfied", add(ids[0], ids[1:], executions.AnyOf("maybe")), ff.ErrValidation, ""},
		{"bad kind", add(ids[0], ids[1:], executions.EdgePolicy{Kind: "most_of"}), ff.ErrValidation, ""},
		{"no upstreams", add(ids[0], nil, executions.AllOf()), ff.ErrValidation, ""},
		{"duplicate upstream", add(ids[0], []ff.ExecutionID{ids[1], ids[1]}, executions.AllOf()), ff.ErrValidation, "listed twice"},
		{"group already fixed", add(ids[1], ids[2:], executions.AllOf()), ff.ErrValidation, ""},
		{"upstream in another flow of the partition", add(ids[0], []ff.ExecutionID{sameParted}, executions.AllOf()), ff.ErrValidation, "not members of flow"},
		{"upstream in another partition", add(ids[0], []ff.ExecutionID{otherParted}, executions.AllOf()), ff.ErrValidation, "partition"},
		{"solo downstream", add(solo, ids[:1], executions.AllOf()), ff.ErrValidation, ""},
		{"missing flow in the upstreams' partition", addTo(missingHere), ff.ErrNotFound, missingHere.String()},
		{"missing flow in another partition", addTo(missingElsewhere), ff.ErrNotFound, missingElsewhere.String()},
	}
	for _, c := range cases {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: err = %v, want %v", c.name, c.err, c.want)
		} else if !strings.Contains(c.err.Error(), c.msg) {
			t.Errorf("%s: err = %v, want it to say %q", c.name, c.err, c.msg)
		}
	}
	f.WantState(ids[0], stWaiting)
	var edges int
	if err := f.db.Pool.QueryRow(f.ctx, `SELECT count(*) FROM ff_edge`).Scan(&edges); err != nil || edges != 2 {
		t.Fatalf("edges = %d, %v; want the 2 valid ones", edges, err)
	}
	if _, err := f.st.Create(f.ctx, executions.CreateParams{FlowID: uuid.New(), Lane: "x"}); !errors.Is(err, ff.ErrNotFound) {
		t.Errorf("create in a missing flow: %v", err)
	}
}

// Completion events written without a Cascader (plain SQL, or a Store
// without one) are dispatched once by DispatchCompletion.
func TestDispatchUndispatchedCompletion(t *testing.T) {
	t.Parallel()
	f := newFlowFixture(t)
	flow := f.Flow()
	ups := f.members(flow, "a")
	down := f.Create(executions.CreateParams{FlowID: flow, Lane: "down"})
	if err := f.st.AddDependencies(f.ctx, executions.DependencyParams{FlowID: flow, Downstream: down, Upstreams: ups}); err != nil {
		t.Fatal(err)
	}
	// An upstream engine finishes a by plain SQL, with the seed's columns.
	if _, err := f.db.Pool.Exec(f.ctx, `UPDATE ff_exec_core SET lifecycle_phase = 'terminal', public_state = 'completed'
		WHERE execution_id = $1`, ups[0].UUID); err != nil {
		t.Fatal(err)
	}
	var eventID int64
	if err := f.db.Pool.QueryRow(f.ctx, `INSERT INTO ff_completion_event (partition_key, execution_id, flow_id, outcome, namespace, instance_tag, occurred_at_ms)
		VALUES ($1, $2, $3, 'success', NULL, NULL, 1) RETURNING event_id`, ups[0].Partition, ups[0].UUID, flow).Scan(&eventID); err != nil {
		t.Fatal(err)
	}
	dispatch := func() actions.Outcome {
		return f.action(func(tx pgx.Tx) (actions.Outcome, error) {
			return actions.Of(f.st.Pipeline()).DispatchCompletion(f.ctx, tx, eventID)
		})
	}
	if got := dispatch(); got != actions.Processed {
		t.Fatalf("dispatch = %q", got)
	}
	if got := dispatch(); got != actions.NoOp {
		t.Fatalf("second dispatch = %q, want no_op", got)
	}
	if got := f.drain(); !slices.Equal(got, []actions.Outcome{actions.Processed}) {
		t.Fatalf("hops = %v", got)
	}
	f.WantState(down, stWaiting)
}

// A hop whose group row is locked elsewhere fails fast with a transient
// error (its job retries) while the other hops of the same completion go
// through; once the lock is gone the stuck hop applies.
func TestFlowStuckHopDoesNotStrandOthers(t *testing.T) {
	t.Parallel()
	f := newFlowFixture(t)
	flow := f.Flow()
	up := f.members(flow, "up")
	d1 := f.Create(executions.CreateParams{FlowID: flow, Lane: "d1"})
	d2 := f.Create(executions.CreateParams{FlowID: flow, Lane: "d2"})
	for _, d := range []ff.ExecutionID{d1, d2} {
		if err := f.st.AddDependencies(f.ctx, executions.DependencyParams{FlowID: flow, Downstream: d, Upstreams: up}); err != nil {
			t.Fatal(err)
		}
	}
	f.finish("up", true)
	hops := f.q.take()
	if len(hops) != 2 {
		t.Fatalf("hops = %d, want 2", len(hops))
	}
	blocker, err := f.db.Pool.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Rollback(f.ctx)
	if _, err := blocker.Exec(f.ctx, `SELECT 1 FROM ff_edge_group WHERE downstream_eid = $1 FOR UPDATE`, d1.UUID); err != nil {
		t.Fatal(err)
	}
	for _, h := range hops {
		err := f.InTx(func(tx pgx.Tx) error {
			_, err := actions.Of(f.st.Pipeline()).Advance(f.ctx, tx, h)
			return err
		})
		switch h.Downstream {
		case d1.UUID:
			if !errors.Is(err, ff.ErrUnavailable) {
				t.Fatalf("hop on the locked group: err = %v, want a transient ff.ErrUnavailable", err)
			}
		case d2.UUID:
			if err != nil {
				t.Fatalf("hop on the free group: %v", err)
			}
		}
	}
	f.WantState(d2, stWaiting)
	f.WantState(d1, stBlocked)
	if err := blocker.Rollback(f.ctx); err != nil {
		t.Fatal(err)
	}
	for _, h := range hops {
		if h.Downstream == d1.UUID {
			if got := f.advance(h); got != actions.Processed {
				t.Fatalf("retried hop = %q", got)
			}
		}
	}
	f.WantState(d1, stWaiting)
}

// A 50-way fan-out: each hop is its own short transaction, and none leaves
// a lock on ff_edge_group behind.
func TestFlowFanOutLeavesNoLocks(t *testing.T) {
	t.Parallel()
	f := newFlowFixture(t)
	flow := f.Flow()
	up := f.members(flow, "up")
	var downs []ff.ExecutionID
	for range 50 {
		d := f.Create(executions.CreateParams{FlowID: flow, Lane: "fan"})
		if err := f.st.AddDependencies(f.ctx, executions.DependencyParams{FlowID: flow, Downstream: d, Upstreams: up}); err != nil {
			t.Fatal(err)
		}
		downs = append(downs, d)
	}
	f.finish("up", true)
	if got := f.drain(); len(got) != 50 {
		t.Fatalf("hops applied = %d, want 50", len(got))
	}
	for _, d := range downs {
		f.WantState(d, stWaiting)
	}
	var locks int
	if err := f.db.Pool.QueryRow(f.ctx, `SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
		WHERE c.relname = 'ff_edge_group' AND c.relnamespace = current_schema()::regnamespace AND l.pid <> pg_backend_pid()`).Scan(&locks); err != nil {
		t.Fatal(err)
	}
	if locks != 0 {
		t.Fatalf("%d locks on ff_edge_group remain", locks)
	}
}

// The hop is in the data: whoever makes an upstream terminal (the store, or
// plain SQL) marks its uncounted edges with the time (the trigger of
// migration 0004), and counting the hop takes the edge out of what is due.
// A hop whose group row is gone still records its outcome on the edge, so
// the edge does not stay due forever.
func TestFlowEdgesOfTerminalUpstreamsAreDue(t *testing.T) {
	t.Parallel()
	f := newFlowFixture(t)
	flow := f.Flow()
	ups := f.members(flow, "a", "b", "c")
	down := f.Create(executions.CreateParams{FlowID: flow, Lane: "down"})
	orphan := f.Create(executions.CreateParams{FlowID: flow, Lane: "orphan"})
	if err := f.st.AddDependencies(f.ctx, executions.DependencyParams{FlowID: flow, Downstream: down, Upstreams: ups[:2]}); err != nil {
		t.Fatal(err)
	}
	if err := f.st.AddDependencies(f.ctx, executions.DependencyParams{FlowID: flow, Downstream: orphan, Upstreams: ups[2:]}); err != nil {
		t.Fatal(err)
	}
	marked := func(up ff.ExecutionID) (at *int64, outcome *string) {
		t.Helper()
		if err := f.db.Pool.QueryRow(f.ctx, `SELECT upstream_terminal_at_ms, upstream_outcome FROM ff_edge WHERE upstream_eid = $1`, up.UUID).
			Scan(&at, &outcome); err != nil {
			t.Fatal(err)
		}
		return at, outcome
	}
	if at, _ := marked(ups[0]); at != nil {
		t.Fatalf("edge of a running upstream marked terminal at %d", *at)
	}
	f.finish("a", true)
	if at, outcome := marked(ups[0]); at == nil || *at != t0 || outcome != nil {
		t.Fatalf("after the store completed a: edge marked at %v with outcome %v, want %d and none yet", at, outcome, t0)
	}
	if _, err := f.db.Pool.Exec(f.ctx, `UPDATE ff_exec_core SET lifecycle_phase = 'terminal', public_state = 'failed' WHERE execution_id = $1`, ups[1].UUID); err != nil {
		t.Fatal(err)
	}
	if at, _ := marked(ups[1]); at == nil {
		t.Fatal("after plain SQL made b terminal: edge not marked")
	}
	// a's hop counts it; b's was never enqueued (plain SQL): its edge is
	// still due, with b's outcome readable from b.
	if got := f.drain(); !slices.Equal(got, []actions.Outcome{actions.Processed}) {
		t.Fatalf("hops = %v", got)
	}
	if _, outcome := marked(ups[0]); outcome == nil || *outcome != ff.OutcomeSuccess {
		t.Fatalf("a's edge outcome = %v, want success", outcome)
	}
	if _, outcome := marked(ups[1]); outcome != nil {
		t.Fatalf("b's edge outcome = %v before its hop", outcome)
	}
	if got := f.advance(actions.Hop{Upstream: ups[1], FlowID: flow, Downstream: down.UUID, Outcome: actions.OutcomeOf("failed")}); got != actions.Processed {
		t.Fatalf("b's hop = %q", got)
	}
	f.WantState(down, state{"terminal", "unowned", "not_applicable", "attempt_terminal", "skipped"})

	// The orphan's group is deleted by hand: its hop records the outcome
	// and reports orphaned.
	if _, err := f.db.Pool.Exec(f.ctx, `DELETE FROM ff_edge_group WHERE downstream_eid = $1`, orphan.UUID); err != nil {
		t.Fatal(err)
	}
	f.finish("c", true)
	if got := f.drain(); !slices.Equal(got, []actions.Outcome{actions.Orphaned}) {
		t.Fatalf("hops = %v, want orphaned", got)
	}
	if _, outcome := marked(ups[2]); outcome == nil {
		t.Fatal("the orphaned hop left its edge without an outcome: it would stay due forever")
	}
}

// An edge written by hand after its upstream became terminal is due at once
// (migration 0008): before, it had no mark and no outcome, so its hop was
// never enqueued and its downstream waited forever.
func TestHandInsertedEdgeOfTerminalUpstreamIsDue(t *testing.T) {
	t.Parallel()
	f := newFlowFixture(t)
	flow := f.Flow()
	ups := f.members(flow, "a")
	down := f.Create(executions.CreateParams{FlowID: flow, Lane: "down"})
	f.finish("a", true)
	if _, err := f.db.Pool.Exec(f.ctx, `INSERT INTO ff_edge (partition_key, flow_id, edge_id, upstream_eid, downstream_eid)
		VALUES ($1, $2, gen_random_uuid(), $3, $4)`, down.Partition, flow, ups[0].UUID, down.UUID); err != nil {
		t.Fatal(err)
	}
	var at *int64
	if err := f.db.Pool.QueryRow(f.ctx, `SELECT upstream_terminal_at_ms FROM ff_edge WHERE upstream_eid = $1`, ups[0].UUID).Scan(&at); err != nil {
		t.Fatal(err)
	}
	if at == nil || *at != t0 {
		t.Fatalf("hand-inserted edge of a terminal upstream marked at %v, want its terminal time %d", at, t0)
	}
}
