package integration

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/ffriver/ffriver/internal/testproc"
)

// buildPipelineBinaries builds ffscheduler and ffworker into a temporary
// folder.
func buildPipelineBinaries(t *testing.T) (scheduler, worker string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	bins, err := testproc.Build(ctx, t.TempDir(), "ffscheduler", "ffworker")
	if err != nil {
		t.Fatal(err)
	}
	return bins["ffscheduler"], bins["ffworker"]
}

// syncBuffer is a bytes.Buffer safe for a process writing and a test reading.
type syncBuffer = testproc.Buffer

// proc is one running binary of a test.
type proc struct {
	*testproc.Proc
	t    *testing.T
	name string
}

// startProc starts bin with args and a clean database environment; it is
// killed when the test ends if still running.
func startProc(t *testing.T, name, bin string, args ...string) *proc {
	t.Helper()
	p, err := testproc.Start(name, bin, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("%s output:\n%s", name, p.Output())
		}
	})
	return &proc{Proc: p, t: t, name: name}
}

// signal sends sig and waits for the exit code.
func (p *proc) signal(sig syscall.Signal, within time.Duration) int {
	p.t.Helper()
	_ = p.Signal(sig)
	return p.wait(within)
}

func (p *proc) wait(within time.Duration) int {
	p.t.Helper()
	code, ok := p.Wait(within)
	if !ok {
		p.t.Fatalf("%s did not exit within %s\n%s", p.name, within, p.Output())
		return -1
	}
	return code
}

// awaitDB polls the count query q on sql until it reaches want, and fails
// the test when it stops moving short of it.
//
// within is how long the count may stay put: a count that moves starts it
// again, up to 10×within in all (how much work fits in a window is no
// promise: at load average 38, 3,000 expiries went on steadily past 75 s).
func awaitDB(sql *fftest.DB, within time.Duration, what string, want int, q string, args ...any) {
	sql.TB.Helper()
	began := time.Now()
	last, moved := -1, began
	fftest.Await(sql.TB, 10*within, what+" (want "+strconv.Itoa(want)+")", func() bool {
		n := sql.Count(q, args...)
		if n != last {
			last, moved = n, time.Now()
		}
		if n != want && time.Since(moved) > within {
			sql.TB.Fatalf("%s: %d of %d, and no progress for %s (%s in all)", what, n, want, within, time.Since(began).Round(time.Second))
		}
		return n == want
	})
}

// seedExpiredAttempts writes n active executions whose attempt lease expired
// a second ago, with plain SQL naming only keys, the lane, the five state
// columns and the attempt's lease expiry (as an external producer would).
func seedExpiredAttempts(sql *fftest.DB, lane string, n int) {
	sql.TB.Helper()
	sql.Exec(`WITH ids AS (SELECT (i % 256)::smallint AS p, gen_random_uuid() AS id FROM generate_series(1, $1) i),
		core AS (INSERT INTO ff_exec_core (partition_key, execution_id, lane_id,
			lifecycle_phase, ownership_state, eligibility_state, public_state, attempt_state)
			SELECT p, id, $2, 'active', 'leased', 'not_applicable', 'active', 'running_attempt' FROM ids)
		INSERT INTO ff_attempt (partition_key, execution_id, attempt_index, lease_expires_at_ms)
		SELECT p, id, 0, (extract(epoch FROM now()) * 1000)::bigint - 1000 FROM ids`, n, lane)
}

const (
	expiredByLane = `SELECT count(*) FROM ff_exec_core WHERE lane_id = $1 AND lifecycle_phase = 'terminal' AND public_state = 'expired'`
	// Exactly one lease "expired" and one completion "expired" per execution.
	eventsByLane = `SELECT count(*) FROM ff_exec_core c
		WHERE c.lane_id = $1
		  AND (SELECT count(*) FROM ff_lease_event l WHERE l.execution_id = c.execution_id::text AND l.event_type = 'expired') = 1
		  AND (SELECT count(*) FROM ff_completion_event e WHERE e.execution_id = c.execution_id AND e.outcome = 'expired') = 1`
)

func dbArgs(db *testdb.DB) []string {
	return []string{"--database-url", testdb.URL(), "--schema", db.Schema}
}

// TestBinariesReconcilePlainSQLRows: rows written by plain SQL are
// reconciled by ffscheduler and ffworker started with only --database-url
// and --schema; both stop cleanly on SIGTERM.
func TestBinariesReconcilePlainSQLRows(t *testing.T) {
	t.Parallel()
	testdb.Reserve(t, testdb.BinariesConns+2) // its binaries and a stream (docs/development.md)
	db := testdb.New(t, nil)
	sql := &fftest.DB{TB: t, Ctx: t.Context(), Pool: db.Pool}
	schedBin, workerBin := buildPipelineBinaries(t)

	seedExpiredAttempts(sql, "timeout", 50)
	// Delayed the upstream way (deadline_at_ms on a not_eligible_until_time
	// row) and past its execution deadline.
	sql.Exec(`INSERT INTO ff_exec_core (partition_key, execution_id, lane_id,
		lifecycle_phase, ownership_state, eligibility_state, public_state, attempt_state, deadline_at_ms)
		SELECT (i % 256)::smallint, gen_random_uuid(), 'delayed', 'runnable', 'unowned', 'not_eligible_until_time', 'delayed',
		       'pending_first_attempt', (extract(epoch FROM now()) * 1000)::bigint - 10 FROM generate_series(1, 20) i`)
	sql.Exec(`INSERT INTO ff_exec_core (partition_key, execution_id, lane_id,
		lifecycle_phase, ownership_state, eligibility_state, public_state, attempt_state, deadline_at_ms)
		SELECT (i % 256)::smallint, gen_random_uuid(), 'deadline', 'runnable', 'unowned', 'eligible_now', 'waiting',
		       'pending_first_attempt', (extract(epoch FROM now()) * 1000)::bigint - 10 FROM generate_series(1, 20) i`)

	sched := startProc(t, "ffscheduler", schedBin, dbArgs(db)...)
	worker := startProc(t, "ffworker", workerBin, dbArgs(db)...)

	awaitDB(sql, 30*time.Second, "attempt timeouts", 50, expiredByLane, "timeout")
	awaitDB(sql, 10*time.Second, "promotions", 20, `SELECT count(*) FROM ff_exec_core WHERE lane_id = 'delayed'
		AND lifecycle_phase = 'runnable' AND eligibility_state = 'eligible_now' AND public_state = 'waiting'`)
	awaitDB(sql, 10*time.Second, "deadlines", 20, expiredByLane, "deadline")
	awaitDB(sql, 10*time.Second, "events", 50, eventsByLane, "timeout")
	if n := sql.Count(`SELECT count(*) FROM ff_completion_event e JOIN ff_exec_core c USING (partition_key, execution_id)
		WHERE c.lane_id = 'deadline' AND e.outcome = 'expired'`); n != 20 {
		t.Errorf("%d deadline completions, want 20", n)
	}
	if n := sql.Count(`SELECT count(*) FROM river_job WHERE queue NOT IN ('ff_scan', 'ff_apply')`); n != 0 {
		t.Errorf("%d jobs outside ffriver's queues", n)
	}

	if code := worker.signal(syscall.SIGTERM, 40*time.Second); code != 0 {
		t.Errorf("ffworker exit %d after SIGTERM\n%s", code, worker.Output())
	}
	if code := sched.signal(syscall.SIGTERM, 40*time.Second); code != 0 {
		t.Errorf("ffscheduler exit %d after SIGTERM\n%s", code, sched.Output())
	}
	if !strings.Contains(sched.Output(), "stopped") || !strings.Contains(worker.Output(), "stopped") {
		t.Errorf("no clean stop logged")
	}
}

// TestKilledWorkerLosesNothing: a worker killed with SIGKILL mid-load rolls
// back its in-flight actions; River's rescuer retries their jobs and every
// execution transitions exactly once, with exactly one set of events.
func TestKilledWorkerLosesNothing(t *testing.T) {
	t.Parallel()
	testdb.Reserve(t, testdb.BinariesConns+2) // its binaries and a stream (docs/development.md)
	db := testdb.New(t, nil)
	sql := &fftest.DB{TB: t, Ctx: t.Context(), Pool: db.Pool}
	schedBin, workerBin := buildPipelineBinaries(t)
	const n = 3000
	seedExpiredAttempts(sql, "load", n)

	startProc(t, "ffscheduler", schedBin, append(dbArgs(db), "--ui-addr", "off",
		"--job-timeout", "2s", "--rescue-after", "3s", "--attempt-timeout-batch", "100")...)
	victim := startProc(t, "ffworker-1", workerBin, append(dbArgs(db), "--concurrency", "8", "--id", "victim")...)
	deadline := time.Now().Add(30 * time.Second)
	for sql.Count(expiredByLane, "load") < n/10 {
		if time.Now().After(deadline) {
			t.Fatalf("no progress before the kill")
		}
		time.Sleep(10 * time.Millisecond)
	}
	running := sql.Count(`SELECT count(*) FROM river_job WHERE state = 'running' AND 'victim' = ANY(attempted_by)`)
	victim.signal(syscall.SIGKILL, 10*time.Second)
	done := sql.Count(expiredByLane, "load")
	t.Logf("killed the worker with %d/%d done and %d of its jobs running", done, n, running)
	if done == n {
		t.Log("the load finished before the kill; the kill tested nothing")
	}
	startProc(t, "ffworker-2", workerBin, append(dbArgs(db), "--concurrency", "8")...)

	// The victim's running jobs wait for the rescuer (every 30 s).
	awaitDB(sql, 75*time.Second, "every execution expired", n, expiredByLane, "load")
	awaitDB(sql, 10*time.Second, "exactly one event pair each", n, eventsByLane, "load")
	if extra := sql.Count(`SELECT count(*) FROM ff_lease_event`) - n; extra != 0 {
		t.Errorf("%d lease events beyond one per execution", extra)
	}
}

// TestSchedulerFailover: with two schedulers, killing the leader hands
// leadership to the other, which keeps ticking; no transition happens twice.
func TestSchedulerFailover(t *testing.T) {
	t.Parallel()
	testdb.Reserve(t, testdb.BinariesConns+2) // its binaries and a stream (docs/development.md)
	db := testdb.New(t, nil)
	sql := &fftest.DB{TB: t, Ctx: t.Context(), Pool: db.Pool}
	schedBin, workerBin := buildPipelineBinaries(t)
	s1 := startProc(t, "ffscheduler-1", schedBin, append(dbArgs(db), "--ui-addr", "off", "--id", "sched-1")...)
	s2 := startProc(t, "ffscheduler-2", schedBin, append(dbArgs(db), "--ui-addr", "off", "--id", "sched-2")...)
	startProc(t, "ffworker", workerBin, dbArgs(db)...)

	seedExpiredAttempts(sql, "before", 100)
	awaitDB(sql, 30*time.Second, "first batch", 100, expiredByLane, "before")
	var leader string
	if err := db.Pool.QueryRow(t.Context(), `SELECT leader_id FROM river_leader`).Scan(&leader); err != nil {
		t.Fatal(err)
	}
	victim, survivor := s1, "sched-2"
	if leader == "sched-2" {
		victim, survivor = s2, "sched-1"
	}
	t.Logf("leader %s; killing it", leader)
	victim.signal(syscall.SIGKILL, 10*time.Second)

	// River's leader lease lasts about 15 s after a crash; a follower
	// retries every 5–6 s.
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := db.Pool.QueryRow(t.Context(), `SELECT leader_id FROM river_leader WHERE expires_at > now()`).Scan(&leader)
		if err == nil && leader == survivor {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no failover to %s within 30 s (leader %q, %v)", survivor, leader, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Work seeded now can only be ticked by the survivor.
	seedExpiredAttempts(sql, "after", 100)
	awaitDB(sql, 30*time.Second, "second batch after failover", 100, expiredByLane, "after")
	awaitDB(sql, 10*time.Second, "one event pair each", 100, eventsByLane, "before")
	awaitDB(sql, 10*time.Second, "one event pair each", 100, eventsByLane, "after")
}

// TestBinariesRefuseUnmigratedSchema: exit code 3 and one clear message.
func TestBinariesRefuseUnmigratedSchema(t *testing.T) {
	t.Parallel()
	testdb.Reserve(t, 4) // its binaries and streams (docs/development.md)
	schedBin, workerBin := buildPipelineBinaries(t)
	bare := testdb.New(t, &testdb.Options{NoMigrate: true})
	migrated := testdb.New(t, &testdb.Options{Partitions: 16})
	for _, tc := range []struct {
		name string
		bin  string
		args []string
	}{
		{"scheduler/unmigrated", schedBin, dbArgs(bare)},
		{"worker/unmigrated", workerBin, dbArgs(bare)},
		{"scheduler/partitions", schedBin, append(dbArgs(migrated), "--partitions", "256")},
		{"worker/partitions", workerBin, append(dbArgs(migrated), "--partitions", "256")},
	} {
		args := tc.args
		if strings.HasPrefix(tc.name, "scheduler") {
			args = append(args, "--ui-addr", "off")
		}
		p := startProc(t, tc.name, tc.bin, args...)
		code := p.wait(20 * time.Second)
		out := p.Output()
		refusal := "not migrated"
		if strings.HasSuffix(tc.name, "/partitions") {
			refusal = "partition count mismatch"
		}
		if code != 3 || strings.Count(out, refusal) != 1 {
			t.Errorf("%s: exit %d, want 3 and %q said once; output:\n%s", tc.name, code, refusal, out)
		}
	}
}

// TestSchedulerUIAuth: a non-loopback UI address needs credentials; with
// them, River UI requires basic auth.
func TestSchedulerUIAuth(t *testing.T) {
	t.Parallel()
	testdb.Reserve(t, testdb.BinariesConns+2) // its binaries and a stream (docs/development.md)
	schedBin, _ := buildPipelineBinaries(t)
	db := testdb.New(t, nil)
	p := startProc(t, "ffscheduler-open", schedBin, append(dbArgs(db), "--ui-addr", "0.0.0.0:0")...)
	if code := p.wait(10 * time.Second); code != 2 || !strings.Contains(p.Output(), "--ui-user") {
		t.Errorf("non-loopback without credentials: exit %d\n%s", code, p.Output())
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	startProc(t, "ffscheduler-ui", schedBin, append(dbArgs(db), "--ui-addr", addr, "--ui-user", "admin", "--ui-password", "s3cret")...)
	url := "http://" + addr + "/api/states"
	get := func(user, pass string) int {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	deadline := time.Now().Add(20 * time.Second)
	for get("admin", "s3cret") != http.StatusOK {
		if time.Now().After(deadline) {
			t.Fatalf("River UI never answered at %s", url)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, c := range [][2]string{{"", ""}, {"admin", "wrong"}, {"root", "s3cret"}} {
		if code := get(c[0], c[1]); code != http.StatusUnauthorized {
			t.Errorf("credentials %q: status %d, want 401", c, code)
		}
	}
}
