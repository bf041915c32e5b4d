package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ffriver/ffriver/cmd/internal/cli"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/subscribe"
)

var tailCommand = command{
	name:    "tail",
	summary: "stream lease events or completions as text or JSON lines",
	run: func(ctx context.Context, args []string) int {
		return runTail(ctx, args, os.Stdout, os.Stderr)
	},
}

// tailFlags are ffctl tail's own flags, after parsing.
type tailFlags struct {
	stream     string
	fromStart  bool
	cursor     string
	cursorFile string
	since      string
	now        func() time.Time
	consumer   string
	maxLag     time.Duration
	partitions string
	filter     *ff.Filter
	format     string
	maxEvents  int
	idleExit   time.Duration
}

func runTail(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("ffctl tail", "",
		"Streams the lease history (--stream leases) or completions (--stream completions) in\n"+
			"commit order, one line per event, until interrupted, --max-events or --idle-exit. A\n"+
			"transaction that wrote events and stays open delays only its own; after a second tail\n"+
			"says on stderr which session it is.\n"+
			"Without --from-start, --cursor or --since it starts from now. With --cursor-file it resumes\n"+
			"after the cursor stored there; when the file does not exist yet it stores the stream's start\n"+
			"position as soon as the stream is open, and then each printed event's cursor, so a restart\n"+
			"neither skips nor repeats events, even after a run that printed none (at most the last line\n"+
			"printed before a crash comes again).\n"+
			"A cursor before events retention deleted, from another server, or from another stream or\n"+
			"schema, or an upstream cursor naming an event id the outbox never handed out, is an error\n"+
			"(exit 1) that says so: resume with --from-start or --since. An empty\n"+
			"--cursor or cursor file is a usage error, never \"now\".\n"+
			"At start it keeps trying for up to --startup-wait while the server refuses for a reason that\n"+
			"passes (no free connection slot, starting up, restarting), saying so about every 10 s.")
	fs.Stdout = stdout
	common := cli.AddCommon(fs)
	common.AddStartupWait(fs)
	var f tailFlags
	fs.StringVar(&f.stream, "stream", "leases", "`stream` to tail: leases or completions")
	fs.CompleteValues("stream", "leases", "completions")
	fs.BoolVar(&f.fromStart, "from-start", false, "start from the first event still in the table")
	fs.StringVar(&f.cursor, "cursor", "", "start after this `cursor` (a cursor printed by tail, or an upstream one)")
	fs.StringVar(&f.since, "since", "",
		"start at the events that occurred at or after this `time` (RFC 3339, or a duration ago such as 15m),\n"+
			"then every event committed later")
	fs.StringVar(&f.cursorFile, "cursor-file", "",
		"`file` holding the resume cursor: read at start if it exists (it then wins over --from-start\n"+
			"and --cursor), else written with the stream's start position once the stream is open; replaced\n"+
			"atomically after each printed event")
	fs.StringVar(&f.consumer, "consumer", "",
		"tail as the named durable consumer `name`: its position is stored in the database after the\n"+
			"events it printed, retention keeps what it has not printed, and the next tail with the same name\n"+
			"resumes after it (its stored position wins over --from-start and --since); one tail per name at a time")
	fs.DurationVar(&f.maxLag, "consumer-max-lag", 0,
		"how old the --consumer's position may grow before retention stops waiting for it (default 168h)")
	fs.StringVar(&f.partitions, "partitions", "", "partitions to tail, as a `list` of numbers and ranges, e.g. 0-15,42 (default all)")
	f.filter = cli.AddFilter(fs, "only events of this `namespace`",
		"only events whose instance tag has this value, given as `key=value` (only the value is compared)")
	fs.StringVar(&f.format, "format", "text", "output `format`: text or json (one object per line)")
	fs.CompleteValues("format", "text", "json")
	fs.IntVar(&f.maxEvents, "max-events", 0, "exit after `n` events (0: no limit)")
	fs.DurationVar(&f.idleExit, "idle-exit", 0, "exit 0 after this `duration` without an event (0: never), saying so when events still wait for an open writer")

	tele := cli.AddTelemetry(fs)
	var opts subscribe.Options
	f.now = time.Now
	fs.AfterParse(func() (err error) {
		if fs.Explicit("cursor") && strings.TrimSpace(f.cursor) == "" {
			return cli.Usagef("--cursor is empty: give a cursor printed by tail, or use --from-start or --since")
		}
		opts, err = f.options()
		return err
	})
	if err := fs.Parse(args); err != nil {
		return cli.Report(stderr, fs.Name(), err)
	}
	logger := common.Logger(stderr)
	opts.Schema, opts.Logger, opts.ApplicationName = common.Schema, logger, "ffctl tail"
	waiting := &waitLog{}
	opts.OnWait = func(w subscribe.Wait) {
		waiting.note(w)
		if w.Done {
			logger.Info("the open writer ended", "writer", w.String())
		} else {
			logger.Warn("waiting for an open writer", "writer", w.String())
		}
	}

	resumed := false
	if f.cursorFile != "" {
		c, ok, err := readCursorFile(f.cursorFile)
		if err != nil {
			return cli.Report(stderr, fs.Name(), err)
		}
		if resumed = ok; ok {
			opts.Start, opts.After = subscribe.StartAfter, c
			logger.Info("resuming after the cursor file's cursor", "file", f.cursorFile, "cursor", c.String())
		}
	}

	poolOpts := cli.PoolOptions{AppName: "ffctl tail", MaxConns: 2, Logger: logger}
	pool, err := common.OpenPool(ctx, poolOpts)
	if err != nil {
		if _, ok := cli.Interrupted(ctx); ok {
			return cli.ExitOK // interrupted while it waited for the server
		}
		return cli.Report(stderr, fs.Name(), err)
	}
	defer pool.Close()
	tel, err := tele.Start(ctx, "ffctl tail", logger)
	if err != nil {
		return cli.Report(stderr, fs.Name(), err)
	}
	defer cli.StopTelemetry(tel, logger)
	opts.MeterProvider = tel.MeterProvider()
	// Ready once the stream is open; the database answering is the rest.
	streamOpen := make(chan struct{})
	tel.SetReady(func(ctx context.Context) error {
		select {
		case <-streamOpen:
		default:
			return errors.New("the stream is not open yet")
		}
		return pool.Ping(ctx)
	})

	out := bufio.NewWriter(stdout)
	t := &tailer{flags: f, out: out, logger: logger, waiting: waiting, resumed: resumed}
	// A stream opens connections of its own after the first (a named
	// consumer's, a reconnect's): a refusal for lack of slots is explained
	// as OpenPool explains the first.
	report := func(err error) int {
		return cli.Report(stderr, fs.Name(), cli.ExplainConnLimit(err, poolOpts, pool.Config().MaxConns))
	}
	switch f.stream {
	case "leases":
		s, err := subscribe.Leases(ctx, pool, opts)
		if err != nil {
			return report(err)
		}
		defer s.Close()
		close(streamOpen)
		return report(tail(ctx, t, s, leaseLine))
	default:
		s, err := subscribe.Completions(ctx, pool, opts)
		if err != nil {
			return report(err)
		}
		defer s.Close()
		close(streamOpen)
		return report(tail(ctx, t, s, completionLine))
	}
}

// options checks the flags and turns them into subscribe.Options (without
// the cursor file, which is read later).
func (f tailFlags) options() (subscribe.Options, error) {
	var o subscribe.Options
	switch f.stream {
	case "leases", "completions":
	default:
		return o, cli.Usagef("--stream %q: use leases or completions", f.stream)
	}
	switch f.format {
	case "text", "json":
	default:
		return o, cli.Usagef("--format %q: use text or json", f.format)
	}
	if f.maxEvents < 0 {
		return o, cli.Usagef("--max-events %d is negative", f.maxEvents)
	}
	if f.idleExit < 0 {
		return o, cli.Usagef("--idle-exit %s is negative", f.idleExit)
	}
	switch {
	case f.consumer == "" && f.maxLag != 0:
		return o, cli.Usagef("--consumer-max-lag needs --consumer")
	case f.consumer != "" && (f.cursor != "" || f.cursorFile != ""):
		return o, cli.Usagef("--consumer keeps its position in the database: it excludes --cursor and --cursor-file")
	case f.maxLag < 0:
		return o, cli.Usagef("--consumer-max-lag %s is negative", f.maxLag)
	}
	o.Consumer, o.ConsumerMaxLag = f.consumer, f.maxLag
	starts := 0
	for _, set := range []bool{f.fromStart, f.cursor != "", f.since != ""} {
		if set {
			starts++
		}
	}
	switch {
	case starts > 1:
		return o, cli.Usagef("--from-start, --cursor and --since exclude each other")
	case f.since != "":
		t, err := parseSince(f.since, f.now())
		if err != nil {
			return o, &cli.UsageError{Err: fmt.Errorf("--since: %w", err)}
		}
		o.Start, o.Since = subscribe.StartSince, t
	case f.fromStart:
		o.Start = subscribe.StartBeginning
	case f.cursor != "":
		c, err := subscribe.ParseCursor(f.cursor)
		if err != nil {
			return o, &cli.UsageError{Err: fmt.Errorf("--cursor: %w", err)}
		}
		o.Start, o.After = subscribe.StartAfter, c
	}
	var err error
	if o.Partitions, err = parsePartitions(f.partitions); err != nil {
		return o, &cli.UsageError{Err: fmt.Errorf("--partitions: %w", err)}
	}
	o.Filter = *f.filter
	if err := o.Validate(); err != nil {
		return o, &cli.UsageError{Err: err}
	}
	return o, nil
}

// parseSince parses --since: an RFC 3339 time, or a positive duration
// before now.
func parseSince(s string, now time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return time.Time{}, ff.Validationf("since", "%q is neither an RFC 3339 time (2026-01-02T15:04:05Z) nor a positive duration ago (15m)", s)
	}
	return now.Add(-d), nil
}

// parsePartitions parses a list of partition numbers and inclusive ranges,
// "0-15,42", into partition numbers in the order given (duplicates are
// harmless). The empty string means every partition (nil).
func parsePartitions(s string) ([]int16, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []int16
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		lo, hi, isRange := strings.Cut(item, "-")
		first, err := parsePartition(lo, item)
		if err != nil {
			return nil, err
		}
		last := first
		if isRange {
			if last, err = parsePartition(hi, item); err != nil {
				return nil, err
			}
			if last < first {
				return nil, ff.Validationf("partitions", "%q: the range runs backwards", item)
			}
		}
		for p := first; p <= last; p++ {
			out = append(out, int16(p))
		}
	}
	return out, nil
}

func parsePartition(s, item string) (int, error) {
	s = strings.TrimSpace(s)
	if s == "" || strings.ContainsAny(s, "+-") {
		return 0, ff.Validationf("partitions", "%q: want a number or a range like 0-15", item)
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n >= ff.MaxPartitions {
		return 0, ff.Validationf("partitions", "%q: %q is not a partition number (0..%d)", item, s, ff.MaxPartitions-1)
	}
	return n, nil
}

// tailer prints events and keeps the cursor file.
type tailer struct {
	flags   tailFlags
	out     *bufio.Writer
	logger  *slog.Logger
	waiting *waitLog
	// resumed says the stream started after the cursor file's cursor (so
	// the file already holds the start position).
	resumed bool
}

// waitLog is the open writers the stream last said it waits for.
type waitLog struct {
	mu   sync.Mutex
	open map[int64]subscribe.Wait
}

func (l *waitLog) note(w subscribe.Wait) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open == nil {
		l.open = map[int64]subscribe.Wait{}
	}
	if w.Done {
		delete(l.open, w.Xact)
	} else {
		l.open[w.Xact] = w
	}
}

// oldest returns the longest-open writer still open, if any.
func (l *waitLog) oldest() (subscribe.Wait, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var o subscribe.Wait
	found := false
	for _, w := range l.open {
		if !found || w.Age > o.Age {
			o, found = w, true
		}
	}
	return o, found
}

// eventJSON holds what every printed event carries.
type eventJSON struct {
	Cursor      subscribe.Cursor `json:"cursor"`
	EventID     int64            `json:"event_id"`
	ExecutionID ff.ExecutionID   `json:"execution_id"`
	Partition   int16            `json:"partition"`
	Namespace   *string          `json:"namespace"`    // null when the row has none
	InstanceTag *string          `json:"instance_tag"` // null when the row has none
	AtMs        int64            `json:"at_ms"`
}

// leaseJSON is a lease event as one JSON line.
type leaseJSON struct {
	eventJSON
	EventType        string  `json:"event_type"`
	LeaseID          *string `json:"lease_id"`
	AttemptIndex     *int32  `json:"attempt_index,omitempty"`
	LeaseEpoch       *int64  `json:"lease_epoch,omitempty"`
	WorkerInstanceID *string `json:"worker_instance_id,omitempty"`
}

// completionJSON is a completion event as one JSON line.
type completionJSON struct {
	eventJSON
	Outcome string  `json:"outcome"`
	FlowID  *string `json:"flow_id"`
}

// printable is an event ready to print.
type printable interface {
	cursor() subscribe.Cursor
	text() string
}

func orNil(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func leaseLine(ev subscribe.LeaseEvent) printable {
	return leaseJSON{
		eventJSON: eventJSON{Cursor: ev.Cursor, EventID: ev.EventID, ExecutionID: ev.ExecutionID, Partition: ev.Partition,
			Namespace: orNil(ev.Namespace), InstanceTag: orNil(ev.InstanceTag), AtMs: ev.AtMs},
		EventType: ev.Type, LeaseID: orNil(ev.LeaseID), AttemptIndex: ev.AttemptIndex, LeaseEpoch: ev.LeaseEpoch,
		WorkerInstanceID: orNil(ev.WorkerInstanceID),
	}
}

func completionLine(ev subscribe.CompletionEvent) printable {
	l := completionJSON{
		eventJSON: eventJSON{Cursor: ev.Cursor, EventID: ev.EventID, ExecutionID: ev.ExecutionID, Partition: ev.Partition,
			Namespace: orNil(ev.Namespace), InstanceTag: orNil(ev.InstanceTag), AtMs: ev.AtMs},
		Outcome: ev.Outcome,
	}
	if ev.FlowID.Valid {
		l.FlowID = orNil(ev.FlowID.UUID.String())
	}
	return l
}

func (e eventJSON) cursor() subscribe.Cursor { return e.Cursor }

// begin starts a text line: time, what happened, execution and partition.
func (e eventJSON) begin(b *strings.Builder, what string) {
	at := time.UnixMilli(e.AtMs).UTC().Format("2006-01-02T15:04:05.000Z")
	fmt.Fprintf(b, "%s %-9s %s p=%d", at, what, e.ExecutionID, e.Partition)
	textField(b, "ns", e.Namespace)
	textField(b, "tag", e.InstanceTag)
}

// end finishes a text line with the event id and cursor.
func (e eventJSON) end(b *strings.Builder) {
	fmt.Fprintf(b, " event_id=%d cursor=%s", e.EventID, e.Cursor)
}

func textField(b *strings.Builder, name string, v *string) {
	if v != nil {
		fmt.Fprintf(b, " %s=%q", name, *v)
	}
}

func (l leaseJSON) text() string {
	var b strings.Builder
	l.begin(&b, l.EventType)
	textField(&b, "lease", l.LeaseID)
	if l.AttemptIndex != nil {
		fmt.Fprintf(&b, " attempt=%d", *l.AttemptIndex)
	}
	if l.LeaseEpoch != nil {
		fmt.Fprintf(&b, " epoch=%d", *l.LeaseEpoch)
	}
	textField(&b, "worker", l.WorkerInstanceID)
	l.end(&b)
	return b.String()
}

func (l completionJSON) text() string {
	var b strings.Builder
	l.begin(&b, l.Outcome)
	textField(&b, "flow", l.FlowID)
	l.end(&b)
	return b.String()
}

// tail prints s's events until ctx ends, --max-events or --idle-exit.
// Stopping on a signal is success.
func tail[E any](ctx context.Context, t *tailer, s *subscribe.Stream[E], toLine func(E) printable) error {
	if t.flags.cursorFile != "" && !t.resumed {
		// Stored before the first event: a run that prints nothing must
		// still leave the next one a place to start from, or everything
		// committed between the two runs would be skipped ("now" again).
		if err := writeCursorFile(t.flags.cursorFile, s.StartCursor()); err != nil {
			return err
		}
	}
	enc := json.NewEncoder(t.out)
	n := 0
	lastEvent := time.Now()
	for t.flags.maxEvents == 0 || n < t.flags.maxEvents {
		nctx, cancel := ctx, context.CancelFunc(func() {})
		if t.flags.idleExit > 0 {
			nctx, cancel = context.WithDeadline(ctx, lastEvent.Add(t.flags.idleExit))
		}
		ev, err := s.Next(nctx)
		cancel()
		var disconnected *subscribe.DisconnectedError
		switch {
		case errors.As(err, &disconnected):
			continue // the stream logged it and reconnects
		case err != nil && ctx.Err() != nil:
			if _, ok := cli.Interrupted(ctx); ok {
				return nil
			}
			return err
		case errors.Is(err, context.DeadlineExceeded):
			if w, ok := t.waiting.oldest(); ok {
				t.logger.Warn("no event for the idle time; exiting while events still wait for an open writer",
					"idle_exit", t.flags.idleExit, "events", n, "writer", w.String())
				return nil
			}
			t.logger.Info("no event for the idle time; exiting", "idle_exit", t.flags.idleExit, "events", n)
			return nil
		case err != nil:
			return err
		}
		l := toLine(ev)
		if t.flags.format == "json" {
			err = enc.Encode(l)
		} else {
			_, err = fmt.Fprintln(t.out, l.text())
		}
		if err == nil {
			err = t.out.Flush()
		}
		if err != nil {
			return fmt.Errorf("writing output: %w", err)
		}
		if t.flags.cursorFile != "" {
			if err := writeCursorFile(t.flags.cursorFile, l.cursor()); err != nil {
				return err
			}
		}
		n++
		lastEvent = time.Now()
	}
	return nil
}

// readCursorFile returns the cursor stored in path; ok is false when the
// file does not exist. An empty file is a usage error: tail never leaves
// one (it replaces the file atomically), so it is a mistake, and starting
// from now would skip everything in between.
func readCursorFile(path string) (c subscribe.Cursor, ok bool, err error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return subscribe.Cursor{}, false, nil
	}
	if err != nil {
		return subscribe.Cursor{}, false, fmt.Errorf("reading --cursor-file: %w", err)
	}
	if strings.TrimSpace(string(b)) == "" {
		return subscribe.Cursor{}, false, cli.Usagef("--cursor-file %s is empty: remove it to start afresh, or put a cursor in it", path)
	}
	if c, err = subscribe.ParseCursor(string(b)); err != nil {
		return subscribe.Cursor{}, false, fmt.Errorf("--cursor-file %s: %w", path, err)
	}
	return c, true, nil
}

// writeCursorFile replaces path with c atomically: a reader (or a restart)
// sees the old cursor or the new one, never a torn write.
func writeCursorFile(path string, c subscribe.Cursor) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("writing --cursor-file: %w", err)
	}
	_, err = tmp.WriteString(c.String() + "\n")
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("writing --cursor-file: %w", err)
	}
	return nil
}
