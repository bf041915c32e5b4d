package executions_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/google/uuid"
)

// Attempts lists every attempt of an execution, the retried one with its
// outcome and the current one with its lease.
func TestAttempts(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.Create(executions.CreateParams{RetryPolicy: executions.RetryPolicy{MaxRetries: 1}})
	if as, err := f.st.Attempts(f.ctx, id); err != nil || len(as) != 0 {
		t.Fatalf("before a claim: %+v, %v; want none", as, err)
	}
	l := f.ClaimOne("lane-a", time.Minute)
	if _, err := f.st.Fail(f.ctx, l, executions.FailParams{Message: "boom"}); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(time.Hour) // past any backoff
	f.ClaimOne("lane-a", time.Minute)
	as, err := f.st.Attempts(f.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(as) != 2 || as[0].Index != 0 || as[1].Index != 1 {
		t.Fatalf("attempts %+v, want indexes 0 and 1", as)
	}
	if as[0].Outcome == nil || *as[0].Outcome != "retry" || as[0].TerminalAtMs == nil {
		t.Errorf("the failed attempt: %+v", as[0])
	}
	if as[1].Outcome != nil || as[1].LeaseExpiresAtMs == nil || as[1].WorkerInstanceID == nil || *as[1].WorkerInstanceID != "w-1" {
		t.Errorf("the current attempt: %+v", as[1])
	}
	if _, err := f.st.Attempts(f.ctx, ff.ExecutionID{Partition: 30000, UUID: uuid.New()}); !errors.Is(err, ff.ErrValidation) {
		t.Errorf("a partition outside the schema: %v, want a validation error", err)
	}
}

// GetFlow reads a flow's members, edges and groups as the cascade left
// them: an any_of group satisfied by one upstream, its running sibling
// flagged for the dispatcher.
func TestGetFlow(t *testing.T) {
	t.Parallel()
	f := newFlowFixture(t)
	flow := f.Flow()
	ups := f.members(flow, "a", "b")
	down := f.Create(executions.CreateParams{FlowID: flow, Lane: "down"})
	if err := f.st.AddDependencies(f.ctx, executions.DependencyParams{FlowID: flow, Downstream: down, Upstreams: ups,
		Policy: executions.AnyOf(executions.CancelRemaining)}); err != nil {
		t.Fatal(err)
	}
	f.ClaimOne("b", time.Minute)
	f.finish("a", true)
	f.drain()

	got, err := f.st.GetFlow(f.ctx, flow)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != flow || got.Partition != ups[0].Partition || len(got.Members) != 3 || got.Truncated {
		t.Fatalf("flow %+v", got)
	}
	if len(got.Edges) != 2 {
		t.Fatalf("edges %+v, want 2", got.Edges)
	}
	for _, e := range got.Edges {
		counted := e.UpstreamOutcome != nil
		if e.Downstream != down.UUID || counted != (e.Upstream == ups[0].UUID) {
			t.Errorf("edge %+v: only a→down counted", e)
		}
	}
	if len(got.Groups) != 1 {
		t.Fatalf("groups %+v, want 1", got.Groups)
	}
	g := got.Groups[0]
	if g.Downstream != down.UUID || g.Policy != executions.AnyOf(executions.CancelRemaining) || g.State != executions.GroupSatisfied ||
		g.Success != 1 || !g.CancelPending || len(g.CancelMembers) != 1 || g.CancelMembers[0] != ups[1].UUID.String() {
		t.Errorf("group %+v", g)
	}
	if _, err := f.st.GetFlow(f.ctx, uuid.New()); !errors.Is(err, ff.ErrNotFound) {
		t.Errorf("an unknown flow: %v, want not found", err)
	}
}
