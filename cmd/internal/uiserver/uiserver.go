// Package uiserver serves River UI (riverqueue.com/riverui) for ffscheduler
// and ffctl demo: the riverui handler on its own listener, behind a guard
// against other web pages (Guard) and optionally behind basic auth. The
// execution view (internal/ffview), when given, is served on the same
// listener under /ff/, behind the same guard and the same basic auth.
//
// Reading ffriver in River UI, a decision: River UI opens on the Running
// jobs, which for ffriver are nearly always none (an item job runs for
// milliseconds), and its Completed list is mostly ff.tick jobs (every
// scanner ticks about once a second: some 25,000 ticks per hour of
// retention). ffriver keeps River's behaviour there (ticks are completed
// jobs like the others, kept for --completed-retention with their outputs,
// which record each scanner's due count) and makes them easy to filter out
// instead: every item job carries the tag "item" (pipeline.TagItem), so
// ItemsPath lists what the scanners did, and the tags scanner-NAME,
// partition-N and ns-NAMESPACE narrow it (see pipeline.TickTags). A shorter
// retention for ticks alone is not possible: River's
// CompletedJobRetentionPeriod applies to every job of the client.
package uiserver

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"riverqueue.com/riverui"
)

// ItemsPath is the River UI page of ffriver's completed item jobs, without
// the ticks and scans: append it to the UI's URL.
const ItemsPath = "jobs?state=completed&tags=item"

// Options say where and how River UI is served.
type Options struct {
	// Addr is host:port to listen on.
	Addr string
	// Fallback listens on a free port of the same host when Addr is taken.
	Fallback bool
	// User and Password, when User is set, are required with basic auth
	// (compared in constant time).
	User, Password string
	// AllowedHosts are further values of the Host header the server answers
	// besides the address it listens on and the loopback names of its port
	// (see Guard): "name" (any port) or "name:port".
	AllowedHosts []string
	// View, when set, is served under ViewPrefix (/ff/) beside River UI:
	// the execution view (internal/ffview).
	View   http.Handler
	Logger *slog.Logger
}

// ViewPrefix is the path the execution view is served under.
const ViewPrefix = "/ff/"

// ListenError is returned by Start when the address cannot be listened on.
type ListenError struct {
	Addr string
	Err  error
}

func (e *ListenError) Error() string {
	return fmt.Sprintf("river UI: listening on %s: %v", e.Addr, e.Err)
}
func (e *ListenError) Unwrap() error { return e.Err }

// Server is River UI being served.
type Server struct {
	srv *http.Server
	// URL River UI answers on.
	URL string
	// ViewURL is the execution view's page of executions when Options.View
	// was given, else "".
	ViewURL string
}

// Start serves River UI of client until Shutdown. ctx bounds the UI's
// background query cacher.
func Start(ctx context.Context, client *river.Client[pgx.Tx], o Options) (*Server, error) {
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	h, err := riverui.NewHandler(&riverui.HandlerOpts{Endpoints: riverui.NewEndpoints(client, nil), Logger: quietCancel(logger), Prefix: "/"})
	if err != nil {
		return nil, fmt.Errorf("river UI: %w", err)
	}
	ln, err := net.Listen("tcp", o.Addr)
	if err != nil && o.Fallback {
		host, _, _ := net.SplitHostPort(o.Addr)
		ln, err = net.Listen("tcp", net.JoinHostPort(host, "0"))
	}
	if err != nil {
		return nil, &ListenError{Addr: o.Addr, Err: err}
	}
	if err := h.Start(ctx); err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("river UI: %w", err)
	}
	var served http.Handler = h
	if o.View != nil {
		mux := http.NewServeMux()
		mux.Handle("/", h)
		mux.Handle(ViewPrefix, o.View)
		served = mux
	}
	if o.User != "" {
		served = BasicAuth(served, o.User, o.Password)
	}
	// The guard is outermost, so its headers (no framing by another
	// origin) are on every answer, basic auth's 401 included.
	handler, err := Guard(served, ln.Addr(), o.AllowedHosts)
	if err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("river UI: %w", err)
	}
	s := &Server{srv: &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}, URL: "http://" + ln.Addr().String() + "/"}
	if c, ok := o.View.(interface{ Close() }); ok {
		// The view's live event streams never end by themselves: closing
		// them lets Shutdown finish instead of waiting out its timeout.
		s.srv.RegisterOnShutdown(c.Close)
	}
	if o.View != nil {
		s.ViewURL = s.URL + strings.TrimPrefix(ViewPrefix, "/") + "executions"
	}
	go func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("River UI server failed", "error", err)
		}
	}()
	return s, nil
}

// Shutdown stops serving, waiting up to 5 s for requests in flight. A nil
// Server does nothing.
func (s *Server) Shutdown() {
	if s == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
}

// quietCancel returns logger with River UI's errors that are only a
// cancellation demoted to DEBUG: on a clean stop, ctx's end cancels the
// UI's background queries (its query cacher logs "Error running query"
// with "context canceled" after the process said it stopped), and a
// browser that goes away cancels its request's. Neither is a failure.
func quietCancel(logger *slog.Logger) *slog.Logger {
	return slog.New(cancelDemoter{logger.Handler()})
}

// cancelDemoter passes records to its handler, an error (or warning) whose
// error attribute is a context.Canceled at DEBUG.
type cancelDemoter struct{ slog.Handler }

func (h cancelDemoter) Handle(ctx context.Context, r slog.Record) error {
	if r.Level > slog.LevelDebug && canceledOnly(r) {
		r.Level = slog.LevelDebug
		if !h.Handler.Enabled(ctx, r.Level) {
			return nil
		}
	}
	return h.Handler.Handle(ctx, r)
}

func (h cancelDemoter) WithAttrs(attrs []slog.Attr) slog.Handler {
	return cancelDemoter{h.Handler.WithAttrs(attrs)}
}

func (h cancelDemoter) WithGroup(name string) slog.Handler {
	return cancelDemoter{h.Handler.WithGroup(name)}
}

// canceledOnly reports whether r carries an error and every error it
// carries is a context.Canceled.
func canceledOnly(r slog.Record) bool {
	var seen, other bool
	r.Attrs(func(a slog.Attr) bool {
		if err, ok := a.Value.Resolve().Any().(error); ok {
			seen = true
			if !errors.Is(err, context.Canceled) {
				other = true
				return false
			}
		}
		return true
	})
	return seen && !other
}

// BasicAuth requires user and password, compared in constant time.
func BasicAuth(next http.Handler, user, pass string) http.Handler {
	wantU, wantP := sha256.Sum256([]byte(user)), sha256.Sum256([]byte(pass))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		gotU, gotP := sha256.Sum256([]byte(u)), sha256.Sum256([]byte(p))
		uOK := subtle.ConstantTimeCompare(gotU[:], wantU[:])
		pOK := subtle.ConstantTimeCompare(gotP[:], wantP[:])
		if !ok || uOK&pOK != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="ffriver River UI", charset="UTF-8"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// IsLoopback reports whether host:port names a loopback host only.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}
