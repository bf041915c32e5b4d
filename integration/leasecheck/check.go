package leasecheck

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/actions"
	"github.com/ffriver/ffriver/internal/testproc"
	"github.com/google/uuid"
)

// Violation is one thing a check found wrong.
type Violation struct {
	// Check names the check: linearizability, witness, order, replay,
	// final state, overdue, flow, stream.
	Check string
	// Exec is the execution ("" for a run-wide violation).
	Exec string
	What string
	// Ops are the operations and transactions involved.
	Ops []string
	// AtNs is when the offending operation began, on the run's timeline
	// (0: not one operation).
	AtNs int64
}

// String renders the violation with its operations, one per line.
func (v Violation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "[%s] ", v.Check)
	if v.Exec != "" {
		fmt.Fprintf(&b, "execution %s: ", v.Exec)
	}
	b.WriteString(v.What)
	for _, op := range v.Ops {
		b.WriteString("\n      " + op)
	}
	return b.String()
}

// Verdict is what the checks found in one run.
type Verdict struct {
	// Ops is the number of operations checked (calls and scanner
	// transactions); Histories the number of executions (incarnations).
	Ops, Histories int
	// Incarnations counts the histories of ids created again after
	// execution retention removed them (incarnations 2, 3, ...); Removed
	// the histories whose execution retention removed.
	Incarnations, Removed int
	// RemovedStale and RemovedNotFound count the calls with the lease of
	// a removed incarnation refused with ErrStaleLease (its id created
	// again) and ErrNotFound (the id without a row).
	RemovedStale, RemovedNotFound int
	// Txs is the number of outbox transactions attributed.
	Txs int
	// Resolved counts the calls of unknown outcome the outbox showed
	// committed.
	Resolved int
	// MaxDeliveryLag is the longest a committed call's events waited,
	// after the call returned, for the live streams to deliver them.
	MaxDeliveryLag time.Duration
	Violations     []Violation
	// history is porcupine's input, kept for the visualizations.
	history map[string][]porcupine.Operation
}

func (v *Verdict) add(check, exec, what string, ops ...string) {
	v.addAt(0, check, exec, what, ops...)
}

func (v *Verdict) addAt(at int64, check, exec, what string, ops ...string) {
	v.Violations = append(v.Violations, Violation{Check: check, Exec: exec, What: what, Ops: ops, AtNs: at})
}

// FirstAt is when the earliest offending operation began (0: none known).
func (v *Verdict) FirstAt() int64 {
	var first int64
	for _, vi := range v.Violations {
		if vi.AtNs > 0 && (first == 0 || vi.AtNs < first) {
			first = vi.AtNs
		}
	}
	return first
}

// history is everything known about one execution.
type history struct {
	key    string
	create *Call
	calls  []*Call
	txs    []*Tx
	callOf map[*Tx]*Call
	// cands are the transactions several calls of unknown outcome fit,
	// with those calls (see ambiguity).
	cands   map[*Tx][]*Call
	derived []*Tx
	// db is the row at the end: the live row, or the row retention
	// removed (inc.Row).
	db *DBExec
	// inc is the incarnation (nil when the run's trigger saw no creation).
	inc *Incarnation
	// marks are the removal of this incarnation and the creations and
	// removals of the id's later ones (see Mark).
	marks []porcupine.Operation
}

// removed reports whether execution retention removed the incarnation.
func (h *history) removed() bool { return h.inc != nil && h.inc.RemovedSeq != 0 }

// earliest is the call of tx that began first: with several candidates,
// the one that gives the weakest bound on its commit.
func (h *history) earliest(tx *Tx) *Call {
	c := h.callOf[tx]
	for _, o := range h.cands[tx] {
		if c == nil || o.CallNs < c.CallNs {
			c = o
		}
	}
	return c
}

func (h *history) ops(tl Timeline) []string {
	var out []string
	if h.create != nil {
		out = append(out, h.create.String())
	}
	for _, m := range h.marks {
		out = append(out, fmt.Sprintf("[%s, %s] %s (%s)", ns(m.Call), ns(m.Return), m.Input.(Input).Mark, m.Metadata))
	}
	for _, c := range h.calls {
		out = append(out, c.String())
	}
	for _, tx := range h.txs {
		who := "scanner"
		if c := h.callOf[tx]; c != nil {
			who = fmt.Sprintf("call %d", c.ID)
		} else if !slices.Contains(h.derived, tx) {
			who = "nobody"
		}
		if cs := h.cands[tx]; len(cs) > 0 {
			who = fmt.Sprintf("one of %d calls of unknown outcome", len(cs))
		}
		lo, hi := bounds(tl, h.earliest(tx), tx)
		out = append(out, fmt.Sprintf("%s by %s, committed within [%s, %s]", tx, who, ns(lo), ns(hi)))
	}
	return out
}

func ns(t int64) string {
	if t == Unbounded {
		return "∞"
	}
	return time.Duration(t).Round(time.Microsecond).String()
}

// Judge runs every check over a finished run: the recorded calls, the
// final snapshot (read once nothing was overdue), what the live streams
// delivered, the flows' groups, and the shared lanes' executions (by
// execution, its lane).
func Judge(tl Timeline, calls []*Call, snap *Snapshot, streams *Streams, groups []*Group, shared map[string]string,
	scannerClient int, timeout time.Duration) *Verdict {
	v := &Verdict{history: map[string][]porcupine.Operation{}}
	hs := map[string]*history{}
	var laneWide []*Call
	for _, c := range calls {
		if c.Exec == "" {
			laneWide = append(laneWide, c)
			continue
		}
		h := hs[c.Exec]
		if h == nil {
			h = &history{key: c.Exec, callOf: map[*Tx]*Call{}}
			hs[c.Exec] = h
		}
		if c.Steps[0].Kind == OpCreate {
			h.create = c
		} else {
			h.calls = append(h.calls, c)
		}
	}
	for k, txs := range snap.Txs {
		if hs[k] == nil {
			v.add("witness", k, "events of an execution the run never created", txsStrings(txs)...)
			continue
		}
		hs[k].txs = txs
	}
	for k, d := range snap.Execs {
		if hs[k] == nil {
			continue // created by a call whose outcome stayed unknown
		}
		hs[k].db = d
	}
	v.incarnationMarks(tl, hs, snap, scannerClient)
	for _, txs := range snap.Txs {
		for _, tx := range txs {
			tx.RecvNs = received(streams, tx)
			if tx.RecvNs == 0 {
				v.add("stream", tx.Exec, "the live streams never delivered "+tx.String())
			}
		}
	}
	for _, p := range streams.problems() {
		v.add("stream", "", p)
	}
	attributeLaneWide(hs, laneWide, shared)

	var all []porcupine.Operation
	keys := make([]string, 0, len(hs))
	for k := range hs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		h := hs[k]
		if h.create == nil {
			v.add("witness", k, "calls on an execution the run never created")
			continue
		}
		slices.SortStableFunc(h.calls, func(a, b *Call) int { return cmpInt(a.CallNs, b.CallNs) })
		v.Histories++
		if h.inc != nil && h.inc.K > 1 {
			v.Incarnations++
		}
		if h.removed() {
			v.Removed++
			v.countRemovedRefusals(h)
		}
		v.Txs += len(h.txs)
		v.attribute(tl, h)
		for tx, c := range h.callOf {
			// The call returned after its transaction committed: the
			// stream's delivery came at most this late.
			if c.ReturnNs != Unbounded && tx.RecvNs > 0 && tx.RecvNs-c.ReturnNs > int64(v.MaxDeliveryLag) {
				v.MaxDeliveryLag = time.Duration(tx.RecvNs - c.ReturnNs)
			}
		}
		v.replay(tl, h, snap.NowMs)
		ops := h.operations(tl, scannerClient)
		v.Ops += len(ops) - 1
		v.history[k] = ops
		all = append(all, ops...)
	}
	res, bad := CheckLinearizable(all, timeout)
	for _, l := range bad {
		what := "not linearizable: no order of its operations inside their real-time windows is legal in the model"
		if l.Result == porcupine.Unknown {
			what = fmt.Sprintf("porcupine could not decide within %s", timeout)
		}
		why, at := lastWhy(l)
		v.addAt(at, "linearizability", l.Exec, what, append(describeOps(l.Ops), why)...)
	}
	if res != porcupine.Ok && len(bad) == 0 {
		v.add("linearizability", "", fmt.Sprintf("porcupine said %s for the whole history but every execution on its own is fine", res))
	}
	for _, o := range snap.Overdue {
		v.add("overdue", "", o)
	}
	v.flows(tl, hs, snap, groups)
	return v
}

// countRemovedRefusals counts the calls begun after a removed
// incarnation's DELETE ran, with its lease, that were refused as stale or
// not found (the checks are the model's; these are the report's figures).
func (v *Verdict) countRemovedRefusals(h *history) {
	var removedAt int64 = Unbounded
	for _, m := range h.marks {
		if m.Input.(Input).Mark == MarkRemoved {
			removedAt = m.Call
		}
	}
	for _, c := range h.calls {
		if c.Unknown || len(c.Results) == 0 || len(c.Steps) != 1 || c.Steps[0].Lease.LeaseID == uuid.Nil || c.CallNs < removedAt {
			continue
		}
		switch c.Results[0].Err {
		case ErrStale:
			v.RemovedStale++
		case ErrNotFound:
			v.RemovedNotFound++
		}
	}
}

// incarnationMarks gives each incarnation its Incarnation and its marks:
// its own removal, over [the DELETE's reading, the return of the Create of
// the next incarnation] (that Create found no row, so the removal had
// committed; without one, unbounded), and the later incarnations' creations
// (their Create calls' windows) and removals. A removed incarnation's row
// is the one retention deleted, and it has no live row.
func (v *Verdict) incarnationMarks(tl Timeline, hs map[string]*history, snap *Snapshot, scannerClient int) {
	for _, incs := range snap.Incarnations {
		createOf := func(j int) *Call {
			if j < len(incs) {
				if h := hs[incs[j].Key]; h != nil {
					return h.create
				}
			}
			return nil
		}
		removal := func(j int) (lo, hi int64) {
			hi = Unbounded
			if c := createOf(j + 1); c != nil {
				hi = c.ReturnNs
			}
			return tl.FromWallMs(incs[j].RemovedAtMs), hi
		}
		for i, inc := range incs {
			h := hs[inc.Key]
			if h == nil {
				continue
			}
			h.inc = inc
			add := func(m Mark, lo, hi int64, what string) {
				h.marks = append(h.marks, porcupine.Operation{ClientId: scannerClient, Call: lo, Return: hi,
					Input: Input{Exec: h.key, Client: scannerClient, Mark: m}, Output: Output{}, Metadata: what})
			}
			if inc.RemovedSeq == 0 {
				continue
			}
			if snap.Execs[inc.Key] != nil {
				v.add("final state", inc.Key, fmt.Sprintf("execution retention removed it (#%d), yet its row is in the database", inc.RemovedSeq))
			}
			h.db = inc.Row
			lo, hi := removal(i)
			add(MarkRemoved, lo, hi, fmt.Sprintf("removed, #%d", inc.RemovedSeq))
			for j := i + 1; j < len(incs); j++ {
				lo, hi := tl.FromWallMs(incs[j-1].RemovedAtMs), int64(Unbounded)
				if c := createOf(j); c != nil {
					lo, hi = c.CallNs, c.ReturnNs
				}
				add(MarkIDCreated, lo, hi, fmt.Sprintf("%s created, #%d", incs[j].Key, incs[j].CreatedSeq))
				if incs[j].RemovedSeq != 0 {
					lo, hi := removal(j)
					add(MarkIDRemoved, lo, hi, fmt.Sprintf("%s removed, #%d", incs[j].Key, incs[j].RemovedSeq))
				}
			}
		}
	}
}

func txsStrings(txs []*Tx) []string {
	out := make([]string, len(txs))
	for i, tx := range txs {
		out[i] = tx.String()
	}
	return out
}

// received is when the streams first delivered any of tx's events.
func received(s *Streams, tx *Tx) int64 {
	var first int64
	note := func(t int64) {
		if t != 0 && (first == 0 || t < first) {
			first = t
		}
	}
	for _, e := range tx.Lease {
		note(s.received(eventKey{'l', e.EventID}))
	}
	for _, e := range tx.Completions {
		note(s.received(eventKey{'c', e.EventID}))
	}
	return first
}

// attributeLaneWide gives each claim of unknown outcome on a shared lane,
// on each execution of the lane with an "acquired" event that could be its
// (its instance, a reading of its clock, committed after it began), a
// candidate Claim of unknown outcome: the matching decides which it was.
// Where it took no lease, it changed nothing.
func attributeLaneWide(hs map[string]*history, laneWide []*Call, shared map[string]string) {
	for _, p := range laneWide {
		for k, lane := range shared {
			h := hs[k]
			if lane != p.Lane || h == nil {
				continue
			}
			for _, tx := range h.txs {
				if len(tx.Lease) == 0 || tx.Lease[0].Type != ff.LeaseAcquired {
					continue
				}
				e := tx.Lease[0]
				if e.Instance == p.Steps[0].Instance && p.Clock.contains(e.AtMs) && (tx.RecvNs == 0 || tx.RecvNs >= p.CallNs) {
					c := *p
					c.Exec, c.Lane = k, ""
					h.calls = append(h.calls, &c)
					break
				}
			}
		}
	}
}

// attribute matches the execution's calls to its transactions: the
// witness and order checks.
func (v *Verdict) attribute(tl Timeline, h *history) {
	m := match(h.calls, h.txs)
	amb := ambiguities(m)
	h.cands = amb.cands
	spec := h.create.Steps[0].Create
	for i, c := range m.calls {
		j := m.txOf[i]
		if j < 0 {
			if !c.Unknown {
				v.addAt(c.CallNs, "witness", h.key, "a call that succeeded has no transaction with its events in the outbox",
					append([]string{c.String(), "the execution's transactions:"}, txsStrings(h.txs)...)...)
			}
			continue
		}
		tx := h.txs[j]
		h.callOf[tx] = c
		if c.Unknown && amb.maybe[c] == nil {
			c.Results, c.Resolved = reconstruct(c, tx, spec), true
			v.Resolved++
		}
		if !c.Unknown || c.Resolved {
			c.Tx = tx
		}
	}
	for c, txs := range amb.maybe {
		for _, tx := range txs {
			c.Maybe = append(c.Maybe, reconstruct(c, tx, spec))
		}
	}
	for _, tx := range h.txs {
		if h.callOf[tx] != nil {
			continue
		}
		if !scannerShaped(tx) {
			v.add("witness", h.key, "a transaction no call explains (and no scanner writes)", append([]string{tx.String()}, callStrings(h.calls)...)...)
			continue
		}
		h.derived = append(h.derived, tx)
		if len(tx.Completions) == 1 && tx.Completions[0].Outcome == ff.OutcomeCancelled && h.db != nil &&
			(h.db.CancelledBy == nil || *h.db.CancelledBy != "engine") {
			by := "NULL"
			if h.db.CancelledBy != nil {
				by = *h.db.CancelledBy
			}
			v.add("witness", h.key, fmt.Sprintf("a cancel no call made, yet cancelled_by is %q, not the engine's sibling cancel", by), tx.String())
		}
	}
	for _, o := range orderViolations(tl, h.txs, h.earliest) {
		v.add("order", h.key, o)
	}
}

func callStrings(calls []*Call) []string {
	out := make([]string, len(calls))
	for i, c := range calls {
		out[i] = c.String()
	}
	return out
}

// replay applies the execution's transactions in commit order to the
// model, from its Create, and compares where they lead with the row.
func (v *Verdict) replay(tl Timeline, h *history, nowMs int64) {
	states, why := Transition(State{}, h.create.input(), h.create.output())
	if why != "" {
		v.add("replay", h.key, "its Create: "+why)
		return
	}
	spec := h.create.Steps[0].Create
	for i, tx := range h.txs {
		// The operation the transaction was: its call's, each candidate's
		// when several calls of unknown outcome fit it, or a scanner's.
		type reading struct {
			in  Input
			out Output
		}
		var readings []reading
		switch c := h.callOf[tx]; {
		case len(h.cands[tx]) > 0:
			for _, c := range h.cands[tx] {
				out := Output{Results: reconstruct(c, tx, spec), Unknown: true, Resolved: true, Events: tx}
				readings = append(readings, reading{c.input(), out})
			}
		case c != nil:
			out := c.output()
			out.Events = tx
			readings = append(readings, reading{c.input(), out})
		case slices.Contains(h.derived, tx):
			readings = append(readings, reading{Input{Exec: h.key, Derived: true}, Output{Events: tx}})
		default:
			return // reported by the witness check
		}
		in, out := readings[0].in, readings[0].out
		var next []State
		var whys []string
		for _, s := range states {
			for _, r := range readings {
				n, why := Transition(s, r.in, r.out)
				next = append(next, n...)
				if why != "" {
					whys = append(whys, fmt.Sprintf("from %s: %s", s, why))
				}
			}
		}
		if len(next) == 0 {
			ctx := []string{"replayed so far:"}
			for _, prev := range h.txs[:i] {
				ctx = append(ctx, "  "+prev.String())
			}
			ctx = append(ctx, "illegal: "+Describe(in, out), "why: "+strings.Join(whys, "; "))
			lo, _ := bounds(tl, h.earliest(tx), tx)
			v.addAt(lo, "replay", h.key, fmt.Sprintf("its outbox in commit order is not a legal run: transaction #%d", i+1),
				append(ctx, h.ops(tl)...)...)
			return
		}
		states = dedupe(next)
	}
	if h.db == nil {
		v.add("final state", h.key, "the execution is not in the database")
		return
	}
	what := "the row is not where its outbox leads"
	if h.removed() {
		// Its end is the row retention deleted, as it was then.
		nowMs, what = h.inc.RemovedAtMs, "the row execution retention removed is not where its outbox led"
	}
	var diffs, whys []string
	for _, s := range states {
		// A delayed_promoter whose binary's clock runs ahead promotes
		// that much early by the snapshot's clock.
		d := compare(s, h.db, nowMs+tl.scannerAhead.Milliseconds())
		if d != "" {
			diffs = append(diffs, fmt.Sprintf("model %s: %s", s, d))
			continue
		}
		if !h.removed() {
			return
		}
		_, why := mark(s, MarkRemoved)
		if why == "" {
			return
		}
		whys = append(whys, fmt.Sprintf("model %s: %s", s, why))
	}
	if len(whys) > 0 {
		v.add("replay", h.key, "execution retention removed it where its outbox leads: "+strings.Join(whys, "; "), h.ops(tl)...)
		return
	}
	v.add("final state", h.key, what, append(diffs, h.ops(tl)...)...)
}

func dedupe(ss []State) []State {
	var out []State
	for _, s := range ss {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// publicOf is the public_state of a terminal outcome.
func publicOf(outcome string) string {
	switch outcome {
	case ff.OutcomeSuccess:
		return ff.PublicCompleted
	case ff.OutcomeFailed:
		return ff.PublicFailed
	case ff.OutcomeExpired:
		return ff.PublicExpired
	case ff.OutcomeCancelled:
		return ff.PublicCancelled
	case ff.OutcomeSkipped:
		return ff.PublicSkipped
	}
	return "?"
}

// compare says how the row differs from a model state ("" when it does
// not). A delayed execution may have been promoted once due, and a blocked
// one released: neither writes an event.
func compare(s State, d *DBExec, nowMs int64) string {
	var diffs []string
	want := func(ok bool, format string, args ...any) {
		if !ok {
			diffs = append(diffs, fmt.Sprintf(format, args...))
		}
	}
	runnable := d.Phase == ff.PhaseRunnable
	switch s.Phase {
	case Waiting:
		want(runnable && d.Eligibility == ff.EligibleNow, "want runnable/eligible_now, row is %s/%s", d.Phase, d.Eligibility)
	case Delayed:
		delayed := d.Eligibility == ff.EligibleNotUntilTime && d.DelayUntil != nil && *d.DelayUntil == s.DelayUntil
		promoted := d.Eligibility == ff.EligibleNow && s.DelayUntil <= nowMs
		want(runnable && (delayed || promoted), "want delayed until %d (or promoted), row is %s/%s until %v", s.DelayUntil, d.Phase, d.Eligibility, ptrString(d.DelayUntil))
	case Blocked:
		want(runnable && (d.Eligibility == ff.EligibleBlockedByDeps || d.Eligibility == ff.EligibleNow),
			"want blocked by dependencies (or released), row is %s/%s", d.Phase, d.Eligibility)
	case Active:
		want(d.Phase == ff.PhaseActive, "want active, row is %s", d.Phase)
	case Terminal:
		public := publicOf(s.Outcome)
		if s.PublicRunning {
			public = upstreamPublicRunning
		}
		want(d.Phase == ff.PhaseTerminal && d.Public == public, "want terminal %s, row is %s/%s", public, d.Phase, d.Public)
	}
	want(d.Attempt == s.Attempt, "attempt_index %d, want %d", d.Attempt, s.Attempt)
	want(d.Row == s.Row, "current attempt row exists: %v, want %v", d.Row, s.Row)
	if d.Row && s.Row {
		want(d.Epoch == s.Epoch, "lease_epoch %d, want %d", d.Epoch, s.Epoch)
		want((d.LeaseID == nil && s.LeaseID == uuid.Nil) || (d.LeaseID != nil && *d.LeaseID == s.LeaseID.String()),
			"lease_id %s, want %s", ptrString(d.LeaseID), s.LeaseID) // NULL: an upstream claim's new attempt row
		want(d.Holder != nil && *d.Holder == s.Holder, "worker_instance_id %s, want %s", ptrString(d.Holder), s.Holder)
		want((d.Expires != nil) == s.HasExpiry && (d.Expires == nil || *d.Expires == s.Expires),
			"lease_expires_at_ms %s, want %v", ptrString(d.Expires), expiryString(s))
	}
	want(d.MaxEpoch == s.MaxEpoch, "max(lease_epoch) %d, want %d", d.MaxEpoch, s.MaxEpoch)
	return strings.Join(diffs, "; ")
}

func ptrString[T any](p *T) string {
	if p == nil {
		return "NULL"
	}
	return fmt.Sprint(*p)
}

func expiryString(s State) string {
	if !s.HasExpiry {
		return "NULL"
	}
	return fmt.Sprint(s.Expires)
}

// operations is the execution's history for porcupine: its Create, every
// call (but plain claims that found nothing, legal anywhere), and each
// scanner transaction with the window its commit lies in.
func (h *history) operations(tl Timeline, scannerClient int) []porcupine.Operation {
	ops := []porcupine.Operation{h.create.operation()}
	for _, c := range h.calls {
		if len(c.Steps) == 1 && c.Steps[0].Kind == OpClaim && len(c.Results) == 1 && c.Results[0].Empty {
			continue
		}
		ops = append(ops, c.operation())
	}
	for _, tx := range h.derived {
		lo, hi := bounds(tl, nil, tx)
		ops = append(ops, porcupine.Operation{ClientId: scannerClient, Call: lo, Return: hi,
			Input:  Input{Exec: h.key, Client: scannerClient, Derived: true},
			Output: Output{Events: tx}, Metadata: fmt.Sprintf("xact %d, commit #%d", tx.Xact, tx.Seq)})
	}
	return append(ops, h.marks...)
}

func describeOps(ops []porcupine.Operation) []string {
	out := make([]string, len(ops))
	for i, op := range ops {
		out[i] = fmt.Sprintf("[%s, %s] client %d: %s", ns(op.Call), ns(op.Return), op.ClientId, Describe(op.Input.(Input), op.Output.(Output)))
	}
	return out
}

// lastWhy explains where the longest partial linearization got stuck:
// each operation that could not follow it, and why; and when the earliest
// of them began.
func lastWhy(l Linearizability) (string, int64) {
	var best []porcupine.Operation
	for _, part := range l.Info.PartialLinearizationsOperations() {
		for _, lin := range part {
			if len(lin) > len(best) {
				best = lin
			}
		}
	}
	states := []State{{}}
	for _, op := range best {
		var next []State
		for _, s := range states {
			n, _ := Transition(s, op.Input.(Input), op.Output.(Output))
			next = append(next, n...)
		}
		states = dedupe(next)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "longest legal prefix: %d of %d operations, ending in %v; none of the rest can follow:", len(best), len(l.Ops), states)
	var at int64
	for _, op := range l.Ops {
		if slices.ContainsFunc(best, func(o porcupine.Operation) bool { return o.Call == op.Call && o.ClientId == op.ClientId }) {
			continue
		}
		if at == 0 || op.Call < at {
			at = max(op.Call, 1)
		}
		for _, s := range states {
			if _, why := Transition(s, op.Input.(Input), op.Output.(Output)); why != "" {
				fmt.Fprintf(&b, "\n        %s: %s", Describe(op.Input.(Input), op.Output.(Output)), why)
				break
			}
		}
	}
	return b.String(), at
}

// flows checks each flow group against its upstreams' outcomes: a group
// resolves as its policy says, a satisfied group's downstream was released
// (and claimed only after enough upstreams succeeded) and, with
// cancel_remaining, no upstream is left running; an impossible group's
// downstream is skipped; and a sibling cancel only ever hits an upstream
// of a satisfied cancel_remaining group.
func (v *Verdict) flows(tl Timeline, hs map[string]*history, snap *Snapshot, groups []*Group) {
	cancellers := map[string]bool{}
	for _, g := range groups {
		d := hs[g.Downstream]
		dg := snap.Groups[g.Downstream]
		if d == nil || d.db == nil || dg == nil {
			v.add("flow", g.Downstream, "a downstream or its group is missing from the database")
			continue
		}
		var c counts
		var successes []int64 // earliest commit of each upstream's success
		for _, u := range g.Upstreams {
			h := hs[u]
			if h == nil || h.db == nil {
				v.add("flow", g.Downstream, "upstream "+u+" is missing")
				continue
			}
			if h.db.Phase != ff.PhaseTerminal {
				c.Running++
				continue
			}
			outcome := actions.OutcomeOf(h.db.Public)
			c.count(outcome)
			if outcome == ff.OutcomeSuccess {
				for _, tx := range h.txs {
					if len(tx.Completions) == 1 && tx.Completions[0].Outcome == ff.OutcomeSuccess {
						lo, _ := bounds(tl, h.earliest(tx), tx)
						successes = append(successes, lo)
					}
				}
			}
		}
		// Once the scanners quiesced every hop is counted: the counters
		// are the upstreams' outcomes, each counted once. Execution
		// retention removes a flow once every member has been terminal for
		// the retention, whether or not every hop was applied (a hop
		// changes nothing once its downstream is terminal): a removed
		// group's counters are the outcomes of the hops applied by then,
		// each counted once, the others still running, and its state is
		// what its policy says over them.
		over := c
		if dg.Removed {
			over = dg.Counts
			if dg.Counts.Success > c.Success || dg.Counts.Fail > c.Fail || dg.Counts.Skip > c.Skip || c.Running > 0 ||
				dg.Counts.Success+dg.Counts.Fail+dg.Counts.Skip+dg.Counts.Running != c.Success+c.Fail+c.Skip {
				v.add("flow", g.Downstream, fmt.Sprintf("group counters %+v when execution retention removed its flow; its upstreams' outcomes are %+v", dg.Counts, c))
			}
		} else if dg.Counts != c {
			v.add("flow", g.Downstream, fmt.Sprintf("group counters %+v; its upstreams' outcomes are %+v", dg.Counts, c))
		}
		want := evaluate(g.Policy, over)
		if want != dg.State {
			v.add("flow", g.Downstream, fmt.Sprintf("group is %s; its policy %+v over its upstreams' outcomes (%+v) says %s", dg.State, g.Policy, over, want))
		}
		terminal := d.db.Phase == ff.PhaseTerminal
		switch dg.State {
		case executions.GroupSatisfied:
			if !terminal && d.db.Eligibility == ff.EligibleBlockedByDeps {
				v.add("flow", g.Downstream, "the group is satisfied but its downstream is still blocked")
			}
			if d.db.Public == ff.PublicSkipped {
				v.add("flow", g.Downstream, "the group is satisfied but its downstream was skipped")
			}
			if g.Policy.Kind != executions.PolicyAllOf && g.Policy.OnSatisfied == executions.CancelRemaining {
				for _, u := range g.Upstreams {
					cancellers[u] = true
					if h := hs[u]; h != nil && h.db != nil && h.db.Phase != ff.PhaseTerminal {
						v.add("flow", g.Downstream, "the group is satisfied with cancel_remaining but upstream "+u+" still runs")
					}
				}
			}
			v.releasedInTime(tl, g, d, successes)
		case executions.GroupImpossible:
			if !terminal {
				v.add("flow", g.Downstream, "the group is impossible but its downstream is not terminal")
			}
			fallthrough
		default:
			for _, tx := range d.txs {
				if len(tx.Lease) > 0 && tx.Lease[0].Type == ff.LeaseAcquired {
					v.add("flow", g.Downstream, "the downstream was claimed though its group is "+dg.State, tx.String())
					break
				}
			}
		}
		if d.db.Public == ff.PublicSkipped && dg.State != executions.GroupImpossible {
			v.add("flow", g.Downstream, "skipped though its group is "+dg.State)
		}
	}
	for k, h := range hs {
		for _, tx := range h.derived {
			if len(tx.Completions) == 1 && tx.Completions[0].Outcome == ff.OutcomeCancelled && !cancellers[k] {
				v.add("flow", k, "a sibling cancel of an execution that is no upstream of a satisfied cancel_remaining group", tx.String())
			}
		}
	}
}

// releasedInTime: the downstream's first claim returned after enough
// upstreams could have succeeded.
func (v *Verdict) releasedInTime(tl Timeline, g *Group, d *history, successes []int64) {
	need := len(g.Upstreams)
	switch g.Policy.Kind {
	case executions.PolicyAnyOf:
		need = 1
	case executions.PolicyQuorum:
		need = g.Policy.K
	}
	slices.Sort(successes)
	for _, tx := range d.txs {
		if len(tx.Lease) == 0 || tx.Lease[0].Type != ff.LeaseAcquired {
			continue
		}
		_, hi := bounds(tl, d.earliest(tx), tx)
		if len(successes) < need || hi < successes[need-1] {
			v.add("flow", g.Downstream, fmt.Sprintf("claimed (committed by %s) before %d of its upstreams could have succeeded (successes from %v)",
				ns(hi), need, successes), tx.String())
		}
		return
	}
}

// counts are an edge group's upstream outcomes.
type counts struct{ Success, Fail, Skip, Running int }

func (c *counts) count(outcome string) {
	switch outcome {
	case ff.OutcomeSuccess:
		c.Success++
	case ff.OutcomeSkipped:
		c.Skip++
	default:
		c.Fail++
	}
}

// evaluate is the group policy (docs/flows.md): all_of needs every
// upstream to succeed and is impossible after any other outcome; any_of
// needs one success and is impossible once all have ended otherwise;
// quorum(k) needs k successes and is impossible once fewer than k can still
// succeed.
func evaluate(p executions.EdgePolicy, c counts) string {
	n := c.Success + c.Fail + c.Skip + c.Running
	switch p.Kind {
	case executions.PolicyAnyOf:
		if c.Success >= 1 {
			return executions.GroupSatisfied
		}
		if c.Fail+c.Skip >= n {
			return executions.GroupImpossible
		}
	case executions.PolicyQuorum:
		if c.Success >= p.K {
			return executions.GroupSatisfied
		}
		if n-(c.Fail+c.Skip) < p.K {
			return executions.GroupImpossible
		}
	default:
		if c.Fail+c.Skip > 0 {
			return executions.GroupImpossible
		}
		if c.Success == n {
			return executions.GroupSatisfied
		}
	}
	return executions.GroupPending
}

// ArtifactsDir is where a run writes its visualizations: $FF_ARTIFACTS, else
// bin/artifacts/leasecheck/ under the repository's root.
func ArtifactsDir() string {
	if d := os.Getenv("FF_ARTIFACTS"); d != "" {
		return d
	}
	root, ok := testproc.RepoRoot()
	if !ok {
		root, _ = os.Getwd()
	}
	return filepath.Join(root, "bin", "artifacts", "leasecheck")
}

// WriteArtifacts writes, for each execution with a violation (at most
// limit), porcupine's HTML visualization of its history and a text file
// with its violations and operations, named after the seed. It returns the
// files written.
func (v *Verdict) WriteArtifacts(dir string, seed uint64, limit int) ([]string, error) {
	byExec := map[string][]Violation{}
	var order []string
	for _, vi := range v.Violations {
		if vi.Exec == "" {
			continue
		}
		if byExec[vi.Exec] == nil {
			order = append(order, vi.Exec)
		}
		byExec[vi.Exec] = append(byExec[vi.Exec], vi)
	}
	if len(order) == 0 {
		return nil, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	nm := Model()
	model := nm.ToModel()
	var files []string
	for i, exec := range order {
		if i >= limit {
			break
		}
		name := fmt.Sprintf("seed%d-%s", seed, fileSafe(exec))
		var b strings.Builder
		fmt.Fprintf(&b, "seed %d, execution %s\n\n", seed, exec)
		for _, vi := range byExec[exec] {
			b.WriteString(vi.String() + "\n\n")
		}
		txt := filepath.Join(dir, name+".txt")
		if err := os.WriteFile(txt, []byte(b.String()), 0o644); err != nil {
			return files, err
		}
		files = append(files, txt)
		ops := v.history[exec]
		if len(ops) == 0 {
			continue
		}
		_, info := porcupine.CheckOperationsVerbose(model, ops, 30*time.Second)
		html := filepath.Join(dir, name+".html")
		if err := porcupine.VisualizePath(model, info, html); err != nil {
			return files, err
		}
		files = append(files, html)
	}
	return files, nil
}

func fileSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '_'
	}, s)
}
