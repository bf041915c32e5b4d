package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/ffriver/ffriver/internal/testproc"
	"github.com/ffriver/ffriver/jobs"
	"github.com/ffriver/ffriver/subscribe"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// This file is the harness of the fault suite (faults_test.go): one scenario
// of due work driven by the real binaries, consumed by `ffctl tail`
// processes, and reconciled against the database when it is over.
//
// A scenario seeds, with plain SQL as an external producer would, four
// classes of executions whose due times are spread over a window, so the
// load is still running when the fault is injected:
//
//	lane               seeded as                                 due transition            events
//	fault_lease        active, attempt lease expiring            attempt_timeout: terminal lease expired,
//	                                                             expired, attempt fenced   completion expired
//	fault_delay        runnable, delayed until a time            delayed_promoter:         none
//	                                                             eligible now
//	fault_deadline     runnable, eligible, deadline              execution_deadline:       completion expired
//	                                                             terminal expired
//	fault_leased_dl    active, lease good for an hour, deadline  execution_deadline:       lease expired,
//	                                                             terminal, lease fenced    completion expired
//
// It runs ffscheduler (one or two), ffworker (one or more) and two
// `ffctl tail --format json --cursor-file` processes, one per stream, and
// at the end checks, per execution, the state, the attempt row, the events
// in both outboxes and the River item jobs that processed it; and per
// stream, that every event in the table was printed exactly once, in cursor
// order, with the table's fields.

// faultBins are the binaries of the suite, built once per TestFaults.
type faultBins struct{ scheduler, worker, ffctl string }

// The lanes of the four classes.
const (
	laneLease          = "fault_lease"
	laneDelay          = "fault_delay"
	laneDeadline       = "fault_deadline"
	laneLeasedDeadline = "fault_leased_dl"
)

// seededEpoch is the lease_epoch of the seeded attempts: their lease events
// carry it, and the fenced attempt ends at seededEpoch+1.
const seededEpoch = 3

// faultPartitions is the partition count of a scenario's schema: enough to
// spread the load, few enough that a tick inserts a handful of scans.
const faultPartitions = 16

// faultLoad says how much due work a scenario seeds and over which window
// it comes due (starting half a second after seeding).
type faultLoad struct {
	leases, delayed, deadlines, leasedDeadlines int
	window                                      time.Duration
}

// defaultFaultLoad: 2,400 due transitions coming due over 8 s, 1,800 lease
// events and 2,100 completion events. One ffworker keeps up with them as
// they come due, so the load runs about the 8 s window and a fault injected
// a few seconds in lands mid-load.
var defaultFaultLoad = faultLoad{leases: 1500, delayed: 300, deadlines: 300, leasedDeadlines: 300, window: 8 * time.Second}

func (l faultLoad) transitions() int { return l.leases + l.delayed + l.deadlines + l.leasedDeadlines }

// events returns how many lease and completion events the load's
// transitions write: a lease event per fenced attempt (fault_lease,
// fault_leased_dl), a completion event per terminal execution (all but
// fault_delay).
func (l faultLoad) events() (lease, completion int) {
	return l.leases + l.leasedDeadlines, l.leases + l.deadlines + l.leasedDeadlines
}

// The flags of the binaries of a scenario: short tick intervals, and a job
// timeout and rescue delay short enough that the jobs a killed process left
// running are retried the next time River's rescuer runs (when a scheduler
// becomes leader, then every 30 s). The worker keeps ffworker's default
// concurrency.
var (
	schedulerFaultFlags = []string{"--ui-addr", "off", "--scan-concurrency", "2",
		"--job-timeout", "3s", "--rescue-after", "4s",
		"--attempt-timeout-interval", "300ms", "--delayed-promoter-interval", "300ms", "--execution-deadline-interval", "300ms"}
	workerFaultFlags = []string{"--concurrency", "16", "--scan-concurrency", "1", "--job-timeout", "3s"}
)

// scenario is one run of the fault suite. Its DB (Count, Exec, …) runs
// plain SQL on the schema, each statement bounded by 10 s as query's are.
type scenario struct {
	fftest.DB
	t     *testing.T
	ctx   context.Context
	db    *testdb.DB
	url   string
	bins  faultBins
	load  faultLoad
	tails map[string]*tailProc
	procs []*proc
	// killed are the processes the fault killed on purpose.
	killed []*proc
	// seededAt is when the due window was written (the window starts
	// half a second later).
	seededAt time.Time
	// notes are the fault's own lines under the count table.
	notes []string
	// writers, when set, committed extra outbox rows (the out-of-order
	// fault); their events are part of the reconciliation.
	writers *outboxWriters
}

func newScenario(t *testing.T, bins faultBins, db *testdb.DB, url string) *scenario {
	return &scenario{DB: fftest.DB{TB: t, Ctx: t.Context(), Pool: db.Pool, Timeout: 10 * time.Second}, t: t, ctx: t.Context(), db: db, url: url, bins: bins, load: defaultFaultLoad, tails: map[string]*tailProc{}}
}

func (sc *scenario) dbFlags() []string {
	return []string{"--database-url", sc.url, "--schema", sc.db.Schema}
}

func (sc *scenario) note(format string, args ...any) {
	sc.notes = append(sc.notes, fmt.Sprintf(format, args...))
}

// startScheduler starts an ffscheduler with the fault suite's flags and
// extra ones.
func (sc *scenario) startScheduler(id string, extra ...string) *proc {
	sc.t.Helper()
	p := startProc(sc.t, id, sc.bins.scheduler, slices.Concat(sc.dbFlags(), schedulerFaultFlags, []string{"--id", id}, extra)...)
	sc.procs = append(sc.procs, p)
	return p
}

func (sc *scenario) startWorker(id string) *proc {
	sc.t.Helper()
	p := startProc(sc.t, id, sc.bins.worker, slices.Concat(sc.dbFlags(), workerFaultFlags, []string{"--id", id})...)
	sc.procs = append(sc.procs, p)
	return p
}

// startTails starts one `ffctl tail` per stream, from the start of the
// (still empty) outboxes.
func (sc *scenario) startTails() {
	sc.t.Helper()
	dir := sc.t.TempDir()
	for _, stream := range []string{"leases", "completions"} {
		args := slices.Concat([]string{"tail", "--stream", stream, "--from-start", "--format", "json",
			"--cursor-file", filepath.Join(dir, stream+".cursor")}, sc.dbFlags())
		sc.tails[stream] = startTail(sc.t, sc.bins.ffctl, stream, args...)
	}
}

// startOneOfEach starts the tails, a scheduler "sched" (sc.procs[0]) and
// a worker "worker", and waits for the scheduler to lead.
func (sc *scenario) startOneOfEach() {
	sc.t.Helper()
	sc.startTails()
	sc.startScheduler("sched")
	sc.startWorker("worker")
	sc.awaitLeader(20 * time.Second)
}

// query runs a one-row query; errors are returned, not fatal (the server
// may be restarting).
func (sc *scenario) query(q string, args []any, dest ...any) error {
	ctx, cancel := context.WithTimeout(sc.ctx, 10*time.Second)
	defer cancel()
	return sc.db.Pool.QueryRow(ctx, q, args...).Scan(dest...)
}

// await polls cond until it holds; errors inside cond are its business.
func (sc *scenario) await(what string, within time.Duration, cond func() (bool, string)) time.Duration {
	sc.t.Helper()
	return sc.awaitExplained(what, within, cond, nil)
}

// awaitExplained is await whose failure adds what explain says, when set.
func (sc *scenario) awaitExplained(what string, within time.Duration, cond func() (bool, string), explain func() string) time.Duration {
	sc.t.Helper()
	began := time.Now()
	deadline := began.Add(within)
	for {
		ok, status := cond()
		if ok {
			return time.Since(began)
		}
		if time.Now().After(deadline) || sc.ctx.Err() != nil {
			if explain != nil {
				status += "\n" + explain()
			}
			sc.t.Fatalf("timed out after %s waiting for %s: %s", within, what, status)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// explainStreams says, for each stream, which events of its table the tail
// has not printed (or printed twice): their event and transaction ids, the
// first tick that saw each transaction finished and the tick before it,
// and the tail's last cursor, so that a stream that fell behind tells a
// lost batch from a stuck one.
func (sc *scenario) explainStreams() string {
	var b strings.Builder
	for _, st := range []struct{ stream, table string }{{"leases", "ff_lease_event"}, {"completions", "ff_completion_event"}} {
		tp := sc.tails[st.stream]
		printed := map[int64]int{}
		lines := tp.snapshot()
		for _, ev := range lines {
			printed[ev.EventID]++
		}
		fmt.Fprintf(&b, "%s: %d lines printed", st.stream, len(lines))
		if len(lines) > 0 {
			last := lines[len(lines)-1]
			c, err := subscribe.ParseCursor(last.Cursor)
			fmt.Fprintf(&b, ", the last event %d at %#v (%v)", last.EventID, c, err)
		}
		b.WriteString("\n")
		for id, n := range printed {
			if n > 1 {
				fmt.Fprintf(&b, "  event %d printed %d times\n", id, n)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		rows, err := sc.db.Pool.Query(ctx, `SELECT event_id, xact_id FROM `+st.table+` ORDER BY xact_id, event_id`)
		if err != nil {
			cancel()
			fmt.Fprintf(&b, "  reading %s: %v\n", st.table, err)
			continue
		}
		type row struct{ event, xact int64 }
		all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
			var o row
			return o, r.Scan(&o.event, &o.xact)
		})
		if err != nil {
			cancel()
			fmt.Fprintf(&b, "  reading %s: %v\n", st.table, err)
			continue
		}
		var lost []row
		for _, r := range all {
			if printed[r.event] == 0 {
				lost = append(lost, r)
			}
		}
		fmt.Fprintf(&b, "  %d of %d rows of %s not printed\n", len(lost), len(all), st.table)
		shown := 0
		for i, r := range lost {
			if i > 0 && lost[i-1].xact == r.xact {
				continue
			}
			if shown++; shown > 10 {
				b.WriteString("  …\n")
				break
			}
			var ids []int64
			for _, o := range lost[i:] {
				if o.xact != r.xact {
					break
				}
				ids = append(ids, o.event)
			}
			var xactRows int
			for _, o := range all {
				if o.xact == r.xact {
					xactRows++
				}
			}
			fmt.Fprintf(&b, "  xact %d (%d rows): events %v not printed; %s\n", r.xact, xactRows, ids, sc.ticksAround(ctx, r.xact))
		}
		cancel()
	}
	return b.String()
}

// ticksAround names the first stream tick whose snapshot saw transaction x
// finished, and the tick before it.
func (sc *scenario) ticksAround(ctx context.Context, x int64) string {
	var tickID int64
	var snap string
	err := sc.db.Pool.QueryRow(ctx, `SELECT tick_id, snap_xmin || ':' || snap_xmax || ':' || array_to_string(snap_xip, ',')
		FROM ff_stream_tick WHERE $1 < snap_xmin OR ($1 < snap_xmax AND NOT $1 = ANY(snap_xip)) ORDER BY tick_id LIMIT 1`, x).Scan(&tickID, &snap)
	if errors.Is(err, pgx.ErrNoRows) {
		return "no tick sees it finished"
	}
	if err != nil {
		return fmt.Sprintf("reading the ticks: %v", err)
	}
	var prevID int64
	var prev string
	err = sc.db.Pool.QueryRow(ctx, `SELECT tick_id, snap_xmin || ':' || snap_xmax || ':' || array_to_string(snap_xip, ',')
		FROM ff_stream_tick WHERE tick_id < $1 ORDER BY tick_id DESC LIMIT 1`, tickID).Scan(&prevID, &prev)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Sprintf("first seen finished by tick %d (%s), the oldest", tickID, snap)
	case err != nil:
		return fmt.Sprintf("first seen finished by tick %d (%s); reading the tick before: %v", tickID, snap, err)
	}
	return fmt.Sprintf("first seen finished by tick %d (%s), after tick %d (%s)", tickID, snap, prevID, prev)
}

// awaitLeader waits until River has a leader and returns its id.
func (sc *scenario) awaitLeader(within time.Duration) string {
	sc.t.Helper()
	var leader string
	sc.await("a River leader", within, func() (bool, string) {
		err := sc.query(`SELECT leader_id FROM river_leader WHERE expires_at > now()`, nil, &leader)
		return err == nil, fmt.Sprint(err)
	})
	return leader
}

// seed writes the scenario's executions, due from half a second from now
// over the load's window, spread over every partition.
func (sc *scenario) seed() {
	sc.t.Helper()
	l := sc.load
	var nowMs int64
	if err := sc.query(`SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint`, nil, &nowMs); err != nil {
		sc.t.Fatal(err)
	}
	from, window := nowMs+500, l.window.Milliseconds()
	// ids: n rows, the i-th due at from + i·window/n, partition i mod P.
	ids := `WITH ids AS (SELECT i, (i % ` + fmt.Sprint(faultPartitions) + `)::smallint AS p, gen_random_uuid() AS id,
		$2::bigint + (i * $3::bigint) / $1 AS due FROM generate_series(0, $1 - 1) i)`
	steps := []struct {
		n   int
		sql string
	}{
		{l.leases, ids + `, core AS (INSERT INTO ff_exec_core (partition_key, execution_id, lane_id, lifecycle_phase,
			ownership_state, eligibility_state, public_state, attempt_state, raw_fields, started_at_ms)
			SELECT p, id, '` + laneLease + `', 'active', 'leased', 'not_applicable', 'active', 'running_attempt',
			'{"namespace": "faults"}', $2 - 60000 FROM ids)
		INSERT INTO ff_attempt (partition_key, execution_id, attempt_index, worker_id, worker_instance_id, lease_id,
			lease_epoch, lease_expires_at_ms, started_at_ms)
		SELECT p, id, 0, 'seed', 'seed-worker', gen_random_uuid(), ` + fmt.Sprint(seededEpoch) + `, due, $2 - 60000 FROM ids`},
		{l.delayed, ids + ` INSERT INTO ff_exec_core (partition_key, execution_id, lane_id, lifecycle_phase,
			ownership_state, eligibility_state, public_state, attempt_state, blocking_reason, delay_until_ms, raw_fields)
		SELECT p, id, '` + laneDelay + `', 'runnable', 'unowned', 'not_eligible_until_time', 'delayed',
			'pending_first_attempt', 'waiting_for_delay', due, '{"namespace": "faults"}' FROM ids`},
		{l.deadlines, ids + ` INSERT INTO ff_exec_core (partition_key, execution_id, lane_id, lifecycle_phase,
			ownership_state, eligibility_state, public_state, attempt_state, deadline_at_ms, raw_fields)
		SELECT p, id, '` + laneDeadline + `', 'runnable', 'unowned', 'eligible_now', 'waiting',
			'pending_first_attempt', due, '{"namespace": "faults"}' FROM ids`},
		{l.leasedDeadlines, ids + `, core AS (INSERT INTO ff_exec_core (partition_key, execution_id, lane_id, lifecycle_phase,
			ownership_state, eligibility_state, public_state, attempt_state, deadline_at_ms, raw_fields, started_at_ms)
			SELECT p, id, '` + laneLeasedDeadline + `', 'active', 'leased', 'not_applicable', 'active', 'running_attempt',
			due, '{"namespace": "faults"}', $2 - 60000 FROM ids)
		INSERT INTO ff_attempt (partition_key, execution_id, attempt_index, worker_id, worker_instance_id, lease_id,
			lease_epoch, lease_expires_at_ms, started_at_ms)
		SELECT p, id, 0, 'seed', 'seed-worker', gen_random_uuid(), ` + fmt.Sprint(seededEpoch) + `, $2 + 3600000, $2 - 60000 FROM ids`},
	}
	for _, s := range steps {
		if s.n == 0 {
			continue
		}
		if _, err := sc.db.Pool.Exec(sc.ctx, s.sql, s.n, from, window); err != nil {
			sc.t.Fatalf("seeding: %v\n%s", err, s.sql)
		}
	}
	sc.seededAt = time.Now()
}

// doneSQL counts the executions whose due transition has happened.
const doneSQL = `SELECT
	count(*) FILTER (WHERE lane_id IN ('` + laneLease + `', '` + laneDeadline + `', '` + laneLeasedDeadline + `') AND lifecycle_phase = 'terminal')
	+ count(*) FILTER (WHERE lane_id = '` + laneDelay + `' AND eligibility_state = 'eligible_now')
	FROM ff_exec_core`

// progress returns the number of due transitions done, or -1 when the
// database does not answer.
func (sc *scenario) progress() int {
	var n int
	if err := sc.query(doneSQL, nil, &n); err != nil {
		return -1
	}
	return n
}

// awaitProgress waits until at least frac of the transitions are done and
// returns how many are.
func (sc *scenario) awaitProgress(frac float64, within time.Duration) int {
	sc.t.Helper()
	want := int(frac * float64(sc.load.transitions()))
	var n int
	sc.await(fmt.Sprintf("%.0f%% of the load", frac*100), within, func() (bool, string) {
		n = sc.progress()
		return n >= want, fmt.Sprintf("%d of %d transitions done", n, sc.load.transitions())
	})
	if n >= sc.load.transitions() {
		sc.t.Errorf("the whole load was done (%d) before the fault: the fault tested nothing", n)
	}
	return n
}

// drain waits for every transition and for both streams to have printed
// every row of their table, then stops the writers (if any) and the tails.
func (sc *scenario) drain(within time.Duration) {
	sc.t.Helper()
	total := sc.load.transitions()
	took := sc.await("every due transition", within, func() (bool, string) {
		n := sc.progress()
		return n == total, fmt.Sprintf("%d of %d transitions done", n, total)
	})
	sc.t.Logf("all %d transitions done %s after the window opened (%s after the wait began)",
		total, time.Since(sc.seededAt.Add(500*time.Millisecond)).Round(100*time.Millisecond), took.Round(100*time.Millisecond))
	if sc.writers != nil {
		sc.writers.stopAndWait()
	}
	sc.awaitExplained("both streams to catch up with their tables", 30*time.Second, func() (bool, string) {
		var leases, completions int
		if err := sc.query(`SELECT (SELECT count(*) FROM ff_lease_event), (SELECT count(*) FROM ff_completion_event)`, nil,
			&leases, &completions); err != nil {
			return false, err.Error()
		}
		gotL, gotC := sc.tails["leases"].count(), sc.tails["completions"].count()
		return gotL >= leases && gotC >= completions,
			fmt.Sprintf("leases %d of %d printed, completions %d of %d", gotL, leases, gotC, completions)
	}, sc.explainStreams)
	// Room for a repeated event to show up before the tails stop.
	time.Sleep(500 * time.Millisecond)
	if gone := sc.exited(); len(gone) > 0 {
		sc.t.Errorf("processes exited on their own: %s", strings.Join(gone, ", "))
	}
	for _, stream := range []string{"leases", "completions"} {
		sc.tails[stream].stop()
	}
}

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

func (p *problems) add(kind, format string, args ...any) {
	p.counts[kind]++
	if p.counts[kind] <= 5 {
		p.t.Errorf(kind+": "+format, args...)
	}
}

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
	itemKinds := []string{jobs.KindExpireAttempt, jobs.KindPromoteDelayed, jobs.KindExpireDeadline}
	outcomes = map[string]int{} // "state/outcome" of every item job
	rows, err := sc.db.Pool.Query(sc.ctx, `SELECT kind, args->>'id', state, coalesce(metadata->'output'->>'outcome', ''), attempt FROM river_job WHERE kind = ANY($1)`, itemKinds)
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
	for id, r := range leases {
		u, err := uuid.Parse(r.exec)
		e := execs[u]
		switch {
		case err == nil && e != nil:
			e.leaseEvents = append(e.leaseEvents, r.eventString)
			n.scenarioLease++
		case sc.writers != nil && sc.writers.has(id, true):
			n.writerLease++
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
	printed, distinct, repeated, missing, unknown, mismatched, disorder int
	scenario, writer                                                    int
	reconnects                                                          int
	cursorFileOK                                                        bool
}

// checkStream checks what the tail tp printed against its stream's table,
// of size rows, in which inTable looks an event up: every event printed
// once, in cursor order, as the table has it, and the cursor file at the
// last one printed.
func (sc *scenario) checkStream(tp *tailProc, inTable func(id int64) (exec string, what string, ok bool), size int, probs *problems) streamCheck {
	var c streamCheck
	seen := map[int64]int{}
	lines := tp.snapshot()
	c.printed = len(lines)
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
			if sc.writers != nil && sc.writers.has(ev.EventID, tp.stream == "leases") {
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
	if sc.writers != nil && (got.events.writerLease != got.ackedLease || got.events.writerCompletion != got.ackedCompletion || ls.writer != got.ackedLease || cs.writer != got.ackedCompletion) {
		t.Errorf("writers: acknowledged %d/%d, in the tables %d/%d, printed %d/%d", got.ackedLease, got.ackedCompletion,
			got.events.writerLease, got.events.writerCompletion, ls.writer, cs.writer)
	}
	if n := probs.total(); n > 0 {
		t.Errorf("%d problems: %v", n, probs.counts)
	}
}

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

func ptr[T any](p *T) any {
	if p == nil {
		return "NULL"
	}
	return *p
}

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

// tailEvent is one JSON line of `ffctl tail --format json`.
type tailEvent struct {
	Cursor       string `json:"cursor"`
	EventID      int64  `json:"event_id"`
	ExecutionID  string `json:"execution_id"`
	EventType    string `json:"event_type"`
	Outcome      string `json:"outcome"`
	LeaseEpoch   *int64 `json:"lease_epoch"`
	AttemptIndex *int32 `json:"attempt_index"`
}

// what is the event as the reconciliation compares it with the table.
func (e tailEvent) what() string {
	if e.Outcome != "" {
		return e.Outcome
	}
	return leaseString(e.EventType, e.LeaseEpoch, e.AttemptIndex)
}

// tailProc is a running `ffctl tail` whose JSON lines are collected.
type tailProc struct {
	t      *testing.T
	stream string
	args   []string
	cmd    *exec.Cmd
	stderr *syncBuffer
	done   chan struct{}
	code   int

	mu      sync.Mutex
	partial []byte
	lines   []tailEvent
}

func startTail(t *testing.T, bin, stream string, args ...string) *tailProc {
	t.Helper()
	tp := &tailProc{t: t, stream: stream, args: args, stderr: &syncBuffer{}, done: make(chan struct{})}
	tp.cmd = exec.Command(bin, args...)
	tp.cmd.Env = testproc.Env()
	tp.cmd.Stdout, tp.cmd.Stderr = tp, tp.stderr
	if err := tp.cmd.Start(); err != nil {
		t.Fatalf("starting ffctl tail: %v", err)
	}
	go func() {
		_ = tp.cmd.Wait()
		tp.code = tp.cmd.ProcessState.ExitCode()
		close(tp.done)
	}()
	t.Cleanup(func() {
		select {
		case <-tp.done:
		default:
			_ = tp.cmd.Process.Kill()
			<-tp.done
		}
		if t.Failed() {
			t.Logf("ffctl tail --stream %s stderr:\n%s", stream, tp.stderr.String())
		}
	})
	return tp
}

// Write collects stdout's lines.
func (tp *tailProc) Write(p []byte) (int, error) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	tp.partial = append(tp.partial, p...)
	for {
		i := bytes.IndexByte(tp.partial, '\n')
		if i < 0 {
			break
		}
		line := tp.partial[:i]
		var ev tailEvent
		if err := json.Unmarshal(line, &ev); err != nil || ev.Cursor == "" || ev.EventID == 0 {
			tp.t.Errorf("ffctl tail --stream %s printed a line that is not an event: %q (%v)", tp.stream, line, err)
		} else {
			tp.lines = append(tp.lines, ev)
		}
		tp.partial = tp.partial[i+1:]
	}
	return len(p), nil
}

func (tp *tailProc) count() int {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return len(tp.lines)
}

func (tp *tailProc) snapshot() []tailEvent {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return slices.Clone(tp.lines)
}

func (tp *tailProc) cursorFile() string {
	if i := slices.Index(tp.args, "--cursor-file"); i >= 0 && i+1 < len(tp.args) {
		return tp.args[i+1]
	}
	return ""
}

// stop sends SIGTERM and checks for a clean exit.
func (tp *tailProc) stop() {
	tp.t.Helper()
	select {
	case <-tp.done:
		tp.t.Errorf("ffctl tail --stream %s had exited early with code %d:\n%s", tp.stream, tp.code, tp.stderr.String())
		return
	default:
	}
	_ = tp.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-tp.done:
		if tp.code != 0 {
			tp.t.Errorf("ffctl tail --stream %s exited %d after SIGTERM:\n%s", tp.stream, tp.code, tp.stderr.String())
		}
	case <-time.After(15 * time.Second):
		tp.t.Errorf("ffctl tail --stream %s did not stop within 15 s of SIGTERM", tp.stream)
	}
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if len(tp.partial) > 0 {
		tp.t.Errorf("ffctl tail --stream %s left a partial line: %q", tp.stream, tp.partial)
	}
}

// kill sends SIGKILL to p and waits until it is gone.
func (sc *scenario) kill(p *proc) {
	sc.t.Helper()
	sc.killed = append(sc.killed, p)
	p.signal(syscall.SIGKILL, 10*time.Second)
}

// killMidJob kills p, whose River client id is id, while it runs a job of
// queue (any queue when ""): it freezes p (SIGSTOP), looks whether River
// shows such a job running on it, and then kills it (SIGKILL) or lets it go
// on (SIGCONT) and looks again a few milliseconds later. It returns the jobs
// p left running, by kind ("none" when it ran none within 20 s of looking,
// and was killed anyway).
func (sc *scenario) killMidJob(p *proc, id, queue string) string {
	sc.t.Helper()
	const running = `SELECT kind, count(*) FROM river_job
		WHERE state = 'running' AND attempted_by[cardinality(attempted_by)] = $1 AND ($2 = '' OR queue = $2)
		GROUP BY kind ORDER BY kind`
	kinds := func(queue string) []string {
		rows, err := sc.db.Pool.Query(sc.ctx, running, id, queue)
		if err != nil {
			sc.t.Fatal(err)
		}
		out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
			var kind string
			var n int
			err := r.Scan(&kind, &n)
			return fmt.Sprintf("%s %d", kind, n), err
		})
		if err != nil {
			sc.t.Fatal(err)
		}
		return out
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		_ = p.Signal(syscall.SIGSTOP)
		if len(kinds(queue)) > 0 || time.Now().After(deadline) {
			break
		}
		_ = p.Signal(syscall.SIGCONT)
		time.Sleep(time.Duration(3+rand.IntN(20)) * time.Millisecond)
	}
	sc.kill(p)
	left := kinds("")
	if len(left) == 0 {
		sc.t.Logf("%s left no job running: the kill tested less than intended", id)
		return "none"
	}
	return strings.Join(left, ", ")
}

// exited lists the processes of the scenario that exited on their own.
func (sc *scenario) exited() []string {
	var out []string
	for _, p := range sc.procs {
		if slices.Contains(sc.killed, p) {
			continue
		}
		select {
		case <-p.Done():
			out = append(out, fmt.Sprintf("%s (exit %d)", p.name, p.Code()))
		default:
		}
	}
	for _, tp := range sc.tails {
		select {
		case <-tp.done:
			out = append(out, fmt.Sprintf("ffctl tail --stream %s (exit %d)", tp.stream, tp.code))
		default:
		}
	}
	return out
}

// outboxWriters are n goroutines committing outbox rows with plain SQL (the
// seed's column lists, as an external producer would), each transaction
// holding its rows open for a random few milliseconds so that event ids
// commit out of order.
type outboxWriters struct {
	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once

	mu          sync.Mutex
	lease       map[int64]bool // acknowledged event ids
	completion  map[int64]bool
	txs         []writerTx
	errs        []error
	commitOrder atomic.Int64
}

type writerTx struct {
	seq int64
	ids []int64
}

func (sc *scenario) startWriters(n int) {
	w := &outboxWriters{stop: make(chan struct{}), lease: map[int64]bool{}, completion: map[int64]bool{}}
	sc.writers = w
	ctx := sc.ctx
	for i := range n {
		w.wg.Go(func() {
			exec := uuid.New()
			part := int16(i % faultPartitions)
			for {
				select {
				case <-w.stop:
					return
				case <-ctx.Done():
					return
				default:
				}
				if err := w.one(ctx, sc.db, exec, part); err != nil {
					w.mu.Lock()
					w.errs = append(w.errs, err)
					w.mu.Unlock()
					return
				}
				time.Sleep(time.Duration(2000+rand.IntN(8000)) * time.Microsecond)
			}
		})
	}
	sc.t.Cleanup(w.stopAndWait)
}

// one commits one transaction of 1–3 rows.
func (w *outboxWriters) one(ctx context.Context, db *testdb.DB, exec uuid.UUID, part int16) error {
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var leases, completions []int64
	for range 1 + rand.IntN(3) {
		var id int64
		now := time.Now().UnixMilli()
		if rand.IntN(2) == 0 {
			err = tx.QueryRow(ctx, `INSERT INTO ff_lease_event (execution_id, lease_id, event_type, occurred_at_ms, partition_key, namespace, instance_tag)
				VALUES ($1, $2, 'renewed', $3, $4, 'writers', NULL) RETURNING event_id`, exec.String(), uuid.NewString(), now, int32(part)).Scan(&id)
			leases = append(leases, id)
		} else {
			err = tx.QueryRow(ctx, `INSERT INTO ff_completion_event (partition_key, execution_id, outcome, occurred_at_ms, namespace)
				VALUES ($1, $2, 'success', $3, 'writers') RETURNING event_id`, part, exec, now).Scan(&id)
			completions = append(completions, id)
		}
		if err != nil {
			return err
		}
		time.Sleep(time.Duration(rand.IntN(4000)) * time.Microsecond)
	}
	time.Sleep(time.Duration(rand.IntN(8000)) * time.Microsecond)
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	seq := w.commitOrder.Add(1)
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range leases {
		w.lease[id] = true
	}
	for _, id := range completions {
		w.completion[id] = true
	}
	w.txs = append(w.txs, writerTx{seq: seq, ids: slices.Concat(leases, completions)})
	return nil
}

func (w *outboxWriters) stopAndWait() {
	w.once.Do(func() { close(w.stop) })
	w.wg.Wait()
}

func (w *outboxWriters) has(id int64, lease bool) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if lease {
		return w.lease[id]
	}
	return w.completion[id]
}

func (w *outboxWriters) snapshot(lease bool) map[int64]bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if lease {
		return maps.Clone(w.lease)
	}
	return maps.Clone(w.completion)
}

func (w *outboxWriters) acked() (lease, completion int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.lease), len(w.completion)
}

// outOfOrder counts the transactions that committed after a transaction
// holding a higher event id of the same table had committed: each is a row
// an `event_id > last` cursor would have skipped.
func (w *outboxWriters) outOfOrder() (txs, late int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	sorted := slices.Clone(w.txs)
	slices.SortFunc(sorted, func(a, b writerTx) int { return int(a.seq - b.seq) })
	maxL, maxC := int64(0), int64(0)
	for _, tx := range sorted {
		isLate := false
		for _, id := range tx.ids {
			if (w.lease[id] && id < maxL) || (w.completion[id] && id < maxC) {
				isLate = true
			}
		}
		for _, id := range tx.ids {
			if w.lease[id] {
				maxL = max(maxL, id)
			} else {
				maxC = max(maxC, id)
			}
		}
		if isLate {
			late++
		}
	}
	return len(sorted), late
}

func (w *outboxWriters) err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return errors.Join(w.errs...)
}

// duplicateJobs installs a trigger that, in the inserting transaction,
// inserts a copy of every tick, scan and item job River inserts, without
// its unique key: every job ffriver enqueues runs twice, uniqueness
// bypassed. Copies carry metadata {"fault_copy": true}.
func (sc *scenario) duplicateJobs() {
	sc.t.Helper()
	kinds := []string{jobs.KindTick, jobs.KindScan, jobs.KindExpireAttempt, jobs.KindPromoteDelayed, jobs.KindExpireDeadline}
	q := pgx.Identifier{sc.db.Schema}.Sanitize()
	quoted := make([]string, len(kinds))
	for i, k := range kinds {
		quoted[i] = "'" + k + "'"
	}
	for _, stmt := range []string{
		`CREATE FUNCTION ` + q + `.fault_duplicate_job() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			INSERT INTO ` + q + `.river_job (args, kind, max_attempts, priority, queue, state, scheduled_at, metadata, tags)
			VALUES (NEW.args, NEW.kind, NEW.max_attempts, NEW.priority, NEW.queue, NEW.state, NEW.scheduled_at,
			        '{"fault_copy": true}', NEW.tags);
			RETURN NULL;
		END $$`,
		`CREATE TRIGGER fault_duplicate_job AFTER INSERT ON ` + q + `.river_job FOR EACH ROW
		WHEN (NEW.unique_key IS NOT NULL AND NEW.kind IN (` + strings.Join(quoted, ", ") + `))
		EXECUTE FUNCTION ` + q + `.fault_duplicate_job()`,
	} {
		if _, err := sc.db.Pool.Exec(sc.ctx, stmt); err != nil {
			sc.t.Fatalf("installing the duplicating trigger: %v", err)
		}
	}
}
