package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/ffriver/ffriver/jobs"
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
//
// This file holds the scenario, its load and its processes; the
// reconciliation is in faultreconcile_test.go, the tails and the outbox
// writers in faulttails_test.go.

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

// transitions returns how many due transitions the load seeds, one per
// execution.
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
	// writerEvents are the event ids of the tables that attachEvents
	// found to be a writer's (of no seeded execution), by table (true: the
	// lease table): the streams' events are classed by them. A writer's
	// id alone is not enough: a transaction in doubt across a failover
	// may have been lost with its event ids, which the promoted standby's
	// sequence then hands out again, to a scanner's event.
	writerEvents map[bool]map[int64]bool
}

// newScenario returns a scenario of the default load on db, whose
// binaries reach it at url; it starts nothing. On the shared server it
// first reserves the connections it holds (testdb.Reserve): its binaries'
// (testdb.BinariesConns), its tails' and named consumers' (6) and its own
// pool's, where the writers commit; a
// scenario on a throwaway cluster needs none.
func newScenario(t *testing.T, bins faultBins, db *testdb.DB, url string) *scenario {
	if url == testdb.URL() {
		testdb.Reserve(t, testdb.BinariesConns+6+int(db.Pool.Config().MaxConns))
	}
	return &scenario{DB: fftest.DB{TB: t, Ctx: t.Context(), Pool: db.Pool, Timeout: 10 * time.Second}, t: t, ctx: t.Context(), db: db, url: url, bins: bins, load: defaultFaultLoad, tails: map[string]*tailProc{}}
}

// dbFlags are the flags that point a binary at the scenario's database
// and schema.
func (sc *scenario) dbFlags() []string {
	return []string{"--database-url", sc.url, "--schema", sc.db.Schema}
}

// note adds a line of the fault's own under the count table.
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

// startWorker starts an ffworker with the fault suite's flags.
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
//
// within is how long cond may go without progress: a status that changes
// (more events printed, more transitions done) starts it again, up to
// 10×within in all. How much work fits in a window is no promise of the
// product: on two cores at load average 40, two streams printing 16,000
// events went on steadily past a fixed 30 s.
func (sc *scenario) awaitExplained(what string, within time.Duration, cond func() (bool, string), explain func() string) time.Duration {
	sc.t.Helper()
	began := time.Now()
	deadline, last := began.Add(within), ""
	for {
		ok, status := cond()
		if ok {
			return time.Since(began)
		}
		if status != last {
			last = status
			deadline = time.Now().Add(within)
			if limit := began.Add(10 * within); deadline.After(limit) {
				deadline = limit
			}
		}
		if time.Now().After(deadline) || sc.ctx.Err() != nil {
			if explain != nil {
				status += "\n" + explain()
			}
			sc.t.Fatalf("timed out after %s waiting for %s (%s without progress): %s", time.Since(began).Round(time.Second), what, within, status)
		}
		time.Sleep(50 * time.Millisecond)
	}
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
	// A job whose process died after its transaction committed and before
	// River completed it is re-queued (ff.rescue, River's rescuer) and runs
	// again, recording no_op: reconcile credits the execution with that
	// re-run, so it waits for every item job to end first.
	sc.await("every item job to end", within, func() (bool, string) {
		n := sc.Count(`SELECT count(*) FROM river_job WHERE kind = ANY($1) AND state NOT IN ('completed', 'cancelled', 'discarded')`, itemKinds())
		return n == 0, fmt.Sprintf("%d item jobs not ended", n)
	})
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
