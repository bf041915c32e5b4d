package uiserver_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/ffriver/ffriver/cmd/internal/uiserver"
	"github.com/ffriver/ffriver/executions"
)

// TestViewServedBesideRiverUI serves River UI and the execution view on one
// listener, behind one Guard and basic auth: both answer with credentials,
// neither without, and a form post to the view from another page, or one
// without the browser's same-origin attestation, is refused, while the
// view's own confirmation form cancels.
func TestViewServedBesideRiverUI(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv, st := serveView(t, uiserver.Options{User: "ada", Password: "pw"})
	id, err := st.Create(ctx, executions.CreateParams{Lane: "lane-a"})
	if err != nil {
		t.Fatal(err)
	}
	if want := srv.URL + "ff/executions"; srv.ViewURL != want {
		t.Fatalf("ViewURL %q, want %q", srv.ViewURL, want)
	}
	host := strings.TrimSuffix(strings.TrimPrefix(srv.URL, "http://"), "/")

	send := func(method, path string, auth bool, header map[string]string, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, method, srv.URL+strings.TrimPrefix(path, "/"), strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if auth {
			req.SetBasicAuth("ada", "pw")
		}
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	if code, body := send("GET", "/ff/executions", true, nil, ""); code != http.StatusOK || !strings.Contains(body, id.String()) {
		t.Fatalf("GET /ff/executions with credentials: %d, want 200 listing %s: %.300s", code, id, body)
	}
	if code, _ := send("GET", "/ff/executions", false, nil, ""); code != http.StatusUnauthorized {
		t.Errorf("GET /ff/executions without credentials: %d, want 401", code)
	}
	if code, _ := send("GET", "/", true, nil, ""); code != http.StatusOK {
		t.Errorf("River UI beside the view: %d, want 200", code)
	}
	form := url.Values{"confirm": {"yes"}}.Encode()
	formCT := map[string]string{"Content-Type": "application/x-www-form-urlencoded"}
	for name, h := range map[string]map[string]string{
		"no browser attestation": formCT,
		"another site's page":    {"Content-Type": formCT["Content-Type"], "Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"},
		"a sibling site's page":  {"Content-Type": formCT["Content-Type"], "Sec-Fetch-Site": "same-site"},
	} {
		code, body := send("POST", "/ff/executions/"+url.PathEscape(id.String())+"/cancel", true, h, form)
		if code != http.StatusForbidden {
			t.Errorf("%s: form post answered %d, want 403: %s", name, code, body)
		}
	}
	if code, body := send("POST", "/ff/executions", true, map[string]string{"Content-Type": formCT["Content-Type"]}, form); code != http.StatusForbidden ||
		!strings.Contains(body, "Origin: http://"+host) {
		t.Errorf("a form post without Origin: %d %q, want 403 naming the Origin to send", code, body)
	}
	got, err := st.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if got.PublicState != "waiting" {
		t.Errorf("after the refused posts the execution is %s, want waiting", got.PublicState)
	}
	// The view's own confirmation page: the browser says the post is
	// same-origin, the cancel goes through, and the redirect shows it.
	code, body := send("POST", "/ff/executions/"+url.PathEscape(id.String())+"/cancel", true,
		map[string]string{"Content-Type": formCT["Content-Type"], "Origin": "http://" + host, "Sec-Fetch-Site": "same-origin"}, form)
	if code != http.StatusOK || !strings.Contains(body, "was cancelled") {
		t.Errorf("the view's own form post: %d, want the execution's page saying it was cancelled: %.300s", code, body)
	}
	if got, err = st.Get(ctx, id); err != nil || got.PublicState != "cancelled" {
		t.Errorf("after the view's own post: %v, %v; want cancelled", got.PublicState, err)
	}
}
