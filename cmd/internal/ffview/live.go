package ffview

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/pipeline"
	"github.com/ffriver/ffriver/subscribe"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The live page (/ff/live) shows the lease and completion streams as they
// are delivered and each scanner's backlog, refreshed without reloading:
//
//	GET /ff/live               the page (?namespace=NS narrows both streams)
//	GET /ff/live/leases        server-sent events: the lease stream
//	GET /ff/live/completions   server-sent events: the completion stream
//	GET /ff/live/backlog       JSON: each scanner's backlog (the page polls it)
//
// Each event of a stream is sent with its stream cursor as the event's id,
// so a browser's EventSource that reconnects sends it back as Last-Event-ID
// and the stream resumes right after it: nothing is lost or repeated. The
// first message of every stream, "ready", carries the position the stream
// starts after as its id, so a reconnect before the first event loses
// nothing either. A stream starts from now, after the cursor of the
// Last-Event-ID header, or after ?after=CURSOR (the header wins: it is the
// newer); a malformed cursor, or one taken from another stream or schema,
// answers 400. ?namespace=NS narrows a stream to
// one namespace.
//
// Decisions: each stream holds two database connections of its own
// (package subscribe), so at most Options.MaxLiveStreams (default 8: four
// open live pages, each with its two streams) run at once; one more
// answers 503 with Retry-After. A stream ends when its
// client goes away, when the view is closed (View.Close, which uiserver
// calls when it shuts down), or on a terminal stream error, which is sent
// first as an "ff-error" message. A cursor whose following events outbox
// retention deleted (subscribe.ErrGap) is not a bad request: the stream
// answers 200 with only an "ff-error" message saying what was lost (a
// browser cannot read an error answer's body, and would retry it), and the
// page offers to start again from now. A comment is sent after 15 s
// without events, so proxies keep the connection and a client that went
// away is noticed. The scanners' backlog is the figure `ffctl status` shows
// (pipeline.Pipeline's Backlog), read at most once a second however many
// pages poll it; without Options.Pipeline the page says it has none.
//
// These are its bounds.
const (
	// DefaultMaxLiveStreams bounds the event streams open at once.
	DefaultMaxLiveStreams = 8
	// liveHeartbeat is how long a stream stays silent before a comment.
	liveHeartbeat = 15 * time.Second
	// liveFlushDelay is how long events wait to be sent together.
	liveFlushDelay = 25 * time.Millisecond
	// liveRetryMs is the reconnect delay told to EventSource.
	liveRetryMs = 2000
)

// liveHub is the view's live state: the stream slots and the context that
// ends every stream when the view closes.
type liveHub struct {
	slots    chan struct{}
	ctx      context.Context
	cancel   context.CancelFunc
	once     sync.Once
	pipeline *pipeline.Pipeline

	// The backlog read last and when: polls within backlogMaxAge share it.
	mu        sync.Mutex
	backlog   backlogJSON
	backlogAt time.Time
}

// backlogMaxAge is how long a backlog read serves the pages that poll it.
const backlogMaxAge = time.Second

func newLiveHub(o Options) (*liveHub, error) {
	n := o.MaxLiveStreams
	switch {
	case n == 0:
		n = DefaultMaxLiveStreams
	case n < 0 || n > 1000:
		return nil, fmt.Errorf("ffview: MaxLiveStreams %d is outside 1..1000", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &liveHub{slots: make(chan struct{}, n), ctx: ctx, cancel: cancel, pipeline: o.Pipeline}, nil
}

// Close ends every live event stream the view is serving (their clients
// see the connection end, and reconnect elsewhere or later) and refuses new
// ones with 503. It is safe to call more than once; uiserver calls it when
// its server shuts down, so the shutdown does not wait for them.
func (v *View) Close() {
	v.live.once.Do(v.live.cancel)
}

// livePage is the data of templates/live.html.
type livePage struct {
	Backlog backlogJSON
	// Namespace narrows both streams ("" = every namespace); Query is
	// the streams' query string for it ("" or "?namespace=NS").
	Namespace, Query string
}

// backlogJSON is what GET /ff/live/backlog answers.
type backlogJSON struct {
	// Available is false when the view has no scanners to ask
	// (Options.Pipeline unset); Error says why a read failed.
	Available bool          `json:"available"`
	Error     string        `json:"error,omitempty"`
	AtMs      int64         `json:"at_ms"`
	Scanners  []scannerJSON `json:"scanners"`
}

// scannerJSON is one scanner's backlog.
type scannerJSON struct {
	Name     string `json:"name"`
	Interval string `json:"interval"`
	Disabled bool   `json:"disabled,omitempty"`
	// Due items now, over DuePartitions partitions, each partition's
	// counted up to the scanner's batch: with DueAtLeast set, at least Due.
	Due           int64 `json:"due"`
	DueAtLeast    bool  `json:"due_at_least"`
	DuePartitions int   `json:"due_partitions"`
	// OldestOverdueMs is how long the oldest due item has been due.
	OldestOverdueMs int64  `json:"oldest_overdue_ms"`
	OldestOverdue   string `json:"oldest_overdue"`
	// Unprocessable rows look due but no scan can process them (see
	// ffctl status for the query that lists them).
	Unprocessable int64 `json:"unprocessable"`
}

// backlog returns each scanner's backlog as `ffctl status` reads it, read
// at most once per backlogMaxAge: every page polls it.
func (v *View) backlog(ctx context.Context) backlogJSON {
	h := v.live
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.backlogAt.IsZero() && time.Since(h.backlogAt) < backlogMaxAge {
		return h.backlog
	}
	b := v.readBacklog(ctx)
	if ctx.Err() == nil {
		h.backlog, h.backlogAt = b, time.Now()
	}
	return b
}

// readBacklog reads each scanner's backlog.
func (v *View) readBacklog(ctx context.Context) backlogJSON {
	p := v.live.pipeline
	out := backlogJSON{Scanners: []scannerJSON{}}
	if p == nil {
		out.Error = "no scanners configured for this view"
		return out
	}
	out.Available, out.AtMs = true, p.Env().NowMs()
	bs, err := p.Backlog(ctx, v.pool)
	if err != nil {
		v.log.Warn("ffview: reading the scanners' backlog", "error", err)
		out.Available, out.Error = false, "reading the backlog failed: "+err.Error()
		return out
	}
	for _, b := range bs {
		st, _ := p.Settings(b.Scanner)
		s := scannerJSON{Name: b.Scanner, Interval: st.Interval.String(), Disabled: st.Disabled,
			Due: b.Due, DueAtLeast: b.AtLeast, DuePartitions: b.Partitions, OldestOverdueMs: b.OldestOverdue().Milliseconds()}
		if s.OldestOverdueMs > 0 {
			s.OldestOverdue = b.OldestOverdue().Round(time.Millisecond).String()
		}
		for _, u := range b.Unprocessable {
			s.Unprocessable += u.Count
		}
		out.AtMs = b.AtMs
		out.Scanners = append(out.Scanners, s)
	}
	return out
}

// livePageHandler serves GET /ff/live.
func (v *View) livePageHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q, err := query(r, "namespace")
		if err != nil {
			v.failErr(w, r, err)
			return
		}
		page := livePage{Namespace: strings.TrimSpace(q.Get("namespace"))}
		if page.Namespace != "" {
			if err := (ff.Filter{Namespace: page.Namespace}).Validate(); err != nil {
				v.failErr(w, r, err)
				return
			}
			page.Query = "?" + url.Values{"namespace": {page.Namespace}}.Encode()
		}
		page.Backlog = v.backlog(r.Context())
		v.render(w, r, http.StatusOK, "live", "live", "Live", page)
	})
}

// liveBacklog serves GET /ff/live/backlog.
func (v *View) liveBacklog() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := query(r); err != nil {
			v.failErr(w, r, err)
			return
		}
		b := v.backlog(r.Context())
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if b.Error != "" && v.live.pipeline != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(b)
	})
}

// leaseJSON is a lease event as the page receives it.
type leaseJSON struct {
	EventID      int64  `json:"event_id"`
	Type         string `json:"type"`
	ExecutionID  string `json:"execution_id"`
	LeaseID      string `json:"lease_id,omitempty"`
	Partition    int16  `json:"partition"`
	Namespace    string `json:"namespace,omitempty"`
	InstanceTag  string `json:"instance_tag,omitempty"`
	AtMs         int64  `json:"at_ms"`
	AttemptIndex *int32 `json:"attempt_index,omitempty"`
	LeaseEpoch   *int64 `json:"lease_epoch,omitempty"`
	Worker       string `json:"worker,omitempty"`
}

// completionJSON is a completion event as the page receives it.
type completionJSON struct {
	EventID     int64  `json:"event_id"`
	Outcome     string `json:"outcome"`
	ExecutionID string `json:"execution_id"`
	FlowID      string `json:"flow_id,omitempty"`
	Partition   int16  `json:"partition"`
	Namespace   string `json:"namespace,omitempty"`
	InstanceTag string `json:"instance_tag,omitempty"`
	AtMs        int64  `json:"at_ms"`
}

// liveLeases serves GET /ff/live/leases.
func (v *View) liveLeases() http.Handler {
	return liveStream(v, "lease", subscribe.Leases, func(ev subscribe.LeaseEvent) (subscribe.Cursor, any) {
		return ev.Cursor, leaseJSON{EventID: ev.EventID, Type: ev.Type, ExecutionID: ev.ExecutionID.String(),
			LeaseID: ev.LeaseID, Partition: ev.Partition, Namespace: ev.Namespace, InstanceTag: ev.InstanceTag,
			AtMs: ev.AtMs, AttemptIndex: ev.AttemptIndex, LeaseEpoch: ev.LeaseEpoch, Worker: ev.WorkerInstanceID}
	})
}

// liveCompletions serves GET /ff/live/completions.
func (v *View) liveCompletions() http.Handler {
	return liveStream(v, "completion", subscribe.Completions, func(ev subscribe.CompletionEvent) (subscribe.Cursor, any) {
		c := completionJSON{EventID: ev.EventID, Outcome: ev.Outcome, ExecutionID: ev.ExecutionID.String(),
			Partition: ev.Partition, Namespace: ev.Namespace, InstanceTag: ev.InstanceTag, AtMs: ev.AtMs}
		if ev.FlowID.Valid {
			c.FlowID = uuid.UUID(ev.FlowID.UUID).String()
		}
		return ev.Cursor, c
	})
}

// liveStart works out where a stream starts: after the Last-Event-ID
// header's cursor, else after ?after=, else now.
func liveStart(r *http.Request) (subscribe.Options, error) {
	q, err := query(r, "after", "namespace")
	if err != nil {
		return subscribe.Options{}, err
	}
	o := subscribe.Options{ApplicationName: "ffview-live"}
	if ns, ok := q["namespace"]; ok {
		if strings.TrimSpace(ns[0]) == "" {
			return o, ff.Validationf("namespace", "is empty: leave it out for every namespace")
		}
		o.Filter.Namespace = ns[0]
		if err := o.Filter.Validate(); err != nil {
			return o, err
		}
	}
	raw, from := "", ""
	if h := r.Header.Values("Last-Event-ID"); len(h) > 0 {
		if len(h) > 1 {
			return o, ff.Validationf("Last-Event-ID", "given %d times: want it once", len(h))
		}
		raw, from = h[0], "Last-Event-ID"
	} else if a, ok := q["after"]; ok {
		raw, from = a[0], "after"
	}
	if from == "" {
		return o, nil // from now
	}
	if strings.TrimSpace(raw) == "" {
		return o, ff.Validationf(from, "is empty: give a cursor of this stream (an event's id), or leave it out to start from now")
	}
	c, err := subscribe.ParseCursor(raw)
	if err != nil {
		return o, fmt.Errorf("%s: %w", from, err)
	}
	o.Start, o.After = subscribe.StartAfter, c
	return o, nil
}

// liveStream serves one outbox stream as server-sent events; kind names
// its events ("lease", "completion").
func liveStream[E any](v *View, kind string, open func(context.Context, *pgxpool.Pool, subscribe.Options) (*subscribe.Stream[E], error),
	encode func(E) (subscribe.Cursor, any)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		opts, err := liveStart(r)
		if err != nil {
			v.failErr(w, r, err)
			return
		}
		select {
		case v.live.slots <- struct{}{}:
			defer func() { <-v.live.slots }()
		default:
			w.Header().Set("Retry-After", "5")
			v.fail(w, r, http.StatusServiceUnavailable, fmt.Sprintf(
				"%d live streams are open, the most this view serves at once (each holds two database connections): close another live page and retry", cap(v.live.slots)))
			return
		}
		if v.live.ctx.Err() != nil {
			v.fail(w, r, http.StatusServiceUnavailable, "the server is shutting down")
			return
		}
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		defer context.AfterFunc(v.live.ctx, cancel)()

		opts.Schema = string(v.schema)
		opts.Logger = v.log
		s, err := open(ctx, v.pool, opts)
		switch {
		case errors.Is(err, subscribe.ErrForeignCursor), errors.Is(err, subscribe.ErrCursorOrigin), errors.Is(err, ff.ErrPositionAhead):
			v.fail(w, r, http.StatusBadRequest, err.Error())
			return
		case errors.Is(err, subscribe.ErrGap):
			// A browser cannot read the body of an error answer, and
			// would retry it: the stream opens only to say why it ends.
			v.log.Warn("ffview: live stream cannot resume", "stream", kind, "error", err)
			sse := startSSE(w)
			sse.event("", "ff-error", map[string]any{"message": err.Error(), "gap": true})
			_ = sse.flush()
			return
		case err != nil:
			v.failErr(w, r, err)
			return
		}
		defer s.Close()

		sse := startSSE(w)
		resumed := opts.Start == subscribe.StartAfter
		sse.event(s.StartCursor().String(), "ready", map[string]any{"stream": kind, "resumed": resumed})
		if sse.flush() != nil {
			return
		}
		pending := false
		for {
			wait := liveHeartbeat
			if pending {
				wait = liveFlushDelay
			}
			nctx, ncancel := context.WithTimeout(ctx, wait)
			ev, err := s.Next(nctx)
			ncancel()
			var disc *subscribe.DisconnectedError
			switch {
			case err == nil:
				c, body := encode(ev)
				sse.event(c.String(), kind, body)
				pending = true
				continue
			case ctx.Err() != nil:
				return // the client went away, or the view closed
			case errors.Is(err, context.DeadlineExceeded):
				if !pending {
					sse.comment("keepalive")
				}
			case errors.As(err, &disc):
				sse.event("", "ff-status", map[string]string{"message": "the stream lost its database connection; reconnecting"})
			default:
				v.log.Warn("ffview: live stream ended", "stream", kind, "error", err)
				sse.event("", "ff-error", map[string]string{"message": err.Error()})
				_ = sse.flush()
				return
			}
			if sse.flush() != nil {
				return
			}
			pending = false
		}
	})
}

// startSSE answers 200 with an event stream and tells the client how soon
// to reconnect.
func startSSE(w http.ResponseWriter) *sseWriter {
	rc := http.NewResponseController(w)
	_ = rc.SetWriteDeadline(time.Time{}) // a stream has no end to wait for
	h := w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	sse := &sseWriter{w: bufio.NewWriterSize(w, 16<<10), rc: rc}
	sse.retry(liveRetryMs)
	return sse
}

// sseWriter writes server-sent events; the first write error sticks.
type sseWriter struct {
	w   *bufio.Writer
	rc  *http.ResponseController
	err error
}

func (s *sseWriter) write(parts ...string) {
	for _, p := range parts {
		if s.err != nil {
			return
		}
		_, s.err = io.WriteString(s.w, p)
	}
}

func (s *sseWriter) retry(ms int) { s.write("retry: ", strconv.Itoa(ms), "\n\n") }

func (s *sseWriter) comment(text string) { s.write(": ", text, "\n\n") }

// event writes one event; id "" leaves the client's last event id as it
// is. data is sent as one line of JSON.
func (s *sseWriter) event(id, name string, data any) {
	b, err := json.Marshal(data)
	if err != nil {
		s.err = err
		return
	}
	if id != "" {
		s.write("id: ", id, "\n")
	}
	s.write("event: ", name, "\n", "data: ", string(b), "\n\n")
}

// flush sends what was written.
func (s *sseWriter) flush() error {
	if s.err == nil {
		s.err = s.w.Flush()
	}
	if s.err == nil {
		s.err = s.rc.Flush()
	}
	return s.err
}
