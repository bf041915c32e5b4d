package ffview

import (
	"net/http"
)

// routes registers every route of the view on mux: the one place the URL
// space is laid out. A page in a file of its own registers here with one
// line, mux.Handle("GET /ff/NAME", v.NAME()), and renders with v.render.
func (v *View) routes(mux *http.ServeMux) {
	mux.Handle("GET /ff/{$}", http.RedirectHandler("/ff/executions", http.StatusFound))
	mux.Handle("GET /ff/assets/", http.StripPrefix("/ff/", http.FileServerFS(assetFS)))
	mux.Handle("GET /ff/executions", v.executionsList())
	mux.Handle("GET /ff/executions/{id}", v.execution())
	mux.Handle("GET /ff/flows/{flow}", v.flow())
	for name, a := range actions {
		mux.Handle("GET /ff/executions/{id}/"+name, v.confirm(a))
		mux.Handle("POST /ff/executions/{id}/"+name, v.act(a))
	}
	mux.Handle("GET /ff/live", v.livePageHandler())
	mux.Handle("GET /ff/live/leases", v.liveLeases())
	mux.Handle("GET /ff/live/completions", v.liveCompletions())
	mux.Handle("GET /ff/live/backlog", v.liveBacklog())
	// Anything else under /ff/ is an unknown page, or a method a page does
	// not take: a 404 or 405 in the layout, not the mux's plain text.
	mux.HandleFunc("/ff/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			get := r.Clone(r.Context())
			get.Method = http.MethodGet
			if _, pattern := mux.Handler(get); pattern != "/ff/" {
				w.Header().Set("Allow", "GET, HEAD")
				v.fail(w, r, http.StatusMethodNotAllowed, r.Method+" is not an action on "+r.URL.Path+": it is a page to GET")
				return
			}
		}
		v.fail(w, r, http.StatusNotFound, "no page at "+r.URL.Path)
	})
}
