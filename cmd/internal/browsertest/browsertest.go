// Package browsertest runs a headless Chromium for ffriver's browser tests
// (chromedp, driving Debian's chromium through the DevTools protocol) and
// keeps their screenshots.
//
// The browser is $FF_CHROMIUM, which `make test` sets from
// scripts/browser.sh (that script finds or installs one), else chromium on
// PATH, else /usr/bin/chromium. Without one the test is skipped, saying how
// to get one, except with CI=true, where a missing browser is a failure.
//
// Screenshots go to $FF_ARTIFACTS/<test name>/ (a relative path is taken
// from the repository's root), else bin/artifacts/<test name>/ of the
// repository (git-ignored), one PNG per step, so a failed run can be looked
// at afterwards. With FF_SCREENSHOTS set to a directory (the
// execution view guide's are made with FF_SCREENSHOTS=docs/screenshots), the screenshots
// a test marks as documentation are also written there.
package browsertest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/ffriver/ffriver/internal/testproc"
)

// Chromium returns the path of the headless Chromium to drive; without one
// it skips the test, or fails it with CI=true.
func Chromium(tb testing.TB) string {
	tb.Helper()
	if p := os.Getenv("FF_CHROMIUM"); p != "" {
		if _, err := os.Stat(p); err != nil {
			missing(tb, fmt.Sprintf("FF_CHROMIUM=%s: %v", p, err))
		}
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome-stable", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if _, err := os.Stat("/usr/bin/chromium"); err == nil {
		return "/usr/bin/chromium"
	}
	missing(tb, "no headless Chromium found (FF_CHROMIUM unset, no chromium on PATH)")
	return ""
}

func missing(tb testing.TB, why string) {
	tb.Helper()
	msg := "browsertest: " + why + "; run scripts/browser.sh (or `make test`, which runs it) to find or install one"
	if os.Getenv("CI") == "true" {
		tb.Fatal(msg + " (CI=true: a browser test is never skipped)")
	}
	tb.Skip(msg)
}

// Options tune New.
type Options struct {
	// Width and Height of the viewport (default 1280×800).
	Width, Height int
	// Timeout bounds the whole browser session (default 2 minutes): every
	// action of the test must finish within it.
	Timeout time.Duration
	// StepTimeout bounds each Run (default 30 s).
	StepTimeout time.Duration
}

// Browser is one headless Chromium with one tab, for one test.
type Browser struct {
	// Ctx is the tab's context: pass it to chromedp.Run or chromedp.Do. It ends with the
	// test or at Options.Timeout, whichever comes first.
	Ctx  context.Context
	tb   testing.TB
	dir  string
	n    int
	step time.Duration
}

// New starts a headless Chromium with the flags a closed network needs
// (no background networking, component updates, sync or QUIC) and an empty
// profile of its own, and stops it when the test ends.
func New(tb testing.TB, opts *Options) *Browser {
	tb.Helper()
	path := Chromium(tb)
	if opts == nil {
		opts = &Options{}
	}
	w, h := opts.Width, opts.Height
	if w == 0 || h == 0 {
		w, h = 1280, 800
	}
	timeout := opts.Timeout
	if timeout == 0 {
		timeout = 2 * time.Minute
	}
	allocOpts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.UserDataDir(tb.TempDir()),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.WindowSize(w, h),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-default-apps", true),
		chromedp.Flag("mute-audio", true),
		chromedp.Flag("hide-scrollbars", true),
	}
	ctx, cancelTimeout := context.WithTimeout(context.Background(), timeout)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, allocOpts...)
	tabCtx, cancelTab := chromedp.NewContext(allocCtx, chromedp.WithLogf(tb.Logf))
	tb.Cleanup(func() {
		cancelTab()
		cancelAlloc() // waits for the browser process to exit
		cancelTimeout()
	})
	// Start the browser now, so a browser that cannot start fails here,
	// naming it, rather than in the test's first step.
	if err := chromedp.Do(tabCtx, chromedp.EmulateViewport(int64(w), int64(h))); err != nil {
		tb.Fatalf("browsertest: starting %s: %v", path, err)
	}
	step := opts.StepTimeout
	if step == 0 {
		step = 30 * time.Second
	}
	return &Browser{Ctx: tabCtx, tb: tb, dir: ArtifactsDir(tb), step: step}
}

// Run runs actions in the tab, within Options.StepTimeout, and fails the
// test with step's name when one fails (a screenshot of the page as it was
// is kept as "<n>-<step>-failed").
func (b *Browser) Run(step string, actions ...chromedp.Action[chromedp.Void]) {
	b.tb.Helper()
	ctx, cancel := context.WithTimeout(b.Ctx, b.step)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.keep(step+"-failed", "")
		b.tb.Fatalf("browser step %q: %v", step, err)
	}
}

// Screenshot keeps a screenshot of the whole page (the window's width, the
// page's height) as artifact "<n>-<name>.png".
// With doc non-empty and FF_SCREENSHOTS set, it is also written there as
// "<doc>.png", for docs/view.md.
func (b *Browser) Screenshot(name, doc string) {
	b.tb.Helper()
	b.keep(name, doc)
}

func (b *Browser) keep(name, doc string) {
	b.tb.Helper()
	// A failing step may have used up the context: the screenshot of a
	// failure gets a few seconds of its own.
	ctx := b.Ctx
	if ctx.Err() != nil {
		b.tb.Logf("browsertest: no screenshot %q: the browser's context has ended (%v)", name, ctx.Err())
		return
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	png, err := chromedp.Run(sctx, chromedp.FullScreenshot(100)) // 100: PNG
	if err != nil {
		b.tb.Logf("browsertest: screenshot %q: %v", name, err)
		return
	}
	b.n++
	file := filepath.Join(b.dir, fmt.Sprintf("%02d-%s.png", b.n, safeName(name)))
	if err := os.WriteFile(file, png, 0o644); err != nil {
		b.tb.Errorf("browsertest: writing %s: %v", file, err)
		return
	}
	b.tb.Logf("browsertest: screenshot %s", file)
	if dir := os.Getenv("FF_SCREENSHOTS"); doc != "" && dir != "" {
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(repoRoot(b.tb), dir)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.tb.Errorf("browsertest: %v", err)
			return
		}
		out := filepath.Join(dir, safeName(doc)+".png")
		if err := os.WriteFile(out, png, 0o644); err != nil {
			b.tb.Errorf("browsertest: writing %s: %v", out, err)
			return
		}
		b.tb.Logf("browsertest: documentation screenshot %s", out)
	}
}

// ArtifactsDir returns (and creates) the directory of the test's artifacts:
// $FF_ARTIFACTS/<test name>, else <repository>/bin/artifacts/<test name>.
// A previous run's files there are removed.
func ArtifactsDir(tb testing.TB) string {
	tb.Helper()
	root := os.Getenv("FF_ARTIFACTS")
	switch {
	case root == "":
		root = filepath.Join(repoRoot(tb), "bin", "artifacts")
	case !filepath.IsAbs(root):
		root = filepath.Join(repoRoot(tb), root) // as given from the repository's root
	}
	dir := filepath.Join(root, safeName(tb.Name()))
	if err := os.RemoveAll(dir); err != nil {
		tb.Fatalf("browsertest: clearing %s: %v", dir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatalf("browsertest: %v", err)
	}
	return dir
}

// repoRoot is the repository's root (testproc.RepoRoot), else the working
// directory.
func repoRoot(tb testing.TB) string {
	tb.Helper()
	if root, ok := testproc.RepoRoot(); ok {
		return root
	}
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatalf("browsertest: %v", err)
	}
	return dir
}

func safeName(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			return r
		}
		return '-'
	}, s)
}

// Dir is the directory the browser's screenshots go to (ArtifactsDir).
func (b *Browser) Dir() string { return b.dir }

// Value runs an action that reads a value from the tab, within
// Options.StepTimeout, and fails the test with step's name when it fails.
func Value[T any](b *Browser, step string, a chromedp.Action[T]) T {
	b.tb.Helper()
	ctx, cancel := context.WithTimeout(b.Ctx, b.step)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		b.keep(step+"-failed", "")
		b.tb.Fatalf("browser step %q: %v", step, err)
	}
	return v
}
