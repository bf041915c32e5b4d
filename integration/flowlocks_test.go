package integration

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/ffriver/ffriver"
	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// flowLockFlows is how many flows the lock fault runs; a third of them
// meet each lock.
const flowLockFlows = 30

// A flow cascade under long locks, on the real binaries: long transactions
// hold edge-group rows and execution rows that the cascade's hops need,
// for several times the hops' 2 s lock_timeout. The hops snooze (no attempt
// spent, nothing discarded) and every flow still finishes, with every
// upstream counted exactly once and one completion event per execution.
//
// Each flow: a, b (lane up) and c (lane slow) → mid, Quorum(2,
// cancel_remaining); mid → final, AllOf. The test completes a and b (mid's
// group is satisfied, c is cancelled by the dispatcher), then fails mid
// (final's group is impossible: final is skipped). Flows 0–9 have mid's
// edge group locked while a and b complete, flows 10–19 mid's execution row,
// flows 20–29 final's execution row while mid fails.
func TestFaultsFlowCascadeUnderLongLocks(t *testing.T) {
	t.Parallel()
	sched, worker := buildPipelineBinaries(t)
	db := testdb.New(t, &testdb.Options{Partitions: faultPartitions, MaxConns: 16})
	sc := newScenario(t, faultBins{scheduler: sched, worker: worker}, db, testdb.URL())
	ctx := sc.ctx
	// The test's own store: its terminal transitions enqueue their hops
	// (the Cascader) for the binaries to apply.
	f, err := ffriver.New(ctx, db.Pool, ffriver.Config{Schema: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	st := f.Store()

	type flow struct {
		id                  uuid.UUID
		a, b, c, mid, final ff.ExecutionID
	}
	flows := make([]flow, flowLockFlows)
	for i := range flows {
		fl := &flows[i]
		if fl.id, err = st.CreateFlow(ctx, uuid.Nil); err != nil {
			t.Fatal(err)
		}
		for _, x := range []struct {
			id   *ff.ExecutionID
			lane string
		}{{&fl.a, "up"}, {&fl.b, "up"}, {&fl.c, "slow"}, {&fl.mid, "mid"}, {&fl.final, "final"}} {
			if *x.id, err = st.Create(ctx, executions.CreateParams{FlowID: fl.id, Lane: x.lane}); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.AddDependencies(ctx, executions.DependencyParams{FlowID: fl.id, Downstream: fl.mid,
			Upstreams: []ff.ExecutionID{fl.a, fl.b, fl.c}, Policy: executions.Quorum(2, executions.CancelRemaining)}); err != nil {
			t.Fatal(err)
		}
		if err := st.AddDependencies(ctx, executions.DependencyParams{FlowID: fl.id, Downstream: fl.final,
			Upstreams: []ff.ExecutionID{fl.mid}, Policy: executions.AllOf()}); err != nil {
			t.Fatal(err)
		}
	}
	ids := func(from, to int, pick func(flow) ff.ExecutionID) []uuid.UUID {
		var out []uuid.UUID
		for _, fl := range flows[from:to] {
			out = append(out, pick(fl).UUID)
		}
		return out
	}
	// lock holds rows in a transaction of its own until released.
	lock := func(what, q string, keys []uuid.UUID) func() {
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		tag, err := tx.Exec(ctx, q, keys)
		if err != nil || tag.RowsAffected() != int64(len(keys)) {
			t.Fatalf("locking %s: %d rows, %v", what, tag.RowsAffected(), err)
		}
		began := time.Now()
		return func() {
			if err := tx.Rollback(context.WithoutCancel(ctx)); err != nil {
				t.Errorf("releasing %s: %v", what, err)
			}
			sc.note("held the %s of %d flows for %s", what, len(keys), time.Since(began).Round(100*time.Millisecond))
		}
	}
	// awaitSnoozed waits until the hops into each of downs have snoozed
	// twice on a lock: the lock has outlasted two lock_timeouts.
	awaitSnoozed := func(what string, downs []uuid.UUID) {
		sc.await(what, 60*time.Second, func() (bool, string) {
			n := sc.Count(`SELECT count(DISTINCT args->>'downstream') FROM river_job WHERE kind = 'ff.advance'
				AND (args->>'downstream')::uuid = ANY($1) AND (metadata->>'snoozes')::int >= 2`, downs)
			return n == len(downs), fmt.Sprintf("%d of %d", n, len(downs))
		})
	}
	// finishAll claims every execution of lane (as they become eligible)
	// and completes or fails each.
	finishAll := func(lane string, n int, fail bool) {
		done := 0
		sc.await("every "+lane+" execution finished", 60*time.Second, func() (bool, string) {
			leases, err := st.Claim(ctx, executions.ClaimParams{Lane: lane, WorkerID: "test", WorkerInstanceID: "test-1", LeaseTTL: time.Hour, Max: 50})
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range leases {
				if fail {
					_, err = st.Fail(ctx, l, executions.FailParams{Message: "fault test", Permanent: true})
				} else {
					err = st.Complete(ctx, l, nil)
				}
				if err != nil {
					t.Fatal(err)
				}
				done++
			}
			return done == n, fmt.Sprintf("%d of %d", done, n)
		})
	}

	sc.startScheduler("sched")
	sc.startWorker("worker")
	sc.awaitLeader(20 * time.Second)

	// Phase 1: a and b complete while mid's group (flows 0–9) or mid's row
	// (flows 10–19) is held.
	groups := ids(0, 10, func(fl flow) ff.ExecutionID { return fl.mid })
	releaseGroups := lock("edge groups", `SELECT 1 FROM ff_edge_group WHERE downstream_eid = ANY($1) FOR UPDATE`, groups)
	mids := ids(10, 20, func(fl flow) ff.ExecutionID { return fl.mid })
	releaseMids := lock("mid execution rows", `SELECT 1 FROM ff_exec_core WHERE execution_id = ANY($1) FOR UPDATE`, mids)
	finishAll("up", 2*flowLockFlows, false)
	awaitSnoozed("the hops into locked groups to snooze twice", groups)
	awaitSnoozed("the hops into locked mid rows to snooze twice", mids)
	releaseGroups()
	releaseMids()

	// Phase 2: mid fails while final's row (flows 20–29) is held.
	finals := ids(20, 30, func(fl flow) ff.ExecutionID { return fl.final })
	releaseFinals := lock("final execution rows", `SELECT 1 FROM ff_exec_core WHERE execution_id = ANY($1) FOR UPDATE`, finals)
	finishAll("mid", flowLockFlows, true)
	awaitSnoozed("the hops into locked final rows to snooze twice", finals)
	releaseFinals()

	sc.await("every flow to finish", 90*time.Second, func() (bool, string) {
		n := sc.Count(`SELECT count(*) FROM ff_exec_core WHERE lifecycle_phase = 'terminal'`)
		return n == 5*flowLockFlows, fmt.Sprintf("%d of %d executions terminal", n, 5*flowLockFlows)
	})

	// Every execution ended as its flow says, with one completion event.
	want := map[string]string{"up": "completed", "slow": "cancelled", "mid": "failed", "final": "skipped"}
	rows, err := db.Pool.Query(ctx, `SELECT c.lane_id, c.public_state, count(*), count(*) FILTER (WHERE
		(SELECT count(*) FROM ff_completion_event e WHERE e.partition_key = c.partition_key AND e.execution_id = c.execution_id) = 1)
		FROM ff_exec_core c GROUP BY 1, 2 ORDER BY 1, 2`)
	if err != nil {
		t.Fatal(err)
	}
	type endState struct {
		Lane, Public string
		N, Once      int
	}
	ends, err := pgx.CollectRows(rows, pgx.RowToStructByPos[endState])
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ends {
		wantN := flowLockFlows
		if e.Lane == "up" {
			wantN = 2 * flowLockFlows
		}
		if want[e.Lane] != e.Public || e.N != wantN || e.Once != e.N {
			t.Errorf("lane %s: %d executions %s (%d with exactly one completion event), want %d %s", e.Lane, e.N, e.Public, e.Once, wantN, want[e.Lane])
		}
	}
	if len(ends) != len(want) {
		t.Errorf("end states %+v, want one per lane", ends)
	}
	// Every upstream counted exactly once by its downstream's group.
	if n := sc.Count(`SELECT count(*) FROM ff_edge WHERE upstream_outcome IS NULL`); n != 0 {
		t.Errorf("%d edges without their upstream's outcome", n)
	}
	if n := sc.Count(`SELECT count(*) FROM ff_edge_group g WHERE g.success_count + g.fail_count + g.skip_count <>
		(SELECT count(*) FROM ff_edge e WHERE e.partition_key = g.partition_key AND e.flow_id = g.flow_id AND e.downstream_eid = g.downstream_eid)`); n != 0 {
		t.Errorf("%d edge groups counted other than each upstream once", n)
	}
	if n := sc.Count(`SELECT count(*) FROM ff_edge_group WHERE group_state = 'pending'`); n != 0 {
		t.Errorf("%d edge groups still pending", n)
	}
	// Waiting never spent a hop.
	if n := sc.Count(`SELECT count(*) FROM river_job WHERE kind = 'ff.advance' AND state IN ('discarded', 'cancelled', 'retryable')`); n != 0 {
		t.Errorf("%d ff.advance jobs discarded, cancelled or failing", n)
	}
	snoozed := sc.Count(`SELECT count(*) FROM river_job WHERE kind = 'ff.advance' AND metadata ? 'snoozes'`)
	sc.note("%d flows finished; %d ff.advance jobs snoozed on a lock, none failed", flowLockFlows, snoozed)
	for _, n := range sc.notes {
		t.Log(n)
	}
	// Stop the binaries gracefully: a killed one's session may still hold
	// locks the schema's DROP needs.
	for _, p := range sc.procs {
		if code := p.signal(syscall.SIGTERM, 30*time.Second); code != 0 {
			t.Errorf("%s exited %d on SIGTERM:\n%s", p.name, code, p.Output())
		}
	}
}
