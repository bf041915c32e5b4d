package ffview_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/google/uuid"
)

// TestCancelAction: the execution page offers cancel, the confirmation page
// posts it, and afterwards the execution is cancelled, its lease fenced,
// and both events are on its timeline; a second cancel is a 409.
func TestCancelAction(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.Create(executions.CreateParams{Lane: "lane-c"})
	e.leaseOn("lane-c", "wk", time.Minute)
	page := execPath(id)

	e.get(page).want(t, http.StatusOK, `id="cancel" href="/ff/executions/%7bfp:`, `id="revoke"`)
	e.get(page+"/cancel").want(t, http.StatusOK, `method="post" action="/ff/executions/%7bfp:`, `id="confirm"`, "wk-1", "fenced")

	e.post(page+"/cancel", url.Values{}).want(t, http.StatusBadRequest, "not confirmed")
	e.post(page+"/cancel", url.Values{"confirm": {"yes"}, "force": {"1"}}).want(t, http.StatusBadRequest, `unknown field &#34;force&#34;`)
	e.post(page+"/cancel", url.Values{"confirm": {"yes"}, "reason": {strings.Repeat("r", 2000)}}).want(t, http.StatusBadRequest, "reason")
	big := e.post(page+"/cancel", url.Values{"confirm": {"yes"}, "reason": {strings.Repeat("r", 20000)}})
	big.want(t, http.StatusRequestEntityTooLarge, "larger than 16 KiB")
	if x, _ := e.store.Get(e.ctx, id); x.PublicState != ff.PublicActive {
		t.Fatalf("refused posts changed the execution: %s", x.PublicState)
	}

	r := e.post(page+"/cancel", url.Values{"confirm": {"yes"}, "reason": {"stuck on a dead host"}})
	if r.Code != http.StatusSeeOther || r.Loc != "/ff/executions/"+url.PathEscape(id.String())+"?done=cancelled" {
		t.Fatalf("cancel: %d to %q, want 303 to the execution's page: %s", r.Code, r.Loc, r.Body)
	}
	r = e.get(r.Loc)
	r.want(t, http.StatusOK, `id="done"`, "was cancelled", `class="state state-cancelled"`, "stuck on a dead host by execution view")
	timeline := r.Body[strings.Index(r.Body, `id="timeline"`):]
	for _, ev := range []string{">acquired<", ">revoked<", ">cancelled<"} {
		if !strings.Contains(timeline, ev) {
			t.Errorf("the timeline lacks %s", ev)
		}
	}
	if strings.Contains(r.Body, `id="cancel"`) {
		t.Error("a cancelled execution still offers cancel")
	}
	x, err := e.store.Get(e.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if x.PublicState != ff.PublicCancelled || x.Attempt == nil || x.Attempt.Epoch != 2 {
		t.Errorf("after the cancel: %s, attempt %+v; want cancelled with the lease fenced (epoch 2)", x.PublicState, x.Attempt)
	}
	e.post(page+"/cancel", url.Values{"confirm": {"yes"}}).want(t, http.StatusConflict, "already terminal")
	e.get(page+"/cancel").want(t, http.StatusOK, `id="not-allowed"`)
}

// TestRevokeAction: revoke fences the lease and puts the execution back to
// waiting with a revoked event; revoking again is a 409.
func TestRevokeAction(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.Create(executions.CreateParams{Lane: "lane-r"})
	e.leaseOn("lane-r", "wk", time.Minute)
	page := execPath(id)
	r := e.post(page+"/revoke", url.Values{"confirm": {"yes"}, "reason": {"rebalancing"}})
	if r.Code != http.StatusSeeOther {
		t.Fatalf("revoke: %d: %s", r.Code, r.Body)
	}
	r = e.get(r.Loc)
	r.want(t, http.StatusOK, "was revoked", `class="state state-waiting"`, ">revoked<")
	if strings.Contains(r.Body, `id="revoke"`) {
		t.Error("an unleased execution still offers revoke")
	}
	e.post(page+"/revoke", url.Values{"confirm": {"yes"}}).want(t, http.StatusConflict, "holds no lease")
	e.get(page+"/revoke").want(t, http.StatusOK, "holds no lease", `id="not-allowed"`)
}

func TestActionsBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	id := e.Create(executions.CreateParams{})
	unknown := execPath(ff.ExecutionID{Partition: id.Partition, UUID: uuid.New()})
	yes := url.Values{"confirm": {"yes"}}
	e.post("/ff/executions/nonsense/cancel", yes).want(t, http.StatusBadRequest, "want the form {fp:N}")
	e.post(unknown+"/cancel", yes).want(t, http.StatusNotFound, "not found")
	e.post(unknown+"/revoke", yes).want(t, http.StatusNotFound, "not found")
	e.get(unknown+"/cancel").want(t, http.StatusNotFound, "not found")
	e.post(execPath(id)+"/cancel?now=1", yes).want(t, http.StatusBadRequest, `unknown parameter &#34;now&#34;`)
	e.post(execPath(id)+"/delete", yes).want(t, http.StatusNotFound, "no page at")
	e.get(execPath(id)+"?done=deleted").want(t, http.StatusOK)
}
