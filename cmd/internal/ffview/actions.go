package ffview

import (
	"errors"
	"net/http"
	"net/url"
	"strings"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
)

// maxFormBytes bounds an action's form.
const maxFormBytes = 16 << 10

// action is an operator action on one execution: cancel or revoke.
type action struct {
	// Name is the path segment and the word on the page.
	Name string
	// Title of the confirmation page; Explain says what the action does.
	Title, Explain string
	// Button is the confirming button's text; Done the notice afterwards.
	Button, Done string
	// allowed reports whether the execution is in a state the action
	// applies to (the page then offers it; the store decides).
	allowed func(e *executions.Execution, nowMs int64) bool
	// apply runs the action through the store, fenced, with its events.
	apply func(r *http.Request, st *executions.Store, id ff.ExecutionID, reason, by string) error
}

// actions are the operator actions the view offers, by path segment.
var actions = map[string]action{
	"cancel": {
		Name: "cancel", Title: "Cancel execution", Button: "Cancel the execution", Done: "cancelled",
		Explain: "The execution becomes terminal cancelled. A lease it holds is fenced (its epoch moves on), so its " +
			"worker can no longer renew or complete it; a completion event \"cancelled\" (and a lease event \"revoked\" " +
			"when it was leased) is written in the same transaction, and a flow member's cascade follows.",
		allowed: func(e *executions.Execution, _ int64) bool { return !ff.IsTerminalPhase(e.LifecyclePhase) },
		apply: func(r *http.Request, st *executions.Store, id ff.ExecutionID, reason, by string) error {
			return st.Cancel(r.Context(), id, executions.CancelParams{Reason: reason, By: by})
		},
	},
	"revoke": {
		Name: "revoke", Title: "Revoke the lease", Button: "Revoke the lease", Done: "revoked",
		Explain: "The lease is taken away from its worker: fenced (epoch + 1), the execution is waiting and " +
			"eligible again, no retry is spent, and a lease event \"revoked\" is written.",
		allowed: func(e *executions.Execution, _ int64) bool { return leaseLive(e) },
		apply: func(r *http.Request, st *executions.Store, id ff.ExecutionID, reason, _ string) error {
			return st.Revoke(r.Context(), id, reason)
		},
	},
}

// leaseLive reports whether e's current attempt holds a lease.
func leaseLive(e *executions.Execution) bool {
	a := e.Attempt
	return e.LifecyclePhase == ff.PhaseActive && a != nil && a.LeaseExpiresAtMs != nil && a.TerminalAtMs == nil
}

// confirmPage is the data of templates/confirm.html.
type confirmPage struct {
	Action action
	E      *executions.Execution
	// Allowed is false when the execution is not in a state the action
	// applies to: the page says so instead of offering the button.
	Allowed bool
}

// confirm serves GET /ff/executions/{id}/{action}: the confirmation form.
func (v *View) confirm(a action) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, _, err := v.pathID(r)
		if err != nil {
			v.failErr(w, r, err)
			return
		}
		e, err := v.store.Get(r.Context(), id)
		if err != nil {
			v.failErr(w, r, err)
			return
		}
		v.render(w, r, http.StatusOK, "confirm", "executions", a.Title+" "+id.String(),
			confirmPage{Action: a, E: e, Allowed: a.allowed(e, v.store.NowMs())})
	}
}

// act serves POST /ff/executions/{id}/{action}: the form of the
// confirmation page (fields confirm=yes and an optional reason; anything
// else answers 400). It applies the action through the store and redirects
// (303) to the execution's page, which says what was done. An execution
// not in a state the action applies to answers 409 with the store's reason.
//
// The post reaches the view only past uiserver.Guard: a form post must
// carry the browser's same-origin attestation (Origin or Sec-Fetch-Site).
// The cancel is recorded as cancelled_by "execution view", with the basic
// auth user when there is one.
func (v *View) act(a action) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, _, err := v.pathID(r)
		if err != nil {
			v.failErr(w, r, err)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
		if err := r.ParseForm(); err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				v.fail(w, r, http.StatusRequestEntityTooLarge, "the form is larger than 16 KiB")
				return
			}
			v.failErr(w, r, ff.Validationf("form", "%v", err))
			return
		}
		if err := checkValues(r.PostForm, "form", "field", "confirm", "reason"); err != nil {
			v.failErr(w, r, err)
			return
		}
		if r.PostForm.Get("confirm") != "yes" {
			v.failErr(w, r, ff.Validationf("confirm", "the %s was not confirmed: send confirm=yes, as the confirmation page's form does", a.Name))
			return
		}
		by := "execution view"
		if user, _, ok := r.BasicAuth(); ok && user != "" {
			by += " (" + user + ")"
		}
		if err := a.apply(r, v.store, id, strings.TrimSpace(r.PostForm.Get("reason")), by); err != nil {
			v.failErr(w, r, err)
			return
		}
		v.log.Info("ffview: operator action", "action", a.Name, "execution", id.String(), "by", by)
		http.Redirect(w, r, "/ff/executions/"+url.PathEscape(id.String())+"?done="+a.Done, http.StatusSeeOther)
	}
}
