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
	keys := make([]string, 0, len(q))
	for k := range q {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !slices.Contains(allowed, k) {
			return nil, ff.Validationf("query", "unknown parameter %q: want %s", k, strings.Join(allowed, ", "))
		}
		if len(q[k]) > 1 {
			return nil, ff.Validationf(k, "given %d times: want it once", len(q[k]))
		}
	}
	return q, nil
}
