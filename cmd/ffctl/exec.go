package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/ffriver/ffriver"
	"github.com/ffriver/ffriver/cmd/internal/cli"
	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
)

var execCommand = command{
	name:    "exec",
	summary: "inspect and act on executions: exec get|list|cancel|revoke",
	run:     func(ctx context.Context, args []string) int { return runExec(ctx, args, os.Stdout, os.Stderr) },
}

// execSubcommands are ffctl exec's subcommands, in the order its help lists
// them.
var execSubcommands = []subcommand{
	{"get", "an execution's state, attempts, lease and outbox events", runExecGet},
	{"list", "executions by namespace, lane, state, flow or id prefix, newest first", runExecList},
	{"cancel", "cancel an execution (terminal cancelled; a lease it holds is fenced)", runExecCancel},
	{"revoke", "take the lease away from a leased execution (back to waiting, no retry spent)", runExecRevoke},
}

func runExec(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runSubcommands(ctx, "exec", "[flags] [ID]",
		"The operator's view of executions, the equivalent of `temporal workflow describe`.\n"+
			"Every subcommand takes --format text|json and the common connection flags.", execSubcommands, args, stdout, stderr)
}

// subcommand is one subcommand of an ffctl command with subcommands (exec,
// consumer).
type subcommand struct {
	name, summary string
	run           func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

// runSubcommands runs the subcommand of ffctl command that args name, or
// prints the command's help (intro, then the subcommands).
func runSubcommands(ctx context.Context, command, usage, intro string, subs []subcommand, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" {
		w := stdout
		if len(args) == 0 {
			w = stderr
		}
		var b strings.Builder
		fmt.Fprintf(&b, "Usage: ffctl %s <subcommand> %s\n\n%s\n\nSubcommands:\n", command, usage, intro)
		for _, s := range subs {
			fmt.Fprintf(&b, "  %-7s %s\n", s.name, s.summary)
		}
		fmt.Fprintf(&b, "\nRun 'ffctl %s <subcommand> --help' for its flags.\n", command)
		_, _ = io.WriteString(w, b.String())
		if len(args) == 0 {
			return cli.ExitUsage
		}
		return cli.ExitOK
	}
	if isCompletionRequest(args[0]) {
		return completeSubcommands(ctx, subs, args, stdout, stderr)
	}
	var names []string
	for _, s := range subs {
		if s.name == args[0] {
			return s.run(ctx, args[1:], stdout, stderr)
		}
		if strings.HasPrefix(s.name, args[0]) || cli.EditDistance(args[0], s.name) <= 2 {
			names = append(names, s.name)
		}
	}
	fmt.Fprintf(stderr, "ffctl %s: unknown subcommand %q%s\nRun 'ffctl %s --help' for the list.\n", command, args[0], didYouMean(names), command)
	return cli.ExitUsage
}

// completeSubcommands answers a completion request (args: "__complete",
// then the words after the command): the names of subs that begin with the
// only word, else the completions of the subcommand the first word names.
func completeSubcommands(ctx context.Context, subs []subcommand, args []string, stdout, stderr io.Writer) int {
	if len(args) > 2 {
		for _, s := range subs {
			if s.name == args[1] {
				return s.run(ctx, append([]string{args[0]}, args[2:]...), stdout, stderr)
			}
		}
	}
	var b strings.Builder
	if len(args) == 2 {
		for _, s := range subs {
			switch {
			case !strings.HasPrefix(s.name, args[1]):
			case args[0] == cobra.ShellCompNoDescRequestCmd:
				fmt.Fprintf(&b, "%s\n", s.name)
			default:
				fmt.Fprintf(&b, "%s\t%s\n", s.name, s.summary)
			}
		}
	}
	fmt.Fprintf(&b, ":%d\n", cobra.ShellCompDirectiveNoFileComp)
	_, _ = io.WriteString(stdout, b.String())
	return cli.ExitOK
}

// execFlags are what every exec subcommand takes.
type execFlags struct {
	fs     *cli.FlagSet
	common *cli.Common
	format *string
}

func newExecFlags(name, argsUsage, summary string, stdout io.Writer) *execFlags {
	return newSubcommandFlags("ffctl exec "+name, argsUsage, summary, stdout)
}

// newSubcommandFlags returns the flags of the subcommand called name (its
// whole name, "ffctl exec get"): the common ones and --format.
func newSubcommandFlags(name, argsUsage, summary string, stdout io.Writer) *execFlags {
	fs := cli.NewFlagSet(name, argsUsage, summary+"\n"+cli.FailFastHelp)
	fs.Stdout = stdout
	f := &execFlags{fs: fs, common: cli.AddCommon(fs)}
	f.common.AddRiverSchema(fs)
	f.format = fs.String("format", "text", "output `format`: text or json")
	fs.CompleteValues("format", "text", "json")
	fs.AfterParse(func() error {
		if *f.format != "text" && *f.format != "json" {
			return cli.Usagef("--format %q: want text or json", *f.format)
		}
		return nil
	})
	return f
}

// parse parses args, with the positional arguments before, between or
// after the flags (`exec get ID --format json`), and returns the
// positional ones.
func (f *execFlags) parse(args []string) ([]string, error) {
	if err := f.fs.Parse(args); err != nil {
		return nil, err
	}
	return f.fs.Args(), nil
}

// parseID parses args and the one execution id they must hold.
func (f *execFlags) parseID(args []string) (ff.ExecutionID, error) {
	pos, err := f.parse(args)
	if err != nil {
		return ff.ExecutionID{}, err
	}
	if len(pos) != 1 {
		return ff.ExecutionID{}, cli.Usagef("want exactly one execution id ({fp:N}:<uuid>), got %d arguments", len(pos))
	}
	id, err := ff.ParseExecutionID(pos[0])
	if err != nil {
		if _, perr := executions.ParseIDPrefix(pos[0]); perr == nil {
			// The beginning of an id, as a newcomer copies it from a
			// table: exec list finds the whole one.
			err = fmt.Errorf("%w; to find an execution by the beginning of its id: ffctl exec list --id %s", err, pos[0])
		}
		return ff.ExecutionID{}, &cli.UsageError{Err: err}
	}
	return id, nil
}

// connect opens the one-connection pool, named after the command, of a
// subcommand that only runs a few statements (config, consumer).
func (f *execFlags) connect(ctx context.Context) (*pgxpool.Pool, error) {
	return f.common.OpenPool(ctx, cli.PoolOptions{AppName: f.fs.Name(), MaxConns: 1})
}

// open connects and opens the store (with the flow cascade wired in, so a
// cancelled flow member advances its flow).
func (f *execFlags) open(ctx context.Context) (*executions.Store, func(), error) {
	pool, err := f.common.OpenPool(ctx, cli.PoolOptions{AppName: f.fs.Name(), MaxConns: 2})
	if err != nil {
		return nil, nil, err
	}
	svc, err := ffriver.New(ctx, pool, ffriver.Config{Schema: f.common.Schema, RiverSchema: f.common.RiverSchema})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return svc.Store(), pool.Close, nil
}

func runExecGet(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f := newExecFlags("get", "ID",
		"Shows an execution: its state columns, attempts and retry budget, the current attempt's lease\n"+
			"(worker, epoch, expiry), deadline and delay, and its newest lease and completion events from\n"+
			"the outbox, oldest first. Exits 1 when the execution does not exist; one that execution\n"+
			"retention removed is said to be, with when, for one retention period after its removal.", stdout)
	events := f.fs.Int("events", executions.DefaultHistoryLimit, "show at most this many of the newest outbox `events` (1..10000)")
	f.fs.AfterParse(func() error { return cli.CheckInt("events", *events, 1, 10000) })
	id, err := f.parseID(args)
	if err != nil {
		return cli.Report(stderr, f.fs.Name(), err)
	}
	st, closePool, err := f.open(ctx)
	if err != nil {
		return cli.Report(stderr, f.fs.Name(), err)
	}
	defer closePool()
	return cli.Report(stderr, f.fs.Name(), showExecution(ctx, st, id, *events, *f.format, stdout))
}

// showExecution prints an execution with its events.
func showExecution(ctx context.Context, st *executions.Store, id ff.ExecutionID, events int, format string, w io.Writer) error {
	e, err := st.Get(ctx, id)
	if err != nil {
		return err
	}
	var h []executions.HistoryEvent
	if events > 0 {
		if h, err = st.History(ctx, id, events); err != nil {
			return err
		}
	}
	v := newExecView(e, st.NowMs())
	v.Events = make([]eventView, 0, len(h))
	for _, ev := range h {
		v.Events = append(v.Events, newEventView(ev))
	}
	if format == "json" {
		return writeJSON(w, v)
	}
	return writeExecText(w, v)
}

func runExecList(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f := newExecFlags("list", "",
		"Lists executions, newest first, with their state, lane, namespace, attempt and lease.\n"+
			"Filters combine; without any it lists the newest --limit executions.", stdout)
	var p executions.ListParams
	var flow string
	f.fs.StringVar(&p.Namespace, "namespace", "", "only executions of this `namespace`")
	f.fs.StringVar(&p.Lane, "lane", "", "only executions of this `lane`")
	f.fs.StringVar(&p.State, "state", "", "only executions in this `state`: "+strings.Join(executions.PublicStates(), ", "))
	f.fs.StringVar(&flow, "flow", "", "only members of the flow with this `uuid`")
	var id string
	f.fs.StringVar(&id, "id", "", fmt.Sprintf("only the execution with this `id` ({fp:N}:<uuid>) or whose id begins so\n"+
		"({fp:N}:<hex>, or at least %d hex digits of the UUID)", executions.MinIDPrefix))
	f.fs.IntVar(&p.Limit, "limit", executions.DefaultListLimit, fmt.Sprintf("list at most `n` executions (at most %d)", executions.MaxListLimit))
	var after string
	f.fs.StringVar(&after, "after", "", "the next page: the executions after this `cursor` (a full page ends with the\n"+
		"--after to pass; in JSON each execution's list_cursor)")
	f.fs.AfterParse(func() error {
		if after != "" {
			c, err := executions.ParseListCursor(after)
			if err != nil {
				return &cli.UsageError{Err: fmt.Errorf("--after: %w", err)}
			}
			p.After = c
		}
		for _, t := range []struct{ flag, v string }{{"namespace", p.Namespace}, {"lane", p.Lane}, {"state", p.State}} {
			if err := cli.CheckText(t.flag, t.v, ff.MaxName); err != nil {
				return err
			}
		}
		if flow != "" {
			u, err := uuid.Parse(flow)
			if err != nil {
				return cli.Usagef("--flow %s: not a UUID", ff.Excerpt(flow))
			}
			p.FlowID = u
		}
		if id != "" {
			pre, err := executions.ParseIDPrefix(id)
			if err != nil {
				return &cli.UsageError{Err: err}
			}
			p.ID = pre
		}
		if p.Limit < 1 || p.Limit > executions.MaxListLimit {
			return cli.Usagef("--limit %d: want 1..%d", p.Limit, executions.MaxListLimit)
		}
		return nil
	})
	if _, err := f.parse(args); err != nil {
		return cli.Report(stderr, f.fs.Name(), err)
	}
	st, closePool, err := f.open(ctx)
	if err != nil {
		return cli.Report(stderr, f.fs.Name(), err)
	}
	defer closePool()
	es, err := st.List(ctx, p)
	if err != nil {
		return cli.Report(stderr, f.fs.Name(), err)
	}
	now := st.NowMs()
	views := make([]execView, 0, len(es))
	for _, e := range es {
		v := newExecView(e, now)
		v.ListCursor = executions.ListCursorOf(e).String()
		views = append(views, v)
	}
	if *f.format == "json" {
		return cli.Report(stderr, f.fs.Name(), writeJSON(stdout, views))
	}
	return cli.Report(stderr, f.fs.Name(), writeListText(stdout, views, p.Limit))
}

func runExecCancel(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f := newExecFlags("cancel", "ID",
		"Cancels a non-terminal execution: it becomes terminal cancelled, a lease it holds is fenced\n"+
			"(its worker's renew or complete then fails), and its completion event (and a lease revoked\n"+
			"event if it was leased) is written in the same transaction; a flow member's cascade follows.\n"+
			"Then shows the execution as exec get does. Exits 1 when it is already terminal or unknown.", stdout)
	var p executions.CancelParams
	f.fs.StringVar(&p.Reason, "reason", "", "stored as cancellation_reason (default \"cancelled\")")
	f.fs.StringVar(&p.By, "by", "", "stored as cancelled_by (default \"operator\")")
	f.fs.AfterParse(func() error {
		return errors.Join(cli.CheckText("reason", p.Reason, ff.MaxReason), cli.CheckText("by", p.By, ff.MaxName))
	})
	id, err := f.parseID(args)
	if err != nil {
		return cli.Report(stderr, f.fs.Name(), err)
	}
	st, closePool, err := f.open(ctx)
	if err != nil {
		return cli.Report(stderr, f.fs.Name(), err)
	}
	defer closePool()
	if err := st.Cancel(ctx, id, p); err != nil {
		return cli.Report(stderr, f.fs.Name(), err)
	}
	return cli.Report(stderr, f.fs.Name(), showExecution(ctx, st, id, executions.DefaultHistoryLimit, *f.format, stdout))
}

func runExecRevoke(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f := newExecFlags("revoke", "ID",
		"Takes the lease away from a leased execution: the lease is fenced (epoch+1), the execution is\n"+
			"waiting and eligible again, no retry is spent, and a lease revoked event is written.\n"+
			"Then shows the execution as exec get does. Exits 1 when it holds no lease or is unknown.", stdout)
	reason := f.fs.String("reason", "", "stored in the execution's raw_fields as revoke_reason")
	f.fs.AfterParse(func() error { return cli.CheckText("reason", *reason, ff.MaxReason) })
	id, err := f.parseID(args)
	if err != nil {
		return cli.Report(stderr, f.fs.Name(), err)
	}
	st, closePool, err := f.open(ctx)
	if err != nil {
		return cli.Report(stderr, f.fs.Name(), err)
	}
	defer closePool()
	if err := st.Revoke(ctx, id, *reason); err != nil {
		return cli.Report(stderr, f.fs.Name(), err)
	}
	return cli.Report(stderr, f.fs.Name(), showExecution(ctx, st, id, executions.DefaultHistoryLimit, *f.format, stdout))
}

// execView is an execution as ffctl exec prints it (JSON field names are
// stable).
type execView struct {
	ID                 string            `json:"id"`
	State              string            `json:"state"`
	LifecyclePhase     string            `json:"lifecycle_phase"`
	OwnershipState     string            `json:"ownership_state"`
	EligibilityState   string            `json:"eligibility_state"`
	AttemptState       string            `json:"attempt_state"`
	BlockingReason     *string           `json:"blocking_reason,omitempty"`
	Lane               string            `json:"lane"`
	Namespace          string            `json:"namespace,omitempty"`
	Tags               map[string]string `json:"tags,omitempty"`
	FlowID             *uuid.UUID        `json:"flow_id,omitempty"`
	Priority           int32             `json:"priority"`
	AttemptIndex       int32             `json:"attempt_index"`
	Attempts           int32             `json:"attempts"`
	MaxRetries         int               `json:"max_retries"`
	LeaseReclaimCount  int32             `json:"lease_reclaim_count"`
	CreatedAt          time.Time         `json:"created_at"`
	StartedAt          *time.Time        `json:"started_at,omitempty"`
	TerminalAt         *time.Time        `json:"terminal_at,omitempty"`
	DeadlineAt         *time.Time        `json:"deadline_at,omitempty"`
	DelayUntil         *time.Time        `json:"delay_until,omitempty"`
	CancellationReason *string           `json:"cancellation_reason,omitempty"`
	CancelledBy        *string           `json:"cancelled_by,omitempty"`
	LastFailureMessage string            `json:"last_failure_message,omitempty"`
	Lease              *leaseView        `json:"lease,omitempty"`
	Attempt            *attemptView      `json:"attempt,omitempty"`
	Events             []eventView       `json:"events,omitempty"`
	// ListCursor is the execution's position in exec list's order: pass
	// the last one of a page as --after for the next page.
	ListCursor string `json:"list_cursor,omitempty"`
}

// leaseView is the current attempt's live lease.
type leaseView struct {
	LeaseID          *uuid.UUID `json:"lease_id,omitempty"`
	Epoch            int64      `json:"epoch"`
	WorkerID         *string    `json:"worker_id,omitempty"`
	WorkerInstanceID *string    `json:"worker_instance_id,omitempty"`
	ExpiresAt        time.Time  `json:"expires_at"`
	// Expired is true when the lease ran out and nobody has expired it yet.
	Expired bool `json:"expired"`
}

// attemptView is the current attempt's row.
type attemptView struct {
	Index      int32      `json:"index"`
	Epoch      int64      `json:"epoch"`
	StartedAt  *time.Time `json:"started_at,omitempty"`
	TerminalAt *time.Time `json:"terminal_at,omitempty"`
	Outcome    *string    `json:"outcome,omitempty"`
}

// eventView is one outbox event.
type eventView struct {
	Stream           string     `json:"stream"`
	EventID          int64      `json:"event_id"`
	Type             string     `json:"type"`
	OccurredAt       time.Time  `json:"occurred_at"`
	AttemptIndex     *int32     `json:"attempt_index,omitempty"`
	LeaseEpoch       *int64     `json:"lease_epoch,omitempty"`
	LeaseID          *string    `json:"lease_id,omitempty"`
	WorkerInstanceID *string    `json:"worker_instance_id,omitempty"`
	DispatchedAt     *time.Time `json:"dispatched_at,omitempty"`
}

func msTime(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

func msPtr(ms *int64) *time.Time {
	if ms == nil {
		return nil
	}
	t := msTime(*ms)
	return &t
}

func newExecView(e *executions.Execution, nowMs int64) execView {
	v := execView{
		ID: e.ID.String(), State: e.PublicState, LifecyclePhase: e.LifecyclePhase, OwnershipState: e.OwnershipState,
		EligibilityState: e.EligibilityState, AttemptState: e.AttemptState, BlockingReason: e.BlockingReason,
		Lane: e.Lane, Namespace: e.Namespace, Tags: e.Tags, FlowID: e.FlowID, Priority: e.Priority,
		AttemptIndex: e.AttemptIndex, MaxRetries: e.Policy.RetryPolicy.MaxRetries, LeaseReclaimCount: e.LeaseReclaimCount,
		CreatedAt: msTime(e.CreatedAtMs), StartedAt: msPtr(e.StartedAtMs), TerminalAt: msPtr(e.TerminalAtMs),
		DeadlineAt: msPtr(e.DeadlineAtMs), DelayUntil: msPtr(e.DelayUntilMs),
		CancellationReason: e.CancellationReason, CancelledBy: e.CancelledBy, LastFailureMessage: e.LastFailureMessage,
	}
	// attempt_index is 0-based and points at the next attempt after a
	// retry, before its claim: attempts started so far is the index, plus
	// one once the current index has its row.
	v.Attempts = e.AttemptIndex
	if a := e.Attempt; a != nil {
		v.Attempts++
		v.Attempt = &attemptView{Index: a.Index, Epoch: a.Epoch, StartedAt: msPtr(a.StartedAtMs), TerminalAt: msPtr(a.TerminalAtMs), Outcome: a.Outcome}
		if a.LeaseExpiresAtMs != nil && a.TerminalAtMs == nil {
			v.Lease = &leaseView{LeaseID: a.LeaseID, Epoch: a.Epoch, WorkerID: a.WorkerID, WorkerInstanceID: a.WorkerInstanceID,
				ExpiresAt: msTime(*a.LeaseExpiresAtMs), Expired: *a.LeaseExpiresAtMs <= nowMs}
		}
	}
	return v
}

func newEventView(h executions.HistoryEvent) eventView {
	return eventView{Stream: h.Stream, EventID: h.EventID, Type: h.Type, OccurredAt: msTime(h.OccurredAtMs),
		AttemptIndex: h.AttemptIndex, LeaseEpoch: h.LeaseEpoch, LeaseID: h.LeaseID, WorkerInstanceID: h.WorkerInstanceID,
		DispatchedAt: msPtr(h.DispatchedAtMs)}
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

const tsFormat = "2006-01-02T15:04:05.000Z07:00"

func ts(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Format(tsFormat)
}

func str(s *string) string {
	if s == nil || *s == "" {
		return "-"
	}
	return *s
}

// writeExecText prints one execution as aligned "field  value" lines and
// its events as a table.
func writeExecText(w io.Writer, v execView) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	row := func(k, format string, args ...any) { fmt.Fprintf(tw, "%s\t"+format+"\n", append([]any{k}, args...)...) }
	row("execution", "%s", v.ID)
	row("state", "%s (phase %s, ownership %s, eligibility %s, attempt %s)", v.State, v.LifecyclePhase, v.OwnershipState, v.EligibilityState, v.AttemptState)
	if v.BlockingReason != nil {
		row("blocked", "%s", *v.BlockingReason)
	}
	ns := v.Namespace
	if ns == "" {
		ns = "-"
	}
	row("lane", "%s", v.Lane)
	row("namespace", "%s", ns)
	if len(v.Tags) > 0 {
		tags := make([]string, 0, len(v.Tags))
		for k, val := range v.Tags {
			tags = append(tags, k+"="+val)
		}
		slices.Sort(tags)
		row("tags", "%s", strings.Join(tags, " "))
	}
	if v.FlowID != nil {
		row("flow", "%s", v.FlowID)
	}
	row("priority", "%d", v.Priority)
	row("attempts", "%d started, current index %d, max retries %d, leases reclaimed %d", v.Attempts, v.AttemptIndex, v.MaxRetries, v.LeaseReclaimCount)
	if l := v.Lease; l != nil {
		state := "live"
		if l.Expired {
			state = "EXPIRED, not yet expired by the scanner"
		}
		lid := "-"
		if l.LeaseID != nil {
			lid = l.LeaseID.String()
		}
		row("lease", "%s: worker %s (instance %s), epoch %d, lease %s, expires %s", state, str(l.WorkerID), str(l.WorkerInstanceID), l.Epoch, lid, l.ExpiresAt.Format(tsFormat))
	} else {
		row("lease", "none")
	}
	if a := v.Attempt; a != nil {
		row("attempt", "index %d, epoch %d, started %s, ended %s, outcome %s", a.Index, a.Epoch, ts(a.StartedAt), ts(a.TerminalAt), str(a.Outcome))
	}
	row("created", "%s", v.CreatedAt.Format(tsFormat))
	if v.StartedAt != nil {
		row("started", "%s", ts(v.StartedAt))
	}
	if v.DelayUntil != nil {
		row("delayed until", "%s", ts(v.DelayUntil))
	}
	if v.DeadlineAt != nil {
		row("deadline", "%s", ts(v.DeadlineAt))
	}
	if v.TerminalAt != nil {
		row("terminal", "%s", ts(v.TerminalAt))
	}
	if v.CancellationReason != nil || v.CancelledBy != nil {
		row("cancelled", "%s by %s", str(v.CancellationReason), str(v.CancelledBy))
	}
	if v.LastFailureMessage != "" {
		row("last failure", "%s", v.LastFailureMessage)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nevents (%d, oldest first)\n", len(v.Events))
	if len(v.Events) == 0 {
		_, err := fmt.Fprintln(w, "  (none in the outbox)")
		return err
	}
	tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  occurred at\tstream\ttype\tattempt\tepoch\tworker instance\tevent id")
	for _, e := range v.Events {
		attempt, epoch := "-", "-"
		if e.AttemptIndex != nil {
			attempt = fmt.Sprint(*e.AttemptIndex)
		}
		if e.LeaseEpoch != nil {
			epoch = fmt.Sprint(*e.LeaseEpoch)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%d\n", e.OccurredAt.Format(tsFormat), e.Stream, e.Type, attempt, epoch, str(e.WorkerInstanceID), e.EventID)
	}
	return tw.Flush()
}

// writeListText writes a page of exec list; a full page (limit rows) ends
// with the --after that lists the next.
func writeListText(w io.Writer, vs []execView, limit int) error {
	if len(vs) == 0 {
		_, err := fmt.Fprintln(w, "no executions match")
		return err
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "execution\tstate\tlane\tnamespace\tattempts\tlease\tcreated")
	for _, v := range vs {
		lease := "-"
		if l := v.Lease; l != nil {
			lease = str(l.WorkerID) + " (" + str(l.WorkerInstanceID) + ") until " + l.ExpiresAt.Format(tsFormat)
			if l.Expired {
				lease += " (expired)"
			}
		}
		ns := v.Namespace
		if ns == "" {
			ns = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", v.ID, v.State, v.Lane, ns, v.Attempts, lease, v.CreatedAt.Format(tsFormat))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(vs) == limit {
		_, err := fmt.Fprintf(w, "more may follow: the next page is the same command with --after %s\n", vs[len(vs)-1].ListCursor)
		return err
	}
	return nil
}
