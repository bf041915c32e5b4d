package leasecheck

import (
	"fmt"
	"math"
	"strings"

	"github.com/ffriver/ffriver/ff"
	"github.com/google/uuid"
)

// This file is the specification: a sequential model of one execution's
// state machine, written from the store's rules (executions/lease.go,
// operator.go, actions.go, flow.go and docs/api.md's lifecycle table). Every
// rule names the store behaviour it encodes. The same Transition function
// judges an operation in three places: porcupine's linearizability search
// over the calls, the replay of an execution's outbox transactions in
// commit order, and (through Expect) the matching of calls to transactions.

// Phase is where an execution is, as the lease protocol sees it.
type Phase uint8

// The phases. They fold the store's five state columns into what decides
// the outcome of a lease operation.
const (
	// Absent: not created yet.
	Absent Phase = iota
	// Waiting: runnable and eligible now (claimable).
	Waiting
	// Delayed: runnable, not eligible until DelayUntil. The
	// delayed_promoter makes it eligible once its clock (a binary's: the
	// system clock, or up to Faults.BinaryClockSkew/2 either way of it)
	// reaches DelayUntil, and writes no event: the promotion is not
	// observed, so a Delayed execution is claimable by a Claim that
	// returned once a scanner's clock could read DelayUntil (WallHi).
	Delayed
	// Blocked: runnable, blocked by dependencies. A flow hop releases it
	// when its edge group is satisfied, without an event: a Claim that
	// finds it released is legal (the flow check at the end verifies that
	// the group was satisfied), and a skip is legal only before any claim.
	Blocked
	// Active: leased; the current attempt row holds a lease.
	Active
	// Terminal: completed, failed, expired, cancelled or skipped (Outcome).
	Terminal
	// Removed: execution retention deleted the terminal row with its
	// attempts (Outcome stays). Every call of the incarnation is then
	// refused: one with its lease gets ErrNotFound while the id has no row,
	// ErrStaleLease once the id was created again (IDRow: the fence finds
	// another incarnation's attempt, or one without the lease id); Cancel,
	// Revoke and Reclaim get ErrNotFound, and Claim finds nothing.
	Removed
)

// String names the phase.
func (p Phase) String() string {
	switch p {
	case Absent:
		return "absent"
	case Waiting:
		return "waiting"
	case Delayed:
		return "delayed"
	case Blocked:
		return "blocked"
	case Active:
		return "active"
	case Terminal:
		return "terminal"
	case Removed:
		return "removed"
	}
	return fmt.Sprintf("Phase(%d)", p)
}

// State is one execution's state in the model. It is a comparable value:
// porcupine compares states with ==.
type State struct {
	Phase Phase
	// DelayUntil is delay_until_ms while Delayed.
	DelayUntil int64
	// Attempt is ff_exec_core.attempt_index.
	Attempt int32
	// Row: the attempt row of Attempt exists (ff_attempt). A retry moves
	// Attempt on without a row; the next Claim creates it.
	Row bool
	// Epoch, LeaseID, Holder, HasExpiry and Expires are that row's
	// lease_epoch, lease_id, worker_instance_id and lease_expires_at_ms
	// (zero without a row). Closing an attempt clears the expiry.
	Epoch     int64
	LeaseID   uuid.UUID
	Holder    string
	HasExpiry bool
	Expires   int64
	// MaxEpoch is the highest lease_epoch of all the execution's attempt
	// rows: a Claim takes MaxEpoch+1.
	MaxEpoch int64
	// Outcome of a Terminal execution (ff.Outcome*).
	Outcome string
	// The execution's policy, fixed at creation.
	MaxRetries int32
	// BackoffMs is the fixed retry backoff (0: retry at once).
	BackoffMs int64
	// Deadline is deadline_at_ms (0: none).
	Deadline int64
	// IDRow, while Removed: the id has a row again, a later incarnation's.
	IDRow bool
	// PublicRunning: terminal by an upstream handle-based Complete or
	// Fail, which leave public_state as upstream's claim wrote it
	// ("running"; model_upstream.go).
	PublicRunning bool
}

// leased is the store's locked.leased(): active with a lease expiry.
func (s State) leased() bool { return s.Phase == Active && s.HasExpiry }

// The one rule for the instant a time ends (executions' passed): a lease
// holds while now < its expiry, an execution may hold a lease while now <
// its deadline; at the instant itself each has ended. The store's fence,
// Claim, Renew, Reclaim and every scanner decide by it.

// leaseEnd is when the row's lease ends for the fence: its expiry, or the
// execution's deadline when that comes first (a lease the store granted
// never reaches past the deadline; the fence checks both all the same).
func (s State) leaseEnd() int64 {
	if s.Deadline != 0 && s.Deadline < s.Expires {
		return s.Deadline
	}
	return s.Expires
}

// grantReadings narrows w to the clock readings t at which a lease granted
// or renewed for ttl gets the expiry exp (Claim, Renew, Reclaim): exp is
// t+ttl capped at the deadline (0: none), and t is before the deadline (no
// lease is granted at or past it). A capped expiry leaves a range of
// readings open; an uncapped one names its reading. ok is false when no
// reading fits.
func grantReadings(w Window, exp, ttl, deadline int64) (r Window, ok bool) {
	r = Window{exp - ttl, exp - ttl}
	if deadline != 0 {
		switch {
		case exp > deadline:
			return w, false
		case exp == deadline:
			r = Window{deadline - ttl, deadline - 1}
		}
	}
	r = Window{max(r.Lo, w.Lo), min(r.Hi, w.Hi)}
	return r, r.Lo <= r.Hi
}

// grantWhy says why a granted expiry fits no reading of w.
func grantWhy(what string, exp int64, w Window, ttl, deadline int64) string {
	if deadline == 0 {
		return fmt.Sprintf("%s expiry %d is not the call's clock %s plus the TTL %d", what, exp, w, ttl)
	}
	return fmt.Sprintf("%s expiry %d is not the call's clock %s plus the TTL %d capped at the deadline %d, granted before it",
		what, exp, w, ttl, deadline)
}

// dropRow is the state of an execution that moved on to an attempt whose
// row does not exist yet (COALESCE(a.lease_epoch, 0) reads 0).
func (s State) dropRow() State {
	s.Row, s.Epoch, s.LeaseID, s.Holder, s.HasExpiry, s.Expires = false, 0, uuid.Nil, "", false, 0
	return s
}

// closeAttempt is queueCloseAttempt: the lease expiry is cleared and, with
// bump, the epoch moves on so that the holder is fenced out.
func (s State) closeAttempt(bump bool) State {
	s.HasExpiry, s.Expires = false, 0
	if bump {
		s.Epoch++
		s.MaxEpoch = max(s.MaxEpoch, s.Epoch)
	}
	return s
}

// retry is queueRetry: the next attempt, eligible now or, with a backoff,
// delayed until now+backoff.
func (s State) retry(now int64) State {
	s = s.dropRow()
	s.Attempt++
	s.Phase, s.DelayUntil = Waiting, 0
	if s.BackoffMs > 0 {
		s.Phase, s.DelayUntil = Delayed, now+s.BackoffMs
	}
	return s
}

func (s State) terminal(outcome string) State {
	s.Phase, s.DelayUntil, s.Outcome = Terminal, 0, outcome
	return s
}

// String renders the state compactly, for reports and visualizations.
func (s State) String() string {
	if s.Phase == Absent {
		return "absent"
	}
	var b strings.Builder
	b.WriteString(s.Phase.String())
	switch s.Phase {
	case Delayed:
		fmt.Fprintf(&b, " until %d", s.DelayUntil)
	case Terminal:
		fmt.Fprintf(&b, " %s", s.Outcome)
	case Removed:
		fmt.Fprintf(&b, " (was %s", s.Outcome)
		if s.IDRow {
			b.WriteString("; the id created again")
		}
		b.WriteString(")")
	}
	fmt.Fprintf(&b, " a%d", s.Attempt)
	if s.Row {
		fmt.Fprintf(&b, " e%d lease %s", s.Epoch, short(s.LeaseID))
		if s.HasExpiry {
			fmt.Fprintf(&b, " exp %d", s.Expires)
		}
	} else {
		b.WriteString(" (no row)")
	}
	if s.MaxEpoch != s.Epoch {
		fmt.Fprintf(&b, " max e%d", s.MaxEpoch)
	}
	return b.String()
}

func short(u uuid.UUID) string {
	if u == uuid.Nil {
		return "-"
	}
	return u.String()[:8]
}

// Kind is what one step of an operation does.
type Kind uint8

// The kinds of steps. OpScanner is not a call: it is a transaction of the
// scanners or the flow engine, known only from its outbox events.
const (
	OpCreate Kind = iota + 1
	OpClaim
	OpRenew
	OpComplete
	OpFail
	OpDelay
	OpCancel
	OpRevoke
	OpReclaim
	OpScanner
	// OpRelease is last so that the other kinds keep their values.
	OpRelease
	// The upstream writer's operations follow (model_upstream.go).
)

// String names the kind of step.
func (k Kind) String() string {
	switch k {
	case OpCreate:
		return "Create"
	case OpClaim:
		return "Claim"
	case OpRenew:
		return "Renew"
	case OpComplete:
		return "Complete"
	case OpFail:
		return "Fail"
	case OpDelay:
		return "Delay"
	case OpCancel:
		return "Cancel"
	case OpRevoke:
		return "Revoke"
	case OpReclaim:
		return "Reclaim"
	case OpScanner:
		return "Scanner"
	case OpRelease:
		return "Release"
	}
	if name := upstreamKindName(k); name != "" {
		return name
	}
	return fmt.Sprintf("Kind(%d)", k)
}

// ErrClass is the class of a call's error.
type ErrClass uint8

// The error classes, one per typed error of package ff a lease operation
// returns, and ErrOther for everything else: a connection or unknown error,
// whose outcome is unknown.
const (
	OK ErrClass = iota
	ErrStale
	ErrExpired
	ErrNotActive
	ErrHeld
	ErrNotFound
	ErrOther
)

// String names the error class as package ff names its error.
func (c ErrClass) String() string {
	switch c {
	case OK:
		return "ok"
	case ErrStale:
		return "ErrStaleLease"
	case ErrExpired:
		return "ErrLeaseExpired"
	case ErrNotActive:
		return "ErrNotActive"
	case ErrHeld:
		return "ErrLeaseHeld"
	case ErrNotFound:
		return "ErrNotFound"
	case ErrOther:
		return "unknown error"
	}
	return fmt.Sprintf("ErrClass(%d)", c)
}

// classes is a set of ErrClass.
type classes uint16

func setOf(cs ...ErrClass) classes {
	var s classes
	for _, c := range cs {
		s |= 1 << c
	}
	return s
}

func (s classes) has(c ErrClass) bool { return s&(1<<c) != 0 }

func (s classes) String() string {
	var out []string
	for c := OK; c <= ErrOther; c++ {
		if s.has(c) {
			out = append(out, c.String())
		}
	}
	if len(out) == 0 {
		return "nothing"
	}
	return strings.Join(out, " or ")
}

// LeaseRef is a lease as the API returned it (executions.Lease, without the
// payload).
type LeaseRef struct {
	Attempt   int32
	Epoch     int64
	LeaseID   uuid.UUID
	ExpiresAt int64
	Instance  string
}

// String renders the lease compactly.
func (l LeaseRef) String() string {
	return fmt.Sprintf("a%d e%d %s exp %d", l.Attempt, l.Epoch, short(l.LeaseID), l.ExpiresAt)
}

// CreateSpec is what Create (and AddDependencies, for a downstream) fixed.
type CreateSpec struct {
	// DelayUntil (ms) parks the execution until then (0: eligible now).
	DelayUntil int64
	// Blocked: a flow downstream whose edge group AddDependencies fixed.
	Blocked    bool
	MaxRetries int32
	BackoffMs  int64
	Deadline   int64
}

// Step is one API call: a plain call is an operation of one step; a
// composite transaction (several ...Tx calls, then COMMIT) is one
// operation of several.
type Step struct {
	Kind Kind
	// Lease passed to Renew, Complete, Fail and Delay.
	Lease LeaseRef
	// TTL (ms) of Claim, Renew and Reclaim.
	TTL int64
	// Until (ms) of Delay.
	Until int64
	// Permanent Fail.
	Permanent bool
	// Instance is the WorkerInstanceID of Claim and Reclaim.
	Instance string
	// Create is what a Create fixed.
	Create CreateSpec
}

// Result is what one step returned.
type Result struct {
	Err ErrClass
	// Empty: Claim returned no lease.
	Empty bool
	// Lease returned by Claim, Renew and Reclaim.
	Lease LeaseRef
	// FailResult of Fail.
	Retried     bool
	NextAttempt int32
	DelayUntil  int64
}

// Window is an inclusive range of a clock's readings (ms).
type Window struct{ Lo, Hi int64 }

// Unbounded is the Hi of a window whose end is unknown (a call whose
// outcome is unknown never returned).
const Unbounded = math.MaxInt64

func (w Window) contains(t int64) bool { return w.Lo <= t && t <= w.Hi }

// String renders the window as an interval.
func (w Window) String() string {
	if w.Hi == Unbounded {
		return fmt.Sprintf("[%d, ∞)", w.Lo)
	}
	return fmt.Sprintf("[%d, %d]", w.Lo, w.Hi)
}

// Input is one operation on one execution.
type Input struct {
	// Exec is the execution's id ({fp:N}:<uuid>): porcupine's partition key.
	Exec   string
	Client int
	Steps  []Step
	// Clock is the window of the store's clock over the call: read before
	// the call and after it returned. The store decides every
	// time-dependent outcome with one reading of its clock inside it. For
	// a scanner transaction it is the reading itself (occurred_at_ms).
	Clock Window
	// WallHi is the latest a scanner's clock could read when the call
	// returned (the system clock, plus how far a binary's may be ahead):
	// a delayed execution was promoted by then only if its delay was due
	// by then.
	WallHi int64
	// Derived: a scanner transaction (OpScanner), from the outbox.
	Derived bool
	// Mark, when set, is not a call but what happened to the id's row:
	// this incarnation removed by execution retention, or a later one
	// created or removed (known from the run's trigger and the creator's
	// calls).
	Mark Mark
}

// Mark is a change of an execution id's row that is not an operation of
// the incarnation's lease protocol.
type Mark uint8

// The marks.
const (
	// MarkRemoved: execution retention deleted this incarnation's row, a
	// terminal one (it writes no event).
	MarkRemoved Mark = iota + 1
	// MarkIDCreated: a later incarnation of the id was created.
	MarkIDCreated
	// MarkIDRemoved: a later incarnation of the id was removed.
	MarkIDRemoved
)

// String names the mark.
func (m Mark) String() string {
	switch m {
	case MarkRemoved:
		return "removed by execution retention"
	case MarkIDCreated:
		return "the id created again"
	case MarkIDRemoved:
		return "the id's later incarnation removed"
	}
	return fmt.Sprintf("Mark(%d)", m)
}

// mark applies a mark: retention removes only a terminal execution; a
// later incarnation exists only after this one was removed, and is
// created and removed in turn.
func mark(s State, m Mark) ([]State, string) {
	switch m {
	case MarkRemoved:
		if s.Phase != Terminal {
			return nil, fmt.Sprintf("execution retention removed a %s execution: it removes only terminal ones", s.Phase)
		}
		s.Phase = Removed
		return []State{s}, ""
	case MarkIDCreated:
		if s.Phase != Removed || s.IDRow {
			return nil, fmt.Sprintf("the id was created again while this incarnation is %s", s)
		}
		s.IDRow = true
		return []State{s}, ""
	case MarkIDRemoved:
		if s.Phase != Removed || !s.IDRow {
			return nil, fmt.Sprintf("a later incarnation of the id was removed while this one is %s", s)
		}
		s.IDRow = false
		return []State{s}, ""
	}
	return nil, fmt.Sprintf("unknown mark %d", m)
}

// Output is what an operation returned.
type Output struct {
	// Results of the steps that ran: a failed step ends the transaction,
	// which rolls back.
	Results []Result
	// Unknown: the call failed with an unknown error (a lost connection,
	// at COMMIT or before), so whether it committed is not known.
	Unknown bool
	// Resolved: an unknown call whose transaction was found in the outbox
	// (Results were rebuilt from its events). An unresolved unknown call
	// committed nothing (every transition that commits writes events),
	// unless Maybe lists results: then it committed nothing, or one of its
	// transactions, which other unknown calls fit too, was its, with
	// those results.
	Resolved bool
	Maybe    [][]Result
	// RolledBack: every step succeeded and the client then rolled the
	// transaction back: the results must be legal, and nothing changes.
	RolledBack bool
	// Events of the operation's transaction, when known: always for a
	// scanner transaction, and for every call in the commit-order replay.
	// Then the model checks that the transition wrote exactly these events,
	// and decides with the clock reading they record.
	Events *Tx
}

// LeaseEvent is one ff_lease_event row of an execution.
type LeaseEvent struct {
	EventID  int64
	Type     string
	Attempt  int32
	Epoch    int64
	LeaseID  uuid.UUID
	Instance string
	AtMs     int64
}

// String renders the event compactly.
func (e LeaseEvent) String() string {
	return fmt.Sprintf("%s(a%d e%d %s %s @%d)", e.Type, e.Attempt, e.Epoch, short(e.LeaseID), e.Instance, e.AtMs)
}

// CompletionEvent is one ff_completion_event row of an execution.
type CompletionEvent struct {
	EventID int64
	Outcome string
	AtMs    int64
}

// Tx is one transaction's outbox events of one execution.
type Tx struct {
	Exec string
	Xact int64
	// Seq orders the execution's transactions by commit.
	Seq         int64
	Lease       []LeaseEvent
	Completions []CompletionEvent
	// RecvNs is when the live streams first delivered one of its events
	// (ns on the run's monotonic clock; 0: never).
	RecvNs int64
}

// String renders the transaction with its events.
func (t *Tx) String() string {
	var parts []string
	for _, e := range t.Lease {
		parts = append(parts, e.String())
	}
	for _, c := range t.Completions {
		parts = append(parts, fmt.Sprintf("completion %s @%d", c.Outcome, c.AtMs))
	}
	return fmt.Sprintf("tx %d (commit #%d): %s", t.Xact, t.Seq, strings.Join(parts, ", "))
}

// cursor walks a transaction's events as the steps of an operation claim
// them: lease events in event_id order, completions likewise.
type cursor struct {
	tx     *Tx
	li, ci int
}

// at returns the clock reading of the next event the step writes, lease
// or completion: every event of one step records the same reading.
func (c *cursor) at(lease bool) (int64, bool) {
	if lease && c.li < len(c.tx.Lease) {
		return c.tx.Lease[c.li].AtMs, true
	}
	if !lease && c.ci < len(c.tx.Completions) {
		return c.tx.Completions[c.ci].AtMs, true
	}
	return 0, false
}

func (c *cursor) lease(want LeaseEvent) string {
	if c.li >= len(c.tx.Lease) {
		return "missing lease event " + want.String()
	}
	got := c.tx.Lease[c.li]
	c.li++
	got.EventID = 0
	if got != want {
		return fmt.Sprintf("lease event %s, want %s", got, want)
	}
	return ""
}

func (c *cursor) completion(outcome string, at int64) string {
	if c.ci >= len(c.tx.Completions) {
		return "missing completion " + outcome
	}
	got := c.tx.Completions[c.ci]
	c.ci++
	if got.Outcome != outcome || got.AtMs != at {
		return fmt.Sprintf("completion %s @%d, want %s @%d", got.Outcome, got.AtMs, outcome, at)
	}
	return ""
}

func (c *cursor) rest() string {
	var parts []string
	for _, e := range c.tx.Lease[c.li:] {
		parts = append(parts, e.String())
	}
	for _, e := range c.tx.Completions[c.ci:] {
		parts = append(parts, "completion "+e.Outcome)
	}
	return strings.Join(parts, ", ")
}

// Transition applies one operation to a state. It returns the possible
// next states (several only where the events leave two readings open) and,
// when there is none, why the operation is illegal there.
func Transition(s State, in Input, out Output) ([]State, string) {
	if in.Mark != 0 {
		return mark(s, in.Mark)
	}
	if in.Derived {
		return scanner(s, out.Events)
	}
	if out.Unknown && !out.Resolved {
		// Its transaction is not in the outbox: it did not commit; or it
		// may have been one that other calls fit too.
		next := []State{s}
		for _, rs := range out.Maybe {
			o := Output{Results: rs, Unknown: true, Resolved: true}
			if n, why := Transition(s, in, o); why == "" {
				next = append(next, n...)
			}
		}
		return next, ""
	}
	var c *cursor
	if out.Events != nil {
		c = &cursor{tx: out.Events}
	}
	cur := s
	for i, st := range in.Steps {
		if i >= len(out.Results) {
			break
		}
		r := out.Results[i]
		next, why := step(cur, st, r, in, c)
		if why != "" {
			if len(in.Steps) > 1 {
				why = fmt.Sprintf("step %d: %s", i+1, why)
			}
			return nil, why
		}
		if r.Err != OK {
			// A failed step rolls the whole transaction back.
			if c != nil && (len(c.tx.Lease) > 0 || len(c.tx.Completions) > 0) {
				return nil, "a transaction that failed wrote events: " + c.tx.String()
			}
			return []State{s}, ""
		}
		cur = next
	}
	if c != nil {
		if rest := c.rest(); rest != "" {
			return nil, "events no step wrote: " + rest
		}
	}
	if out.RolledBack {
		if c != nil && (len(c.tx.Lease) > 0 || len(c.tx.Completions) > 0) {
			return nil, "a transaction its client rolled back wrote events: " + c.tx.String()
		}
		return []State{s}, ""
	}
	return []State{cur}, ""
}

// now narrows the call's clock window to the reading its events record.
func now(in Input, c *cursor, lease bool) (Window, string) {
	w := in.Clock
	if c == nil {
		return w, ""
	}
	at, ok := c.at(lease)
	if !ok {
		return w, "" // the step's event check reports the missing event
	}
	if !w.contains(at) {
		return w, fmt.Sprintf("its event records the time %d, outside the call's clock window %s", at, w)
	}
	return Window{at, at}, ""
}

func step(s State, st Step, r Result, in Input, c *cursor) (State, string) {
	if r.Err == ErrOther {
		// The step failed with an unknown error: the transaction did not
		// commit (a composite stops there), and nothing is known of what the
		// step saw.
		return s, ""
	}
	if st.Kind == OpCreate {
		if s.Phase != Absent {
			return s, "created twice"
		}
		return created(st.Create), ""
	}
	if s.Phase == Absent {
		return s, fmt.Sprintf("%s before the execution was created", st.Kind)
	}
	if s.Phase == Removed {
		return removedStep(s, st, r)
	}
	switch st.Kind {
	case OpClaim:
		return claim(s, st, r, in, c)
	case OpRenew, OpComplete, OpFail, OpDelay, OpRelease:
		return leaseOp(s, st, r, in, c)
	case OpCancel:
		return cancel(s, r, in, c)
	case OpRevoke:
		return revoke(s, r, in, c)
	case OpReclaim:
		return reclaim(s, st, r, in, c)
	}
	if st.Kind.upstream() {
		return upstreamStep(s, st, r, in, c)
	}
	return s, fmt.Sprintf("unknown step %s", st.Kind)
}

// removedStep judges a call on a removed incarnation (see Removed): with
// its lease, ErrNotFound while the id has no row and ErrStaleLease once a
// later incarnation has one; without a lease (acting on whatever row the id
// has), ErrNotFound, or for a Claim nothing, and only while the id has no
// row: the workload makes such calls on an incarnation only before its id
// is created again (execution.guard), so one after it is the harness's
// fault, reported all the same.
func removedStep(s State, st Step, r Result) (State, string) {
	switch st.Kind {
	case OpRenew, OpComplete, OpFail, OpDelay, OpRelease:
		want := ErrNotFound
		if s.IDRow {
			want = ErrStale
		}
		if r.Err != want {
			return s, fmt.Sprintf("%s(%s) returned %s; in state %s it must return %s", st.Kind, st.Lease, r.Err, s, want)
		}
		return s, ""
	}
	if st.Kind.upstream() {
		// An upstream call with the removed incarnation's handle: it
		// finds no row (ErrNothing), or, once the id has a row again,
		// nothing to act on or another epoch (upstream's fence). Acting
		// would be a handle of one incarnation acting on another.
		if r.Err == ErrNotFound || (s.IDRow && r.Err == ErrStale) {
			return s, ""
		}
		return s, fmt.Sprintf("%s with a removed incarnation's handle returned %s; in state %s it must be refused", st.Kind, r.Err, s)
	}
	if s.IDRow {
		return s, fmt.Sprintf("%s without a lease on an incarnation whose id was created again (a harness error)", st.Kind)
	}
	switch st.Kind {
	case OpClaim:
		if r.Err != OK || !r.Empty {
			return s, fmt.Sprintf("Claim of the lane of a removed execution returned %s", describeStep(st, &r, false))
		}
	case OpCancel, OpRevoke, OpReclaim:
		if r.Err != ErrNotFound {
			return s, fmt.Sprintf("%s of a removed execution returned %s, want ErrNotFound", st.Kind, r.Err)
		}
	default:
		return s, fmt.Sprintf("%s on a removed execution", st.Kind)
	}
	return s, ""
}

// created is the state Create leaves: runnable, eligible now or delayed
// until DelayUntil, attempt 0 without a row; a downstream whose group
// AddDependencies fixed is blocked by dependencies.
func created(p CreateSpec) State {
	s := State{Phase: Waiting, MaxRetries: p.MaxRetries, BackoffMs: p.BackoffMs, Deadline: p.Deadline}
	switch {
	case p.Blocked:
		s.Phase = Blocked
	case p.DelayUntil != 0:
		s.Phase, s.DelayUntil = Delayed, p.DelayUntil
	}
	return s
}

// claim: ClaimTx picks runnable, eligible_now executions of the lane whose
// deadline has not passed (deadline > now) with FOR NO KEY UPDATE SKIP
// LOCKED, opens (or re-leases) the current attempt's row with epoch =
// max(lease_epoch)+1 and expiry now+ttl capped at the deadline, and writes
// a lease "acquired" event.
func claim(s State, st Step, r Result, in Input, c *cursor) (State, string) {
	if r.Err != OK {
		return s, fmt.Sprintf("Claim failed with %s: it has no typed failure", r.Err)
	}
	if r.Empty {
		// SKIP LOCKED: a Claim finds nothing whenever another transaction
		// holds the row (an operation, a scanner's group transaction, a
		// hop), so an empty Claim is legal in every state.
		return s, ""
	}
	switch s.Phase {
	case Waiting:
	case Blocked:
		// Released by its flow hop (unobserved); see Blocked.
	case Delayed:
		// Promoted by the delayed_promoter (unobserved): only once a
		// scanner's clock could read DelayUntil.
		if s.DelayUntil-promotionSlackMs > in.WallHi { // (WallHi may be Unbounded)
			return s, fmt.Sprintf("claimed while delayed until %d, by a call that returned when a scanner's clock read at most %d: no promotion could have happened",
				s.DelayUntil, in.WallHi)
		}
	default:
		return s, fmt.Sprintf("claimed while %s", s.Phase)
	}
	w, why := now(in, c, true)
	if why != "" {
		return s, why
	}
	l := r.Lease
	rw, fits := grantReadings(w, l.ExpiresAt, st.TTL, s.Deadline)
	at := rw.Lo // exact when the events are known
	switch {
	case !fits:
		return s, grantWhy("lease", l.ExpiresAt, w, st.TTL, s.Deadline)
	case l.Attempt != s.Attempt:
		return s, fmt.Sprintf("claimed attempt %d, the current attempt is %d", l.Attempt, s.Attempt)
	case l.Epoch != s.MaxEpoch+1:
		return s, fmt.Sprintf("claimed with epoch %d, want max(lease_epoch)+1 = %d", l.Epoch, s.MaxEpoch+1)
	case l.Instance != st.Instance:
		return s, fmt.Sprintf("lease names instance %q, the claimer is %q", l.Instance, st.Instance)
	}
	n := s
	n.Phase, n.DelayUntil = Active, 0
	n.Row, n.Epoch, n.MaxEpoch, n.LeaseID, n.Holder = true, l.Epoch, l.Epoch, l.LeaseID, st.Instance
	n.HasExpiry, n.Expires = true, l.ExpiresAt
	if c != nil {
		if why := c.lease(LeaseEvent{Type: ff.LeaseAcquired, Attempt: l.Attempt, Epoch: l.Epoch, LeaseID: l.LeaseID, Instance: st.Instance, AtMs: at}); why != "" {
			return s, why
		}
	}
	return n, ""
}

// fence is Store.fence without its expiry check: a lease whose attempt,
// epoch or lease id is not the current row's is stale (ErrStaleLease),
// whether the call waited for the lock or not; a lease that is current on
// an execution that is not active gets ErrNotActive. The lease id tells
// apart leases that share an attempt and epoch: one a Claim returned in a
// transaction that never committed, and the lease a later Claim took.
func fence(s State, l LeaseRef) ErrClass {
	if l.Attempt != s.Attempt || !s.Row || l.Epoch != s.Epoch || l.LeaseID != s.LeaseID {
		return ErrStale
	}
	if s.Phase != Active {
		return ErrNotActive
	}
	return OK
}

// leaseClasses are the outcomes the fence allows over a clock window: past
// the attempt and epoch checks, the lease is live (ok) while its end (its
// expiry, or the deadline if earlier: leaseEnd) is after now, and expired
// (ErrLeaseExpired) from its end on.
func leaseClasses(s State, l LeaseRef, w Window) classes {
	if f := fence(s, l); f != OK {
		return setOf(f)
	}
	if !s.HasExpiry {
		return setOf(ErrExpired)
	}
	var out classes
	if s.leaseEnd() > w.Lo {
		out |= setOf(OK)
	}
	if s.leaseEnd() <= w.Hi {
		out |= setOf(ErrExpired)
	}
	return out
}

// leaseOp is Renew, Complete, Fail, Delay and Release: fenced by the lease
// (above).
//   - Renew moves the expiry to now+ttl, capped at the deadline, and writes
//     "renewed".
//   - Complete closes the attempt (no epoch bump), makes the execution
//     terminal success and writes "revoked" and a completion "success".
//   - Fail closes the attempt (no bump); while attempt_index < max_retries
//     (and not Permanent) it retries: next attempt, eligible now or delayed
//     by the backoff, "revoked"; else terminal failed, "revoked" and a
//     completion "failed".
//   - Delay closes the attempt (no bump, no retry spent), parks the
//     execution until Until and writes "revoked".
//   - Release closes the attempt (no bump, no retry spent), makes the
//     execution runnable and eligible at once (the next Claim re-leases the
//     same attempt) and writes "revoked".
func leaseOp(s State, st Step, r Result, in Input, c *cursor) (State, string) {
	w, why := now(in, c, true)
	if why != "" {
		return s, why
	}
	at := w.Lo // the reading the events record, when there are events
	switch {
	case st.Kind == OpRenew && r.Err == OK:
		// The new expiry is now+ttl (the reading is exact), or the
		// deadline (a reading in the TTL before it).
		rw, fits := grantReadings(w, r.Lease.ExpiresAt, st.TTL, s.Deadline)
		if !fits {
			return s, grantWhy("renewed", r.Lease.ExpiresAt, w, st.TTL, s.Deadline)
		}
		w, at = rw, rw.Lo
	case st.Kind == OpFail && r.Err == OK && r.Retried && s.BackoffMs > 0:
		// So is a retry's: it is delayed until now+backoff.
		at = r.DelayUntil - s.BackoffMs
		if !w.contains(at) {
			return s, fmt.Sprintf("retry delayed until %d is not the call's clock %s plus the backoff %d", r.DelayUntil, w, s.BackoffMs)
		}
		w = Window{at, at}
	}
	allowed := leaseClasses(s, st.Lease, w)
	if !allowed.has(r.Err) {
		return s, fmt.Sprintf("%s(%s) returned %s; in state %s at clock %s it must return %s", st.Kind, st.Lease, r.Err, s, w, allowed)
	}
	if r.Err != OK {
		return s, ""
	}
	// Past the fence at a reading where the lease was live.
	if !s.HasExpiry || s.leaseEnd() <= at {
		// (Only reachable with events: at is then the exact reading.)
		return s, fmt.Sprintf("%s succeeded at %d on a lease that ended at %d", st.Kind, at, s.leaseEnd())
	}
	revoked := LeaseEvent{Type: ff.LeaseRevoked, Attempt: s.Attempt, Epoch: s.Epoch, LeaseID: s.LeaseID, Instance: s.Holder, AtMs: at}
	var n State
	var outcome string
	switch st.Kind {
	case OpRenew:
		l := r.Lease
		if l.Attempt != st.Lease.Attempt || l.Epoch != st.Lease.Epoch || l.LeaseID != st.Lease.LeaseID {
			return s, fmt.Sprintf("Renew returned lease %s for lease %s", l, st.Lease)
		}
		n = s
		n.Expires = l.ExpiresAt
		if c != nil {
			if why := c.lease(LeaseEvent{Type: ff.LeaseRenewed, Attempt: s.Attempt, Epoch: s.Epoch, LeaseID: s.LeaseID, Instance: s.Holder, AtMs: at}); why != "" {
				return s, why
			}
		}
		return n, ""
	case OpComplete:
		n, outcome = s.closeAttempt(false).terminal(ff.OutcomeSuccess), ff.OutcomeSuccess
	case OpFail:
		if !st.Permanent && s.Attempt < s.MaxRetries {
			if !r.Retried || r.NextAttempt != s.Attempt+1 {
				return s, fmt.Sprintf("Fail with attempt %d of max_retries %d returned retried=%v next=%d, want a retry as attempt %d",
					s.Attempt, s.MaxRetries, r.Retried, r.NextAttempt, s.Attempt+1)
			}
			n = s.closeAttempt(false).retry(at)
			if s.BackoffMs == 0 && r.DelayUntil != 0 {
				return s, fmt.Sprintf("retry delayed until %d without a backoff", r.DelayUntil)
			}
		} else {
			if r.Retried {
				return s, fmt.Sprintf("Fail (permanent=%v) of attempt %d with max_retries %d retried", st.Permanent, s.Attempt, s.MaxRetries)
			}
			n, outcome = s.closeAttempt(false).terminal(ff.OutcomeFailed), ff.OutcomeFailed
		}
	case OpDelay:
		n = s.closeAttempt(false)
		n.Phase, n.DelayUntil = Delayed, st.Until
	case OpRelease:
		n = s.closeAttempt(false)
		n.Phase, n.DelayUntil = Waiting, 0
	}
	if c != nil {
		if why := c.lease(revoked); why != "" {
			return s, why
		}
		if outcome != "" {
			if why := c.completion(outcome, at); why != "" {
				return s, why
			}
		}
	}
	return n, ""
}

// cancel: CancelTx fails with ErrNotActive on a terminal execution; else it
// fences a lease it holds (cleared, epoch+1, "revoked" with the epoch it was
// held under), makes it terminal cancelled and writes a completion
// "cancelled". The dispatcher's sibling cancel (executions.Store.cancelSibling) is the
// same transition.
func cancel(s State, r Result, in Input, c *cursor) (State, string) {
	if s.Phase == Terminal {
		if r.Err != ErrNotActive {
			return s, fmt.Sprintf("Cancel of a terminal execution returned %s, want ErrNotActive", r.Err)
		}
		return s, ""
	}
	if r.Err != OK {
		return s, fmt.Sprintf("Cancel of a %s execution returned %s, want ok", s.Phase, r.Err)
	}
	return terminate(s, ff.OutcomeCancelled, ff.LeaseRevoked, in.Clock, c)
}

// terminate is terminateLocked (cancel, sibling cancel, skip) and the
// deadline expiry: a lease held is fenced with a lease event of leaseType,
// and the execution becomes terminal with a completion of outcome.
func terminate(s State, outcome, leaseType string, clock Window, c *cursor) (State, string) {
	leased := s.leased()
	w := clock
	if c != nil {
		at, ok := c.at(leased)
		if !ok {
			return s, fmt.Sprintf("missing the events of %s: %s", outcome, c.tx)
		}
		if !w.contains(at) {
			return s, fmt.Sprintf("its events record the time %d, outside the clock window %s", at, w)
		}
		if leased {
			if why := c.lease(LeaseEvent{Type: leaseType, Attempt: s.Attempt, Epoch: s.Epoch, LeaseID: s.LeaseID, Instance: s.Holder, AtMs: at}); why != "" {
				return s, why + " (the execution held a lease)"
			}
		}
		if why := c.completion(outcome, at); why != "" {
			return s, why
		}
	}
	n := s
	if leased {
		n = n.closeAttempt(true)
	}
	return n.terminal(outcome), ""
}

// revoke: RevokeTx fails with ErrNotActive unless the execution holds a
// lease; it fences the lease (cleared, epoch+1), makes the execution
// runnable and eligible now (no retry spent) and writes "revoked".
func revoke(s State, r Result, in Input, c *cursor) (State, string) {
	if !s.leased() {
		if r.Err != ErrNotActive {
			return s, fmt.Sprintf("Revoke of a %s execution returned %s, want ErrNotActive", s.Phase, r.Err)
		}
		return s, ""
	}
	if r.Err != OK {
		return s, fmt.Sprintf("Revoke of a leased execution (%s) returned %s, want ok", s, r.Err)
	}
	w, why := now(in, c, true)
	if why != "" {
		return s, why
	}
	if c != nil {
		if why := c.lease(LeaseEvent{Type: ff.LeaseRevoked, Attempt: s.Attempt, Epoch: s.Epoch, LeaseID: s.LeaseID, Instance: s.Holder, AtMs: w.Lo}); why != "" {
			return s, why
		}
	}
	n := s.closeAttempt(true)
	n.Phase = Waiting
	return n, ""
}

// reclaimClasses: ReclaimTx fails with ErrNotActive when the execution is
// not active, its attempt holds no lease or its deadline has passed
// (deadline <= now), with ErrLeaseHeld while the lease is live (expiry >
// now), and with ErrNotActive once the lease has expired on an attempt with
// no retry left (attempt_index >= max_retries: the scanner expires it);
// otherwise it succeeds.
func reclaimClasses(s State, w Window) classes {
	if s.Phase != Active || !s.Row || !s.HasExpiry {
		return setOf(ErrNotActive)
	}
	var out classes
	if s.Deadline != 0 {
		if s.Deadline <= w.Hi {
			out |= setOf(ErrNotActive)
		}
		if w.Hi = min(w.Hi, s.Deadline-1); w.Hi < w.Lo {
			return out
		}
	}
	if s.Expires > w.Lo {
		out |= setOf(ErrHeld)
	}
	if s.Expires <= w.Hi {
		if s.Attempt >= s.MaxRetries {
			out |= setOf(ErrNotActive)
		} else {
			out |= setOf(OK)
		}
	}
	return out
}

// reclaim: on success the old attempt is closed (its epoch bumped, which
// fences an upstream handle of it: model_upstream.go), a new attempt
// row attempt+1 opens with epoch = the current epoch+1 and expiry now+ttl
// capped at the deadline, and a "reclaimed" event names the new lease.
func reclaim(s State, st Step, r Result, in Input, c *cursor) (State, string) {
	w, why := now(in, c, true)
	if why != "" {
		return s, why
	}
	if r.Err == OK {
		rw, fits := grantReadings(w, r.Lease.ExpiresAt, st.TTL, s.Deadline)
		if !fits {
			return s, grantWhy("reclaimed lease", r.Lease.ExpiresAt, w, st.TTL, s.Deadline)
		}
		w = rw
	}
	allowed := reclaimClasses(s, w)
	if !allowed.has(r.Err) {
		return s, fmt.Sprintf("Reclaim returned %s; in state %s at clock %s it must return %s", r.Err, s, w, allowed)
	}
	if r.Err != OK {
		return s, ""
	}
	l := r.Lease
	switch {
	case l.Attempt != s.Attempt+1:
		return s, fmt.Sprintf("reclaimed as attempt %d, want %d", l.Attempt, s.Attempt+1)
	case l.Epoch != s.Epoch+1:
		return s, fmt.Sprintf("reclaimed with epoch %d, want the current epoch+1 = %d", l.Epoch, s.Epoch+1)
	case l.Instance != st.Instance:
		return s, fmt.Sprintf("reclaimed lease names instance %q, the reclaimer is %q", l.Instance, st.Instance)
	}
	n := s.closeAttempt(true).dropRow()
	n.Attempt = l.Attempt
	n.Row, n.Epoch, n.LeaseID, n.Holder, n.HasExpiry, n.Expires = true, l.Epoch, l.LeaseID, st.Instance, true, l.ExpiresAt
	n.MaxEpoch = max(s.MaxEpoch, l.Epoch)
	if c != nil {
		if why := c.lease(LeaseEvent{Type: ff.LeaseReclaimed, Attempt: l.Attempt, Epoch: l.Epoch, LeaseID: l.LeaseID, Instance: st.Instance, AtMs: w.Lo}); why != "" {
			return s, why
		}
	}
	return n, ""
}

// scanner judges a transaction of the scanners or the flow engine from its
// events alone (they record the clock reading the transition used):
//
//   - lease "expired" alone: attempt_timeout with a retry left;
//   - lease "expired" and completion "expired": attempt_timeout of the last
//     attempt, or execution_deadline of a leased execution (the same
//     events, the same next state);
//   - completion "expired" alone: execution_deadline of an execution
//     without a lease;
//   - completion "cancelled" (with "revoked" if leased): the edge-cancel
//     dispatcher's sibling cancel;
//   - completion "skipped": a flow hop found the group impossible.
func scanner(s State, tx *Tx) ([]State, string) {
	if tx == nil || len(tx.Lease)+len(tx.Completions) == 0 {
		return nil, "a scanner transaction without events"
	}
	if s.Phase == Absent {
		return nil, "events before the execution was created"
	}
	if s.Phase == Removed {
		return nil, "events of an execution retention removed"
	}
	n, why := scannerTransition(s, tx)
	if why != "" {
		return nil, why
	}
	return []State{n}, ""
}

func scannerTransition(s State, tx *Tx) (State, string) {
	var at int64
	if len(tx.Lease) > 0 {
		at = tx.Lease[0].AtMs
	} else {
		at = tx.Completions[0].AtMs
	}
	clock := Window{at, at}
	expiredLease := len(tx.Lease) == 1 && tx.Lease[0].Type == ff.LeaseExpired
	var outcome string
	if len(tx.Completions) == 1 {
		outcome = tx.Completions[0].Outcome
	}
	// terminateAll is terminate, checking that it explains every event.
	terminateAll := func(outcome, leaseType string) (State, string) {
		c := &cursor{tx: tx}
		n, why := terminate(s, outcome, leaseType, clock, c)
		if why == "" {
			if rest := c.rest(); rest != "" {
				why = "events it does not write: " + rest
			}
		}
		return n, why
	}
	switch {
	case expiredLease && outcome == "":
		n, why := expireAttempt(s, tx.Lease[0], at)
		if why == "" && n.Phase == Terminal {
			why = fmt.Sprintf("attempt_timeout that ends the execution (attempt %d, max_retries %d, deadline %d) without a completion \"expired\"",
				s.Attempt, s.MaxRetries, s.Deadline)
		}
		return n, why
	case expiredLease && outcome == ff.OutcomeExpired:
		n, why := expireAttempt(s, tx.Lease[0], at)
		if why == "" && n.Phase == Terminal {
			return n, ""
		}
		if why == "" {
			why = fmt.Sprintf("attempt %d had retries left (max_retries %d)", s.Attempt, s.MaxRetries)
		}
		notTimeout := "not attempt_timeout: " + why
		if why := deadlineDue(s, at); why != "" {
			return s, notTimeout + "; not execution_deadline: " + why
		}
		n, why = terminateAll(ff.OutcomeExpired, ff.LeaseExpired)
		if why != "" {
			return s, notTimeout + "; not execution_deadline: " + why
		}
		return n, ""
	case len(tx.Lease) == 0 && outcome == ff.OutcomeExpired:
		if why := deadlineDue(s, at); why != "" {
			return s, "a completion \"expired\" without a lease event, but " + why
		}
		n, why := terminateAll(ff.OutcomeExpired, ff.LeaseExpired)
		if why != "" {
			return s, "execution_deadline: " + why
		}
		return n, ""
	case outcome == ff.OutcomeCancelled:
		if s.Phase == Terminal {
			return s, "cancelled a terminal execution"
		}
		n, why := terminateAll(ff.OutcomeCancelled, ff.LeaseRevoked)
		if why != "" {
			return s, "sibling cancel: " + why
		}
		return n, ""
	case outcome == ff.OutcomeSkipped && len(tx.Lease) == 0:
		if s.Phase != Blocked {
			return s, fmt.Sprintf("skipped while %s: only a downstream still blocked by its group is skipped", s.Phase)
		}
		return s.terminal(ff.OutcomeSkipped), ""
	}
	return s, "events of no scanner transition: " + tx.String()
}

// expireAttempt is decideExpireAttempt: the attempt named by the event is
// still current, the execution is active and its lease has ended (expiry
// <= now); the attempt is interrupted and fenced (epoch+1), then retried
// (attempt+1, after the backoff) while attempt_index < max_retries and the
// deadline has not passed, else terminal expired (past the deadline, as
// execution_deadline expires it: the same events and state). The "expired"
// event names the lease as it was held.
func expireAttempt(s State, ev LeaseEvent, at int64) (State, string) {
	switch {
	case s.Phase != Active:
		return s, fmt.Sprintf("expired an attempt of a %s execution", s.Phase)
	case !s.HasExpiry || s.Expires > at:
		return s, fmt.Sprintf("expired at %d a lease that expires at %d (expiry must be now or earlier)", at, s.Expires)
	}
	want := LeaseEvent{Type: ff.LeaseExpired, Attempt: s.Attempt, Epoch: s.Epoch, LeaseID: s.LeaseID, Instance: s.Holder, AtMs: at}
	ev.EventID = 0
	if ev != want {
		return s, fmt.Sprintf("lease event %s, want %s", ev, want)
	}
	n := s.closeAttempt(true)
	if s.Attempt < s.MaxRetries && deadlineDue(s, at) != "" {
		return n.retry(at), ""
	}
	return n.terminal(ff.OutcomeExpired), ""
}

// deadlineDue is decideExpireDeadline's condition: not terminal and the
// deadline passed (deadline <= now). It returns why not, or "".
func deadlineDue(s State, at int64) string {
	switch {
	case s.Phase == Terminal:
		return "the execution is terminal"
	case s.Deadline == 0:
		return "the execution has no deadline"
	case s.Deadline > at:
		return fmt.Sprintf("its deadline %d had not passed at %d", s.Deadline, at)
	}
	return ""
}

// promotionSlackMs covers the rounding of the two system-clock readings
// compared for a promotion (both are truncated to milliseconds).
const promotionSlackMs = 1
