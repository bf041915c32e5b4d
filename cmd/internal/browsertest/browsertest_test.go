package browsertest_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/ffriver/ffriver/cmd/internal/browsertest"
)

// TestBrowserRendersAndKeepsScreenshots: the headless browser loads a page
// from a local server, a script on it runs, and the screenshot is kept.
func TestBrowserRendersAndKeepsScreenshots(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(`<!doctype html><title>t</title><p id="out">waiting</p>
<script>document.getElementById("out").textContent = "ran " + location.pathname;</script>`))
	}))
	defer srv.Close()

	b := browsertest.New(t, nil)
	b.Run("open", chromedp.Navigate(srv.URL+"/x"), chromedp.WaitVisible(chromedp.ID("out")))
	text, err := chromedp.Run(b.Ctx, chromedp.Text(chromedp.ID("out")))
	if err != nil {
		t.Fatal(err)
	}
	if text != "ran /x" {
		t.Fatalf("page text %q, want the script's %q", text, "ran /x")
	}
	b.Screenshot("page", "")
	shots, err := filepath.Glob(filepath.Join(b.Dir(), "*-page.png"))
	if err != nil {
		t.Fatal(err)
	}
	if len(shots) != 1 {
		t.Fatalf("screenshots in %s: %v, want one *-page.png", b.Dir(), shots)
	}
	if st, err := os.Stat(shots[0]); err != nil || st.Size() < 100 {
		t.Fatalf("screenshot %s: %v, %v", shots[0], st, err)
	}
}
