package ffview

import (
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"

	"github.com/ffriver/ffriver/ff"
)

// query returns r's query parameters, refusing (with a validation error
// naming it) a parameter not in allowed or given more than once: a
// misspelt filter must not silently list everything.
func query(r *http.Request, allowed ...string) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, ff.Validationf("query", "%v", err)
	}
	return q, checkValues(q, "query", "parameter", allowed...)
}

// checkValues refuses a key of vals (a query string or a form: what, whose
// keys are called kind) not in allowed, or given more than once.
func checkValues(vals url.Values, what, kind string, allowed ...string) error {
	keys := make([]string, 0, len(vals))
	for k := range vals {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !slices.Contains(allowed, k) {
			want := "none"
			if len(allowed) > 0 {
				want = strings.Join(allowed, ", ")
			}
			return ff.Validationf(what, "unknown %s %s: want %s", kind, ff.Excerpt(k), want)
		}
		if len(vals[k]) > 1 {
			return ff.Validationf(k, "given %d times: want it once", len(vals[k]))
		}
	}
	return nil
}
