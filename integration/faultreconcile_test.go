package integration

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/jobs"
	"github.com/ffriver/ffriver/subscribe"
	"github.com/google/uuid"
)

// This file is the reconciliation of the fault suite's scenario
// (faultharness_test.go): once the load is over, reconcile reads the
// executions, their attempts, both outboxes and River's item jobs, checks
// each execution against its class and each stream's tail against its
// table, and logs the count table.

// execRow is what the database holds about one seeded execution.
type execRow struct {
	lane, phase, ownership, eligibility, public, attemptState string
	blocking                                                  *string
	delayUntil, terminalAt                                    *int64
	attempts                                                  int
	attOutcome                                                *string
	attLeaseExp, attTerminal                                  *int64
	attEpoch                                                  *int64
	leaseEvents, completionEvents                             []string // "type/epoch/attempt", "outcome"
	processed                                                 map[string]int
	// rerun counts item jobs that completed no_op on a later attempt: the
	// re-run of a job whose process died after its transaction committed
	// and before River completed the job (its "processed" output died with
	// the process).
	rerun map[string]int
}

// itemKinds are the kinds of the scenario's item jobs, the ones
// reconcile credits executions with.
func itemKinds() []string {
	return []string{jobs.KindExpireAttempt, jobs.KindPromoteDelayed, jobs.KindExpireDeadline}
}

// classWant is the end state of each class: the state, the attempt, the events
// and the item job kind that must have processed it exactly once.
type classWant struct {
	what        string
	phase, elig string
	public      string
	attempt     bool // a fenced attempt 0 (interrupted, epoch+1, no lease)
	leaseEvents []string
	completions []string
	kind        string
}

var classWants = map[string]classWant{
	laneLease: {"attempt_timeout: terminal expired", "terminal", "not_applicable", "expired", true,
		[]string{fmt.Sprintf("expired/%d/0", seededEpoch)}, []string{"expired"}, jobs.KindExpireAttempt},
	laneDelay: {"delayed_promoter: eligible now", "runnable", "eligible_now", "waiting", false,
		nil, nil, jobs.KindPromoteDelayed},
	laneDeadline: {"execution_deadline, unleased", "terminal", "not_applicable", "expired", false,
		nil, []string{"expired"}, jobs.KindExpireDeadline},
	laneLeasedDeadline: {"execution_deadline, leased", "terminal", "not_applicable", "expired", true,
		[]string{fmt.Sprintf("expired/%d/0", seededEpoch)}, []string{"expired"}, jobs.KindExpireDeadline},
}

var classOrder = []string{laneLease, laneDelay, laneDeadline, laneLeasedDeadline}

// problems collects the first few faults of each kind and counts them all.
type problems struct {
	t      *testing.T
	counts map[string]int
}

// add counts a problem of kind and reports it (t.Errorf) while it is one
// of the first five of its kind.
func (p *problems) add(kind, format string, args ...any) {
	p.counts[kind]++
	if p.counts[kind] <= 5 {
		p.t.Errorf(kind+": "+format, args...)
	}
}

// total returns the number of problems of every kind.
func (p *problems) total() int {
	n := 0
	for _, c := range p.counts {
		n += c
	}
	return n
}

// reconcile reads the database and what the tails printed, checks every
// execution and every event, and prints the count table.
func (sc *scenario) reconcile() {
	sc.t.Helper()
	probs := &problems{t: sc.t, counts: map[string]int{}}
	var got reconcileCounts
	execs := sc.readExecutions()
	leases, completions := sc.readLeaseTable(), sc.readCompletionTable()
	got.itemJobs, got.outcomes = sc.readItemJobs(execs, probs)
	got.events = sc.attachEvents(execs, leases, completions, probs)
	got.classes = checkExecutions(execs, probs)
	got.leases = sc.checkStream(sc.tails["leases"], leases.event, len(leases), probs)
	got.completions = sc.checkStream(sc.tails["completions"], completions.event, len(completions), probs)
	got.ackedLease, got.ackedCompletion = sc.checkWrites(leases, completions, probs)
	sc.logCounts(got, probs)
	sc.checkTotals(got, probs)
}

// reconcileCounts is what a reconciliation counted, for its count table
// and its check of the totals.
type reconcileCounts struct {
	classes                     classCounts
	events                      eventCounts
	leases, completions         streamCheck
	ackedLease, ackedCompletion int            // the writers' acknowledged events
	itemJobs                    int            // River's item jobs
	outcomes                    map[string]int // "state/outcome" of every item job
}

// readExecutions reads every execution of the schema and its attempt 0.
func (sc *scenario) readExecutions() map[uuid.UUID]*execRow {
	t := sc.t
	t.Helper()
	execs := map[uuid.UUID]*execRow{}
	rows, err := sc.db.Pool.Query(sc.ctx, `SELECT c.execution_id, c.lane_id, c.lifecycle_phase, c.ownership_state, c.eligibility_state,
		c.public_state, c.attempt_state, c.blocking_reason, c.delay_until_ms, c.terminal_at_ms,
		(SELECT count(*) FROM ff_attempt x WHERE x.partition_key = c.partition_key AND x.execution_id = c.execution_id),
		a.outcome, a.lease_expires_at_ms, a.terminal_at_ms, a.lease_epoch
		FROM ff_exec_core c LEFT JOIN ff_attempt a
		  ON a.partition_key = c.partition_key AND a.execution_id = c.execution_id AND a.attempt_index = 0`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id uuid.UUID
		e := &execRow{processed: map[string]int{}, rerun: map[string]int{}}
		if err := rows.Scan(&id, &e.lane, &e.phase, &e.ownership, &e.eligibility, &e.public, &e.attemptState, &e.blocking,
			&e.delayUntil, &e.terminalAt, &e.attempts, &e.attOutcome, &e.attLeaseExp, &e.attTerminal, &e.attEpoch); err != nil {
			t.Fatal(err)
		}
		execs[id] = e
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return execs
}

// leaseRow is one row of ff_lease_event.
type leaseRow struct {
	exec        string
	typ         string
	epoch       *int64
	attempt     *int32
	partition   int32
	eventString string
}

// leaseTable is ff_lease_event by event id.
type leaseTable map[int64]leaseRow

// readLeaseTable reads ff_lease_event.
func (sc *scenario) readLeaseTable() leaseTable {
	t := sc.t
	t.Helper()
	leases := leaseTable{}
	rows, err := sc.db.Pool.Query(sc.ctx, `SELECT event_id, execution_id, event_type, lease_epoch, attempt_index, partition_key FROM ff_lease_event`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		var r leaseRow
		if err := rows.Scan(&id, &r.exec, &r.typ, &r.epoch, &r.attempt, &r.partition); err != nil {
			t.Fatal(err)
		}
		r.eventString = leaseString(r.typ, r.epoch, r.attempt)
		leases[id] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return leases
}

// event looks lease event id up as checkStream compares it with a printed
// line: its execution id and "type/epoch/attempt", and whether the table
// has it.
func (lt leaseTable) event(id int64) (string, string, bool) {
	r, ok := lt[id]
	if !ok {
		return "", "", false
	}
	u, _ := uuid.Parse(r.exec)
	return ff.ExecutionID{Partition: int16(r.partition), UUID: u}.String(), r.eventString, true
}

// completionRow is one row of ff_completion_event.
type completionRow struct {
	exec      uuid.UUID
	outcome   string
	partition int16
}

// completionTable is ff_completion_event by event id.
type completionTable map[int64]completionRow

// readCompletionTable reads ff_completion_event.
func (sc *scenario) readCompletionTable() completionTable {
	t := sc.t
	t.Helper()
	completions := completionTable{}
	rows, err := sc.db.Pool.Query(sc.ctx, `SELECT event_id, execution_id, outcome, partition_key FROM ff_completion_event`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		var r completionRow
		if err := rows.Scan(&id, &r.exec, &r.outcome, &r.partition); err != nil {
			t.Fatal(err)
		}
		completions[id] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return completions
}

// event looks completion event id up as checkStream compares it with a
// printed line: its execution id and outcome, and whether the table has it.
func (ct completionTable) event(id int64) (string, string, bool) {
	r, ok := ct[id]
	if !ok {
		return "", "", false
	}
	return ff.ExecutionID{Partition: r.partition, UUID: r.exec}.String(), r.outcome, true
}

// readItemJobs reads River's item jobs and counts them, and their
// "state/outcome"; it credits each execution with the jobs that processed
// it and with the re-runs that completed no_op (execRow.processed, rerun).
func (sc *scenario) readItemJobs(execs map[uuid.UUID]*execRow, probs *problems) (itemJobs int, outcomes map[string]int) {
	t := sc.t
	t.Helper()
	outcomes = map[string]int{} // "state/outcome" of every item job
	rows, err := sc.db.Pool.Query(sc.ctx, `SELECT kind, args->>'id', state, coalesce(metadata->'output'->>'outcome', ''), attempt FROM river_job WHERE kind = ANY($1)`, itemKinds())
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var kind, idText, state, outcome string
		var attempt int
		if err := rows.Scan(&kind, &idText, &state, &outcome, &attempt); err != nil {
			t.Fatal(err)
		}
		itemJobs++
		outcomes[state+"/"+outcome]++
		id, err := ff.ParseExecutionID(idText)
		if err != nil {
			probs.add("bad item job", "%s job with id %q: %v", kind, idText, err)
			continue
		}
		if state == "completed" && outcome == "processed" {
			if e := execs[id.UUID]; e != nil {
				e.processed[kind]++
			} else {
				probs.add("bad item job", "%s processed unknown execution %s", kind, id)
			}
		}
		if state == "completed" && outcome == "no_op" && attempt > 1 {
			if e := execs[id.UUID]; e != nil {
				e.rerun[kind]++
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return itemJobs, outcomes
}

// eventCounts counts the events in the outbox tables by whose they are.
type eventCounts struct {
	scenarioLease, scenarioCompletion int // a seeded execution's
	writerLease, writerCompletion     int // a writer's
}

// attachEvents attaches the events of the tables to their executions
// (execRow.leaseEvents, completionEvents) and counts them; events of no
// seeded execution must be a writer's.
func (sc *scenario) attachEvents(execs map[uuid.UUID]*execRow, leases leaseTable, completions completionTable, probs *problems) eventCounts {
	var n eventCounts
	sc.writerEvents = map[bool]map[int64]bool{true: {}, false: {}}
	for id, r := range leases {
		u, err := uuid.Parse(r.exec)
		e := execs[u]
		switch {
		case err == nil && e != nil:
			e.leaseEvents = append(e.leaseEvents, r.eventString)
			n.scenarioLease++
		case sc.writers != nil && sc.writers.has(id, true):
			n.writerLease++
			sc.writerEvents[true][id] = true
		default:
			probs.add("stray event", "lease event %d (%s for %s) belongs to no seeded execution and no writer", id, r.eventString, r.exec)
		}
	}
	for id, r := range completions {
		e := execs[r.exec]
		switch {
		case e != nil:
			e.completionEvents = append(e.completionEvents, r.outcome)
			n.scenarioCompletion++
		case sc.writers != nil && sc.writers.has(id, false):
			n.writerCompletion++
			sc.writerEvents[false][id] = true
		default:
			probs.add("stray event", "completion event %d (%s for %s) belongs to no seeded execution and no writer", id, r.outcome, r.exec)
		}
	}
	return n
}

// classCounts counts executions per lane.
type classCounts struct {
	seeded       map[string]int
	transitioned map[string]int // executions in their end state
	exactlyOnce  map[string]int // ... and processed by exactly one item job
	consistent   map[string]int // ... and with exactly their events, attempt and nothing else
}

// checkExecutions checks every execution against its class: its end state,
// the item job that processed it, its row, its attempt and its events.
func checkExecutions(execs map[uuid.UUID]*execRow, probs *problems) classCounts {
	c := classCounts{seeded: map[string]int{}, transitioned: map[string]int{}, exactlyOnce: map[string]int{}, consistent: map[string]int{}}
	for id, e := range execs {
		w, ok := classWants[e.lane]
		if !ok {
			probs.add("stray execution", "execution %s in lane %q", id, e.lane)
			continue
		}
		c.seeded[e.lane]++
		inEndState := e.phase == w.phase && e.eligibility == w.elig && e.public == w.public
		if inEndState {
			c.transitioned[e.lane]++
		} else {
			probs.add("not transitioned", "%s (%s): %s/%s/%s, want %s/%s/%s", id, e.lane, e.phase, e.eligibility, e.public, w.phase, w.elig, w.public)
		}
		once := e.processedOnce(w)
		if inEndState && once {
			c.exactlyOnce[e.lane]++
		}
		if !once {
			probs.add("not exactly once", "%s (%s): processed by item jobs %v, want one %s", id, e.lane, e.processed, w.kind)
		}
		bad := e.halfWritten(w)
		if len(bad) == 0 && inEndState && once {
			c.consistent[e.lane]++
		} else if len(bad) > 0 {
			probs.add("half-written", "%s (%s): %s", id, e.lane, strings.Join(bad, "; "))
		}
	}
	return c
}

// processedOnce says whether e was processed by exactly one item job of its
// class w's kind: one output says so, or, when the process that applied it
// died before River completed its job, none does and the job's re-run
// recorded no_op (DESIGN §2: River completes item jobs after their commit).
// The transition and its events are checked exactly once from the data
// either way (halfWritten).
func (e *execRow) processedOnce(w classWant) bool {
	return (e.processed[w.kind] == 1 && len(e.processed) == 1) ||
		(len(e.processed) == 0 && e.rerun[w.kind] > 0)
}

// halfWritten lists what of e's row, attempt and events is not as its class
// w wants (nothing when e is consistent); it sorts e's events.
func (e *execRow) halfWritten(w classWant) []string {
	var bad []string
	switch w.phase {
	case "terminal":
		if e.ownership != "unowned" || e.attemptState != "attempt_terminal" || e.terminalAt == nil || e.delayUntil != nil || e.blocking != nil {
			bad = append(bad, fmt.Sprintf("terminal row half-written: ownership %s, attempt_state %s, terminal_at %v, delay_until %v, blocking_reason %v",
				e.ownership, e.attemptState, ptr(e.terminalAt), ptr(e.delayUntil), ptr(e.blocking)))
		}
	default:
		if e.delayUntil != nil || e.terminalAt != nil || e.ownership != "unowned" || e.attemptState != "pending_first_attempt" || e.blocking != nil {
			bad = append(bad, fmt.Sprintf("promoted row half-written: delay_until %v, terminal_at %v, ownership %s, attempt_state %s, blocking_reason %v",
				ptr(e.delayUntil), ptr(e.terminalAt), e.ownership, e.attemptState, ptr(e.blocking)))
		}
	}
	switch {
	case w.attempt && (e.attempts != 1 || e.attOutcome == nil || *e.attOutcome != "interrupted" || e.attLeaseExp != nil ||
		e.attTerminal == nil || e.attEpoch == nil || *e.attEpoch != seededEpoch+1):
		bad = append(bad, fmt.Sprintf("attempt not fenced once: %d attempts, outcome %v, lease_expires %v, terminal_at %v, epoch %v (want interrupted, no lease, epoch %d)",
			e.attempts, ptr(e.attOutcome), ptr(e.attLeaseExp), ptr(e.attTerminal), ptr(e.attEpoch), seededEpoch+1))
	case !w.attempt && e.attempts != 0:
		bad = append(bad, fmt.Sprintf("%d attempt rows, want none", e.attempts))
	}
	slices.Sort(e.leaseEvents)
	slices.Sort(e.completionEvents)
	if !slices.Equal(e.leaseEvents, w.leaseEvents) {
		bad = append(bad, fmt.Sprintf("lease events %q, want %q", e.leaseEvents, w.leaseEvents))
	}
	if !slices.Equal(e.completionEvents, w.completions) {
		bad = append(bad, fmt.Sprintf("completion events %q, want %q", e.completionEvents, w.completions))
	}
	return bad
}

// streamCheck is what checkStream counted of one stream.
type streamCheck struct {
	distinct, repeated, missing, unknown, mismatched, disorder int
	scenario, writer                                           int
	reconnects                                                 int
	cursorFileOK                                               bool
}

// checkStream checks what the tail tp printed against its stream's table,
// of size rows, in which inTable looks an event up: every event printed
// once, in cursor order, as the table has it, and the cursor file at the
// last one printed. It classes events as attachEvents did the table's
// (sc.writerEvents), which must have run first.
func (sc *scenario) checkStream(tp *tailProc, inTable func(id int64) (exec string, what string, ok bool), size int, probs *problems) streamCheck {
	var c streamCheck
	seen := map[int64]int{}
	lines := tp.snapshot()
	var prev subscribe.Cursor
	for i, ev := range lines {
		seen[ev.EventID]++
		if seen[ev.EventID] == 2 {
			c.repeated++
			probs.add("repeated", "%s stream printed event %d twice", tp.stream, ev.EventID)
		}
		cur, err := subscribe.ParseCursor(ev.Cursor)
		if err != nil {
			probs.add("bad line", "%s stream: cursor %q: %v", tp.stream, ev.Cursor, err)
		} else {
			if i > 0 && !prev.Less(cur) {
				c.disorder++
				probs.add("disorder", "%s stream: event %d at %s does not follow %s", tp.stream, ev.EventID, cur, prev)
			}
			prev = cur
		}
		exec, what, ok := inTable(ev.EventID)
		if !ok {
			c.unknown++
			probs.add("unknown event", "%s stream printed event %d, which is not in the table", tp.stream, ev.EventID)
			continue
		}
		if got := ev.what(); got != what || ev.ExecutionID != exec {
			c.mismatched++
			probs.add("mismatch", "%s stream: event %d printed as %s for %s; the table says %s for %s", tp.stream, ev.EventID, got, ev.ExecutionID, what, exec)
		}
		if seen[ev.EventID] == 1 {
			if sc.writerEvents[tp.stream == "leases"][ev.EventID] {
				c.writer++
			} else {
				c.scenario++
			}
		}
	}
	c.distinct = len(seen)
	c.missing = size - (c.distinct - c.unknown)
	if c.missing != 0 {
		probs.add("missing", "%s stream printed %d distinct events of the table's %d", tp.stream, c.distinct-c.unknown, size)
	}
	c.reconnects = strings.Count(tp.stderr.String(), "connection lost; reconnecting")
	if b, err := os.ReadFile(tp.cursorFile()); err == nil && len(lines) > 0 {
		c.cursorFileOK = strings.TrimSpace(string(b)) == lines[len(lines)-1].Cursor
		if !c.cursorFileOK {
			probs.add("cursor file", "%s: cursor file holds %q, the last printed event is at %s", tp.stream, strings.TrimSpace(string(b)), lines[len(lines)-1].Cursor)
		}
	}
	return c
}

// checkWrites checks that the writers' acknowledged events are each in the
// table, and returns how many they acknowledged (none without writers).
func (sc *scenario) checkWrites(leases leaseTable, completions completionTable, probs *problems) (ackedLease, ackedCompletion int) {
	if sc.writers != nil {
		ackedLease, ackedCompletion = sc.writers.acked()
		for id := range sc.writers.snapshot(true) {
			if _, ok := leases[id]; !ok {
				probs.add("lost write", "writer lease event %d was acknowledged but is not in the table", id)
			}
		}
		for id := range sc.writers.snapshot(false) {
			if _, ok := completions[id]; !ok {
				probs.add("lost write", "writer completion event %d was acknowledged but is not in the table", id)
			}
		}
	}
	return ackedLease, ackedCompletion
}

// logCounts logs the count table (expected, in the database, printed by the
// streams), the item jobs by outcome, the streams' reconnects and the
// fault's notes.
func (sc *scenario) logCounts(got reconcileCounts, probs *problems) {
	t := sc.t
	t.Helper()
	wantLease, wantCompletion := sc.load.events()
	ls, cs := got.leases, got.completions
	const dash = "-"
	table := [][4]string{{sc.t.Name(), "expected", "in DB", "by stream"}}
	row := func(label string, cells ...any) {
		r := [4]string{label}
		for i, c := range cells {
			r[i+1] = fmt.Sprint(c)
		}
		table = append(table, r)
	}
	for _, lane := range classOrder {
		row("transitions exactly once: "+classWants[lane].what, got.classes.seeded[lane], got.classes.exactlyOnce[lane], dash)
	}
	row("lease events (expired)", wantLease, got.events.scenarioLease, ls.scenario)
	row("completion events (expired)", wantCompletion, got.events.scenarioCompletion, cs.scenario)
	if sc.writers != nil {
		row("writers' lease events (acknowledged)", got.ackedLease, got.events.writerLease, ls.writer)
		row("writers' completion events (acknowledged)", got.ackedCompletion, got.events.writerCompletion, cs.writer)
	}
	row("rows half-written or not transitioned", 0, probs.counts["half-written"]+probs.counts["not transitioned"], dash)
	row("executions transitioned more than once", 0, probs.counts["not exactly once"], dash)
	row("events printed twice (leases/completions)", "0/0", dash, fmt.Sprintf("%d/%d", ls.repeated, cs.repeated))
	row("events missing from a stream (leases/completions)", "0/0", dash, fmt.Sprintf("%d/%d", ls.missing, cs.missing))
	row("events out of cursor order or unlike the table", 0, dash, ls.disorder+cs.disorder+ls.mismatched+cs.mismatched+ls.unknown+cs.unknown)
	var b strings.Builder
	b.WriteString(formatTable(table))
	fmt.Fprintf(&b, "  item jobs: %d (%s); stream reconnects: leases %d, completions %d\n",
		got.itemJobs, formatCounts(got.outcomes), ls.reconnects, cs.reconnects)
	for _, n := range sc.notes {
		fmt.Fprintf(&b, "  %s\n", n)
	}
	t.Logf("counts:\n%s", b.String())
}

// formatTable lays the count table out: the label column left-aligned, the
// three count columns right-aligned, each row indented on a line of its own.
func formatTable(table [][4]string) string {
	var widths [4]int
	for _, r := range table {
		for i, c := range r {
			widths[i] = max(widths[i], len(c))
		}
	}
	var b strings.Builder
	for _, r := range table {
		fmt.Fprintf(&b, "  %-*s  %*s  %*s  %*s\n", widths[0], r[0], widths[1], r[1], widths[2], r[2], widths[3], r[3])
	}
	return b.String()
}

// checkTotals checks the totals themselves: every lane seeded and
// consistent in full, every event of the load in its table and printed,
// every write acknowledged, in the table and printed, and no problem.
func (sc *scenario) checkTotals(got reconcileCounts, probs *problems) {
	t := sc.t
	t.Helper()
	l := sc.load
	wantLease, wantCompletion := l.events()
	ls, cs := got.leases, got.completions
	for _, lane := range classOrder {
		want := map[string]int{laneLease: l.leases, laneDelay: l.delayed, laneDeadline: l.deadlines, laneLeasedDeadline: l.leasedDeadlines}[lane]
		if got.classes.seeded[lane] != want || got.classes.consistent[lane] != want {
			t.Errorf("%s: %d seeded, %d transitioned, %d exactly once, %d consistent; want %d each",
				lane, got.classes.seeded[lane], got.classes.transitioned[lane], got.classes.exactlyOnce[lane], got.classes.consistent[lane], want)
		}
	}
	if got.events.scenarioLease != wantLease || got.events.scenarioCompletion != wantCompletion {
		t.Errorf("events in the tables: %d lease, %d completion; want %d, %d", got.events.scenarioLease, got.events.scenarioCompletion, wantLease, wantCompletion)
	}
	if ls.scenario != wantLease || cs.scenario != wantCompletion {
		t.Errorf("events printed by the streams: %d lease, %d completion; want %d, %d", ls.scenario, cs.scenario, wantLease, wantCompletion)
	}
	if sc.writers != nil {
		// A transaction whose COMMIT was in doubt (the connection lost
		// before the answer) may be in the tables or not; the streams
		// print what the tables hold.
		doubtL, doubtC := sc.writers.inDoubt()
		inTables := func(n, acked, doubt int) bool { return n >= acked && n <= acked+doubt }
		if !inTables(got.events.writerLease, got.ackedLease, doubtL) || !inTables(got.events.writerCompletion, got.ackedCompletion, doubtC) ||
			ls.writer != got.events.writerLease || cs.writer != got.events.writerCompletion {
			t.Errorf("writers: acknowledged %d/%d (and %d/%d in doubt), in the tables %d/%d, printed %d/%d", got.ackedLease, got.ackedCompletion,
				doubtL, doubtC, got.events.writerLease, got.events.writerCompletion, ls.writer, cs.writer)
		}
	}
	if n := probs.total(); n > 0 {
		t.Errorf("%d problems: %v", n, probs.counts)
	}
}

// leaseString is a lease event as the reconciliation compares it:
// "type/epoch/attempt", "-" for a NULL epoch or attempt.
func leaseString(typ string, epoch *int64, attempt *int32) string {
	e, a := "-", "-"
	if epoch != nil {
		e = fmt.Sprint(*epoch)
	}
	if attempt != nil {
		a = fmt.Sprint(*attempt)
	}
	return typ + "/" + e + "/" + a
}

// ptr is what p points to, for a message, or "NULL" when p is nil.
func ptr[T any](p *T) any {
	if p == nil {
		return "NULL"
	}
	return *p
}

// formatCounts lists m as "key n" by key, comma-separated.
func formatCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}
