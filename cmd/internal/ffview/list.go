package ffview

import (
	"net/http"
	"net/url"
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
	// Next is the URL of the next page ("" on the last); First is the
	// first page of the same filter when this one is not it.
	Next, First string
}

// listFilter is the list's query string as given.
type listFilter struct {
	Namespace, Lane, State, Flow, ID string
	Limit                            int
}

// values is the filter as a query string (without the page position).
func (f listFilter) values() url.Values {
	q := url.Values{}
	for k, v := range map[string]string{"namespace": f.Namespace, "lane": f.Lane, "state": f.State, "flow": f.Flow, "id": f.ID} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if f.Limit != DefaultPageSize {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	return q
}

// executionsList serves GET /ff/executions: the executions, newest first,
// through executions.Store.List (whose doc comment says which index serves
// each filter). Parameters: namespace, lane, state, flow (a flow UUID), id
// (an execution id or its beginning, executions.ParseIDPrefix), limit
// (1..MaxPageSize) and after (the keyset position the "Next page" link
// carries). Anything else answers 400.
func (v *View) executionsList() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q, err := query(r, "namespace", "lane", "state", "flow", "id", "limit", "after")
		if err != nil {
			v.failErr(w, r, err)
			return
		}
		f := listFilter{Namespace: q.Get("namespace"), Lane: q.Get("lane"), State: q.Get("state"), Flow: q.Get("flow"),
			ID: q.Get("id"), Limit: DefaultPageSize}
		p := executions.ListParams{Namespace: f.Namespace, Lane: f.Lane, State: f.State}
		if s := q.Get("limit"); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 || n > MaxPageSize {
				v.failErr(w, r, ff.Validationf("limit", "%s is not a page size in 1..%d", ff.Excerpt(s), MaxPageSize))
				return
			}
			f.Limit = n
		}
		if f.Flow != "" {
			u, err := uuid.Parse(f.Flow)
			if err != nil {
				v.failErr(w, r, ff.Validationf("flow", "%s is not a flow UUID", ff.Excerpt(f.Flow)))
				return
			}
			p.FlowID = u
		}
		if f.ID != "" {
			if p.ID, err = executions.ParseIDPrefix(f.ID); err != nil {
				v.failErr(w, r, err)
				return
			}
		}
		if s := q.Get("after"); s != "" {
			if p.After, err = executions.ParseListCursor(s); err != nil {
				v.failErr(w, r, err)
				return
			}
		}
		// One more than the page shows: whether there is a next page.
		p.Limit = f.Limit + 1
		es, err := v.store.List(r.Context(), p)
		if err != nil {
			v.failErr(w, r, err)
			return
		}
		page := listPage{Filter: f, States: executions.PublicStates(), Executions: es}
		if len(es) > f.Limit {
			page.Executions = es[:f.Limit]
			next := f.values()
			next.Set("after", executions.ListCursorOf(es[f.Limit-1]).String())
			page.Next = "/ff/executions?" + next.Encode()
		}
		if p.After != nil {
			page.First = "/ff/executions"
			if first := f.values().Encode(); first != "" {
				page.First += "?" + first
			}
		}
		v.render(w, r, http.StatusOK, "executions", "executions", "Executions", page)
	}
}
