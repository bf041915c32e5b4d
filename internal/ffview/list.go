package ffview

import (
	"net/http"
	"strconv"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/google/uuid"
)

// DefaultPageSize is the executions listed per page unless ?limit= says;
// MaxPageSize is the most one page lists (a larger limit answers 400).
const (
	DefaultPageSize = 50
	MaxPageSize     = 400
)

// listPage is the data of templates/executions.html.
type listPage struct {
	Filter     listFilter
	States     []string
	Executions []*executions.Execution
}

// listFilter is the list's query string as given.
type listFilter struct {
	Namespace, Lane, State, Flow string
	Limit                        int
}

// executionsList serves GET /ff/executions.
func (v *View) executionsList() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q, err := query(r, "namespace", "lane", "state", "flow", "limit")
		if err != nil {
			v.failErr(w, r, err)
			return
		}
		f := listFilter{Namespace: q.Get("namespace"), Lane: q.Get("lane"), State: q.Get("state"), Flow: q.Get("flow"), Limit: DefaultPageSize}
		p := executions.ListParams{Namespace: f.Namespace, Lane: f.Lane, State: f.State}
		if s := q.Get("limit"); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 || n > MaxPageSize {
				v.failErr(w, r, ff.Validationf("limit", "%q is not a page size in 1..%d", s, MaxPageSize))
				return
			}
			f.Limit = n
		}
		p.Limit = f.Limit
		if f.Flow != "" {
			u, err := uuid.Parse(f.Flow)
			if err != nil {
				v.failErr(w, r, ff.Validationf("flow", "%q is not a flow UUID", f.Flow))
				return
			}
			p.FlowID = u
		}
		es, err := v.store.List(r.Context(), p)
		if err != nil {
			v.failErr(w, r, err)
			return
		}
		v.render(w, r, http.StatusOK, "executions", "executions", "Executions",
			listPage{Filter: f, States: executions.PublicStates(), Executions: es})
	}
}
