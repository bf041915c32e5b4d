package ffview_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/jobs"
	"github.com/google/uuid"
)

// execPath is the page of an execution.
func execPath(id ff.ExecutionID) string { return "/ff/executions/" + url.PathEscape(id.String()) }

// awaitJob waits until a River job of kind completed.
func (e *env) awaitJob(kind string) {
	e.t.Helper()
	fftest.Await(e.t, 20*time.Second, kind+" job completed", func() bool {
		return e.Count(`SELECT count(*) FROM river_job WHERE kind = $1 AND state = 'completed'`, kind) > 0
	})
}

// TestExecutionPage runs the pipeline over a solo execution whose lease
// expires and a flow whose any_of group, satisfied, cancels the other
// upstream; each execution's page shows its state, attempts, timeline,
// the River jobs that acted on it (linked to River UI, with their output)
// and its edges.
func TestExecutionPage(t *testing.T) {
	t.Parallel()
	e := newPipelineEnv(t)

	// A lease that runs out: the attempt_timeout scanner's ff.expire_attempt
	// job expires it.
	x := e.Create(executions.CreateParams{Lane: "solo", Namespace: "ns-x", Payload: []byte(`{"to":"ada@example.com"}`)})
	e.leaseOn("solo", "mailer", time.Second)
	e.clock.Advance(2 * time.Second)
	e.AwaitPublicState(x, ff.PublicExpired)
	e.awaitJob(jobs.KindExpireAttempt)
	r := e.get(execPath(x))
	r.want(t, http.StatusOK, x.String(), `id="state" class="state state-expired"`, "ns-x", `{&#34;to&#34;:&#34;ada@example.com&#34;}`,
		`id="attempts"`, "mailer-1", `id="timeline"`, ">acquired<", ">expired<", `id="jobs"`, jobs.KindExpireAttempt,
		`href="/riverui/jobs/`, `&#34;outcome&#34;: &#34;processed&#34;`)
	if strings.Contains(r.Body, `id="cancel"`) || strings.Contains(r.Body, `id="revoke"`) {
		t.Error("a terminal execution offers cancel or revoke")
	}
	timeline := r.Body[strings.Index(r.Body, `id="timeline"`):]
	if i, j := strings.Index(timeline, ">acquired<"), strings.Index(timeline, ">expired<"); i > j {
		t.Error("the timeline shows the expiry before the acquisition")
	}

	// A flow: c waits for any of a and b, cancelling the rest. b succeeds,
	// so a, still running, is cancelled by the edge-cancel dispatcher.
	flow, err := e.store.CreateFlow(e.ctx, uuid.Nil)
	if err != nil {
		t.Fatal(err)
	}
	a := e.Create(executions.CreateParams{Lane: "up-a", FlowID: flow})
	b := e.Create(executions.CreateParams{Lane: "up-b", FlowID: flow})
	c := e.Create(executions.CreateParams{Lane: "down", FlowID: flow})
	if err := e.store.AddDependencies(e.ctx, executions.DependencyParams{FlowID: flow, Downstream: c, Upstreams: []ff.ExecutionID{a, b},
		Policy: executions.AnyOf(executions.CancelRemaining)}); err != nil {
		t.Fatal(err)
	}
	e.leaseOn("up-a", "wa", time.Hour)
	lb := e.leaseOn("up-b", "wb", time.Hour)
	if err := e.store.Complete(e.ctx, lb, []byte("done")); err != nil {
		t.Fatal(err)
	}
	e.AwaitPublicState(a, ff.PublicCancelled)
	e.AwaitPublicState(c, ff.PublicWaiting)
	e.awaitJob(jobs.KindCancelGroup)

	e.get(execPath(a)).want(t, http.StatusOK, `id="cancelled"`, executions.SiblingCancelReason, jobs.KindCancelGroup,
		"the siblings of downstream "+c.UUID.String(), ">revoked<", ">cancelled<", `href="/ff/flows/`+flow.String()+`"`,
		`id="downstreams"`, "any_of (cancel_remaining)", "its satisfaction cancelled this execution")
	rb := e.get(execPath(b))
	rb.want(t, http.StatusOK, ">success<", "done", jobs.KindAdvance, "its completion, cascading")
	if strings.Contains(rb.Body, "cancelled this execution") {
		t.Error("the winner's page says the group cancelled it")
	}
	r = e.get(execPath(c))
	r.want(t, http.StatusOK, `id="group"`, "any_of (cancel_remaining)", "state-satisfied", "1 succeeded",
		a.String(), b.String(), `id="cancel"`, "an upstream&#39;s completion into its edge group")
	if strings.Contains(r.Body, `id="revoke"`) {
		t.Error("an unleased execution offers revoke")
	}
}

func TestExecutionPageBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.Create(executions.CreateParams{})
	e.get(execPath(id)).want(t, http.StatusOK, id.String(), "No attempt yet", "No event in the outbox", "No River job", `id="cancel"`)
	for target, want := range map[string]struct {
		code int
		msg  string
	}{
		"/ff/executions/nonsense":                                           {400, "want the form {fp:N}:&lt;uuid&gt;"},
		"/ff/executions/%7Bfp:1%7D:not-a-uuid":                              {400, "is not a UUID"},
		"/ff/executions/%7Bfp:999%7D:" + id.UUID.String():                   {400, "partition 999 is outside this schema"},
		execPath(ff.ExecutionID{Partition: id.Partition, UUID: uuid.New()}): {404, "not found"},
		execPath(id) + "?tab=attempts":                                      {400, `unknown parameter &#34;tab&#34;`},
		execPath(id) + "/nothing":                                           {404, "no page at"},
	} {
		e.get(target).want(t, want.code, want.msg)
	}
}
