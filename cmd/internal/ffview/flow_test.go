package ffview_test

import (
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/google/uuid"
)

// TestFlowPage lays out a flow of 54 executions with the pipeline running:
// a root fanning out to 50 members, all joined by a quorum of 2 that
// cancels the rest once satisfied, and a member whose only upstream
// failed (its group impossible). The page draws every execution once,
// without two boxes in one place, marks the cancelled siblings, and lists
// each group's policy and state.
func TestFlowPage(t *testing.T) {
	t.Parallel()
	e := newPipelineEnv(t)
	flow, err := e.store.CreateFlow(e.ctx, uuid.Nil)
	if err != nil {
		t.Fatal(err)
	}
	dep := func(down ff.ExecutionID, p executions.EdgePolicy, ups ...ff.ExecutionID) {
		t.Helper()
		if err := e.store.AddDependencies(e.ctx, executions.DependencyParams{FlowID: flow, Downstream: down, Upstreams: ups, Policy: p}); err != nil {
			t.Fatal(err)
		}
	}
	root := e.Create(executions.CreateParams{Lane: "root", FlowID: flow})
	var fan []ff.ExecutionID
	for range 50 {
		f := e.Create(executions.CreateParams{Lane: "fan", FlowID: flow})
		dep(f, executions.AllOf(), root)
		fan = append(fan, f)
	}
	join := e.Create(executions.CreateParams{Lane: "join", FlowID: flow})
	dep(join, executions.Quorum(2, executions.CancelRemaining), fan...)
	doomed := e.Create(executions.CreateParams{Lane: "doomed", FlowID: flow})
	never := e.Create(executions.CreateParams{Lane: "never", FlowID: flow})
	dep(never, executions.AllOf(), doomed)

	// complete claims the one execution the lane offers and completes it,
	// returning which one it was: among the 50 equal fan members, a claim
	// promises no order.
	complete := func(lane string) ff.ExecutionID {
		t.Helper()
		l := e.leaseOn(lane, "wk", time.Hour)
		if err := e.store.Complete(e.ctx, l, nil); err != nil {
			t.Fatal(err)
		}
		return l.ID
	}
	complete("root")
	for _, f := range fan {
		e.AwaitPublicState(f, ff.PublicWaiting)
	}
	completed := map[ff.ExecutionID]bool{}
	for range 2 {
		completed[complete("fan")] = true
	}
	e.AwaitPublicState(join, ff.PublicWaiting)
	if _, err := e.store.Fail(e.ctx, e.leaseOn("doomed", "wk", time.Hour), executions.FailParams{Message: "boom"}); err != nil {
		t.Fatal(err)
	}
	e.AwaitPublicState(never, ff.PublicSkipped)
	// The quorum cancels the 48 members the claims did not return.
	for _, f := range fan {
		if !completed[f] {
			e.AwaitPublicState(f, ff.PublicCancelled)
		}
	}

	r := e.get("/ff/flows/" + flow.String())
	r.want(t, http.StatusOK, `<svg id="graph"`, "quorum 2 (cancel_remaining)", "quorum 2 of 50 · satisfied · 2 ok", "all_of", "state-satisfied", "state-impossible",
		"(sibling)", "<dd>54: ", "3 completed", "48 cancelled", "1 skipped")
	nodes := regexp.MustCompile(`<a href="/ff/executions/[^"]+" class="node`).FindAllString(r.Body, -1)
	if len(nodes) != 54 {
		t.Errorf("%d nodes drawn, want 54", len(nodes))
	}
	for _, id := range append([]ff.ExecutionID{root, join, doomed, never}, fan...) {
		if !strings.Contains(r.Body, `data-id="`+id.String()+`"`) {
			t.Errorf("%s is not in the graph", id)
		}
	}
	places := map[string]bool{}
	for _, m := range regexp.MustCompile(`<rect x="(\d+)" y="(\d+)"`).FindAllStringSubmatch(r.Body, -1) {
		at := m[1] + "," + m[2]
		if places[at] {
			t.Errorf("two nodes at %s", at)
		}
		places[at] = true
	}
	if n := strings.Count(r.Body, "<path d="); n != 50+50+1 {
		t.Errorf("%d edges drawn, want 101", n)
	}
	if n := strings.Count(r.Body, "(sibling)"); n != 48 {
		t.Errorf("%d cancelled siblings marked, want 48", n)
	}
}

func TestFlowPageBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	flow, err := e.store.CreateFlow(e.ctx, uuid.Nil)
	if err != nil {
		t.Fatal(err)
	}
	e.get("/ff/flows/"+flow.String()).want(t, http.StatusOK, "No dependencies in this flow", `<svg id="graph"`)
	for target, want := range map[string]struct {
		code int
		msg  string
	}{
		"/ff/flows/not-a-flow":                   {400, "is not a flow UUID"},
		"/ff/flows/" + flow.String()[:8]:         {400, "is not a flow UUID"},
		"/ff/flows/" + uuid.NewString():          {404, "not found"},
		"/ff/flows/" + flow.String() + "?zoom=2": {400, `unknown parameter &#34;zoom&#34;`},
	} {
		e.get(target).want(t, want.code, want.msg)
	}
}
