package ffview_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/ffriver/ffriver"
	"github.com/ffriver/ffriver/cmd/internal/browsertest"
	"github.com/ffriver/ffriver/cmd/internal/ffview"
	"github.com/ffriver/ffriver/cmd/internal/uiserver"
	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/internal/pipeline"
	"github.com/google/uuid"
)

// browserSite is the view served as ffscheduler serves it: a scheduler
// process (River leader with scan and apply workers, so leases expire and
// flows cascade) and River UI with the view on one listener.
type browserSite struct {
	*fftest.Kit // on the service's store, its Await methods waiting 30 s
	t           *testing.T
	store       *executions.Store
	url         string // River UI's root; the view is under ff/
}

func startBrowserSite(t *testing.T) *browserSite {
	t.Helper()
	ctx := t.Context()
	s := fftest.NewSchema(t, &fftest.Options{MaxConns: 12})
	logger := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	svc, err := ffriver.New(ctx, s.Pool, ffriver.Config{Schema: s.Name})
	if err != nil {
		t.Fatal(err)
	}
	p, err := svc.NewProcess(ctx, ffriver.ProcessOptions{Role: ffriver.Scheduler, ShutdownTimeout: 10 * time.Second,
		Client: ffriver.ClientOptions{ScanWorkers: 2, ApplyWorkers: 2, TestOnly: true, Logger: logger}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop() })
	view, err := ffview.New(svc.Store(), ffview.Options{Pipeline: pipeline.Of(svc), Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := uiserver.Start(p.Context(), p.Client(), uiserver.Options{Addr: "127.0.0.1:0", View: view, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	k := fftest.On(t, s, svc.Store(), nil)
	k.Within = 30 * time.Second
	return &browserSite{Kit: k, t: t, store: svc.Store(), url: srv.URL}
}

// claim leases the one execution waiting on lane.
func (s *browserSite) claim(lane, worker string, ttl time.Duration) executions.Lease {
	s.t.Helper()
	return s.ClaimOneWith(executions.ClaimParams{Lane: lane, WorkerID: worker, WorkerInstanceID: worker, LeaseTTL: ttl})
}

// seeded are the executions the browser test looks at.
type seeded struct {
	expired, done, victim ff.ExecutionID
	flow                  uuid.UUID
	first, sibling, merge ff.ExecutionID
	billing               int // executions in namespace billing
}

// seed makes executions an operator would look at: an expired lease, a
// completed execution with a renewal, a flow whose any-of group was
// satisfied and cancelled its remaining sibling, some waiting ones.
func (s *browserSite) seed() seeded {
	t, ctx := s.t, s.t.Context()
	var d seeded
	d.expired = s.Create(executions.CreateParams{Namespace: "billing", Lane: "invoices"})
	s.claim("invoices", "invoicer-1", time.Second)
	d.done = s.Create(executions.CreateParams{Namespace: "billing", Lane: "receipts"})
	l := s.claim("receipts", "mailer-2", time.Minute)
	l, err := s.store.Renew(ctx, l, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.store.Complete(ctx, l, []byte(`{"sent":true}`)); err != nil {
		t.Fatal(err)
	}
	d.billing = 2
	for i := range 4 {
		s.Create(executions.CreateParams{Namespace: "billing", Lane: "invoices", Priority: int32(i)})
		d.billing++
	}
	for i := range 6 {
		s.Create(executions.CreateParams{Namespace: "ops", Lane: "reports-" + strconv.Itoa(i%2)})
	}
	d.victim = s.Create(executions.CreateParams{Namespace: "ops", Lane: "cleanup"})

	if d.flow, err = s.store.CreateFlow(ctx, uuid.Nil); err != nil {
		t.Fatal(err)
	}
	var ups []ff.ExecutionID
	for i := range 3 {
		ups = append(ups, s.Create(executions.CreateParams{FlowID: d.flow, Namespace: "search", Lane: fmt.Sprintf("search-%d", i)}))
	}
	d.first, d.sibling = ups[0], ups[1]
	d.merge = s.Create(executions.CreateParams{FlowID: d.flow, Namespace: "search", Lane: "merge"})
	if err := s.store.AddDependencies(ctx, executions.DependencyParams{FlowID: d.flow, Downstream: d.merge, Upstreams: ups,
		Policy: executions.AnyOf(executions.CancelRemaining)}); err != nil {
		t.Fatal(err)
	}
	l = s.claim("search-0", "searcher-1", time.Minute)
	if err := s.store.Complete(ctx, l, nil); err != nil {
		t.Fatal(err)
	}
	s.AwaitPublicState(d.expired, ff.PublicExpired)
	s.AwaitPublicState(d.sibling, ff.PublicCancelled)
	s.AwaitPublicState(d.merge, ff.PublicWaiting)
	return d
}

// proxy is a reverse proxy to the site whose client connections the test
// can cut (httptest.Server.CloseClientConnections). It sends the site its
// own Host, so only reads pass it (a form post's Origin would be the
// proxy's).
func (s *browserSite) proxy() *httptest.Server {
	s.t.Helper()
	target, err := url.Parse(s.url)
	if err != nil {
		s.t.Fatal(err)
	}
	p := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(target) }})
	s.t.Cleanup(func() {
		p.CloseClientConnections() // a live stream through it never ends by itself
		p.Close()
	})
	return p
}

// jsString quotes s for a JavaScript expression.
func jsString(s string) string { return strconv.Quote(s) }

// TestBrowser drives the view in headless Chromium as an operator would:
// the executions list, a filter, one execution's timeline, its flow as a
// graph, a live event arriving, and a cancel through its confirmation.
// Screenshots of each step are kept (browsertest); with
// FF_SCREENSHOTS=docs/screenshots docs/view.md's are written too.
func TestBrowser(t *testing.T) {
	browsertest.Chromium(t) // skip (or fail under CI) before seeding anything
	site := startBrowserSite(t)
	d := site.seed()
	b := browsertest.New(t, &browsertest.Options{Width: 1280, Height: 800, Timeout: 3 * time.Minute})
	view := site.url + "ff/"

	// The executions list.
	b.Run("open the executions list",
		chromedp.Navigate(view+"executions"),
		chromedp.WaitVisible(chromedp.CSS("table#executions")))
	b.Screenshot("executions", "executions")

	// Filter by namespace through the form.
	b.Run("filter by namespace",
		chromedp.SetValue(chromedp.CSS(`form.filters input[name="namespace"]`), "billing"),
		chromedp.Submit(chromedp.CSS("form.filters")),
		chromedp.WaitVisible(chromedp.CSS(`form.filters input[name="namespace"][value="billing"]`)),
		chromedp.WaitVisible(chromedp.CSS("table#executions")))
	rows := browsertest.Value(b, "count the filtered rows", chromedp.Evaluate[[]string](
		`[...document.querySelectorAll("#executions tbody tr")].map(tr => tr.textContent)`))
	if len(rows) != d.billing {
		t.Fatalf("the billing filter lists %d rows, want %d", len(rows), d.billing)
	}
	b.Screenshot("executions-filtered", "")

	// Open the expired execution from the list: its timeline shows the
	// lease acquired, then expired by the scanner.
	b.Run("open an execution from the list",
		chromedp.Click(chromedp.JSPath(`[...document.querySelectorAll("#executions a")].find(a => a.textContent.trim() === `+jsString(d.expired.String())+`)`)),
		chromedp.WaitVisible(chromedp.ID("timeline")),
		chromedp.Poll[chromedp.Void](`document.querySelector("#timeline").textContent.includes("acquired") && document.querySelector("#timeline").textContent.includes("expired")`))
	b.Screenshot("execution", "execution")

	// A flow: the graph of the satisfied any-of group, with the cancelled
	// sibling marked.
	b.Run("open the flow",
		chromedp.Navigate(view+"executions/"+d.first.String()),
		chromedp.WaitVisible(chromedp.ID("timeline")),
		chromedp.Click(chromedp.ID("flow")),
		chromedp.WaitVisible(chromedp.ID("graph")),
		chromedp.Poll[chromedp.Void](`document.querySelector("#graph").textContent.includes("satisfied") && document.querySelector("#graph").textContent.includes("cancelled (sibling)")`))
	b.Screenshot("flow", "flow")
	b.Run("open a cancelled sibling from the graph",
		chromedp.Click(chromedp.CSS(`#graph a.node[data-id=`+jsString(d.sibling.String())+`]`)),
		chromedp.WaitVisible(chromedp.ID("timeline")),
		chromedp.Poll[chromedp.Void](`document.querySelector("#state").textContent.trim() === "cancelled" && document.querySelector("h1").textContent.includes(`+jsString(d.sibling.String())+`)`))

	// Live: once both streams are open, a lease and a completion caused
	// through the store arrive without a reload.
	b.Run("open the live page",
		chromedp.Navigate(view+"live"),
		chromedp.Poll[chromedp.Void](`document.querySelector("#live-leases").dataset.state === "open" && document.querySelector("#live-completions").dataset.state === "open"`))
	live := site.Create(executions.CreateParams{Namespace: "live", Lane: "live"})
	l := site.claim("live", "live-worker", time.Minute)
	if err := site.store.Complete(t.Context(), l, nil); err != nil {
		t.Fatal(err)
	}
	b.Run("watch the live events arrive",
		chromedp.Poll[chromedp.Void](`document.querySelector('#live-leases tr[data-execution=`+jsString(live.String())+`]') !== null`),
		chromedp.Poll[chromedp.Void](`document.querySelector('#live-completions tr[data-execution=`+jsString(live.String())+`]') !== null`))
	b.Screenshot("live", "live")

	// The connection drops (a proxy in between closes it): the page says
	// so, EventSource reconnects with the last event's id as Last-Event-ID,
	// and the events committed meanwhile arrive, each once.
	proxy := site.proxy()
	b.Run("open the live page through a proxy",
		chromedp.Navigate(proxy.URL+"/ff/live"),
		chromedp.Poll[chromedp.Void](`document.querySelector("#live-leases").dataset.state === "open"`))
	before := site.Create(executions.CreateParams{Namespace: "live", Lane: "live"})
	site.claim("live", "live-worker", time.Minute)
	b.Run("a lease event arrives through the proxy",
		chromedp.Poll[chromedp.Void](`document.querySelector('#live-leases tr[data-execution=`+jsString(before.String())+`]') !== null`))
	proxy.CloseClientConnections()
	b.Run("the page notices the lost connection",
		chromedp.Poll[chromedp.Void](`Number(document.querySelector("#live-leases").dataset.reconnects) >= 1`))
	during := site.Create(executions.CreateParams{Namespace: "live", Lane: "live"})
	site.claim("live", "live-worker", time.Minute)
	b.Run("the stream resumes after its last event",
		chromedp.Poll[chromedp.Void](`document.querySelector("#live-leases").dataset.state === "open" && document.querySelector('#live-leases tr[data-execution=`+jsString(during.String())+`]') !== null`))
	events := browsertest.Value(b, "read the lease rows", chromedp.Evaluate[[]string](
		`[...document.querySelectorAll("#live-leases tbody tr")].map(tr => tr.dataset.event)`))
	if len(events) != 2 || events[0] == events[1] {
		t.Fatalf("lease rows after the reconnect: event ids %v, want the two acquired events, each once", events)
	}

	// Cancel an execution through the confirmation.
	b.Run("cancel an execution",
		chromedp.Navigate(view+"executions/"+d.victim.String()),
		chromedp.WaitVisible(chromedp.ID("cancel")),
		chromedp.Click(chromedp.ID("cancel")),
		chromedp.WaitVisible(chromedp.ID("confirm")),
		chromedp.SendKeys(chromedp.CSS(`input[name="reason"]`), "cleanup no longer needed"))
	b.Screenshot("cancel-confirm", "cancel")
	b.Run("confirm the cancel",
		chromedp.Click(chromedp.ID("confirm")),
		chromedp.WaitVisible(chromedp.ID("done")),
		chromedp.Poll[chromedp.Void](`document.querySelector("#state") && document.querySelector("#state").textContent.trim() === "cancelled"`))
	b.Screenshot("cancelled", "")
	e, err := site.store.Get(t.Context(), d.victim)
	if err != nil || e.PublicState != ff.PublicCancelled {
		t.Fatalf("after the confirmed cancel %s is %v (%v), want cancelled", d.victim, e.PublicState, err)
	}
	if e.CancellationReason == nil || *e.CancellationReason != "cleanup no longer needed" {
		t.Errorf("cancellation reason %v, want the one typed into the confirmation", e.CancellationReason)
	}

	// Clickjacking: a page of another origin (a second localhost port)
	// frames a cancel confirmation, nearly transparent, over a button of
	// its own, and the operator clicks that button: the click lands on
	// the frame's confirm button's place. The view refuses to be framed,
	// so the frame holds the browser's error page and nothing is
	// cancelled.
	framed := site.Create(executions.CreateParams{Namespace: "ops", Lane: "framed"})
	confirmURL := view + "executions/" + framed.String() + "/cancel"
	b.Run("open a cancel confirmation to find its button",
		chromedp.Navigate(confirmURL),
		chromedp.WaitVisible(chromedp.ID("confirm")))
	at := browsertest.Value(b, "find the confirm button", chromedp.Evaluate[[]float64](
		`(() => { const r = document.querySelector("#confirm").getBoundingClientRect(); return [r.x + r.width / 2, r.y + r.height / 2]; })()`))
	attacker := attackerSite(t, confirmURL, at[0], at[1])
	b.Run("open another origin's page that frames the confirmation",
		chromedp.Navigate(attacker),
		chromedp.Poll[chromedp.Void](`Number(document.querySelector("#victim").dataset.loads) >= 1`))
	b.Screenshot("framed-confirmation", "")
	b.Run("click the other page's button, over the framed confirm button", chromedp.MouseClickXY(at[0], at[1]))
	frames := browsertest.Value(b, "read the frames", frameTree)
	if len(frames.ChildFrames) != 1 {
		t.Fatalf("the other origin's page has %d frames, want its one", len(frames.ChildFrames))
	}
	if f := frames.ChildFrames[0].Frame; f.UnreachableURL == "" && !strings.HasPrefix(f.URL, "chrome-error:") {
		// The confirmation rendered inside the other origin's page: the
		// click posted its form. Its answer loads in the frame.
		b.Run("the framed confirmation's answer loads",
			chromedp.Poll[chromedp.Void](`Number(document.querySelector("#victim").dataset.loads) >= 2`))
		b.Screenshot("framed-click", "")
		t.Errorf("a page of another origin framed the cancel confirmation (the frame holds %s)", f.URL)
	}
	if e, err := site.store.Get(t.Context(), framed); err != nil || e.PublicState != ff.PublicWaiting {
		t.Errorf("after a click on another origin's page over the framed confirmation, %s is %v (%v), want waiting",
			framed, e.PublicState, err)
	}
}

// attackerSite serves, on a port of its own (another origin than the
// view's), a page that frames target nearly transparent over the whole
// window, with a button of its own at (x, y) beneath it. The frame's
// data-loads counts its load events.
func attackerSite(t *testing.T, target string, x, y float64) string {
	t.Helper()
	page := fmt.Sprintf(`<!doctype html><html><head><title>win a prize</title></head><body style="margin:0">
<button id="bait" style="position:fixed; left:%.0fpx; top:%.0fpx; transform:translate(-50%%,-50%%)">Claim your prize</button>
<iframe id="victim" src=%q data-loads="0" onload="this.dataset.loads = String(Number(this.dataset.loads) + 1)"
 style="position:fixed; left:0; top:0; width:100vw; height:100vh; border:0; opacity:0.01"></iframe>
</body></html>`, x, y, target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write([]byte(page))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// frameTree reads the tab's frames from the browser (cross-origin frames
// included, which the page's own script cannot look into).
func frameTree(ctx context.Context, t *chromedp.Target) (*page.FrameTree, error) {
	res, err := cdp.Call(ctx, t, page.GetFrameTree, cdp.Empty{})
	if err != nil {
		return nil, err
	}
	return res.FrameTree, nil
}
