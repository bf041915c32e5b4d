package status

import (
	"context"
	"testing"

	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/internal/testdb"
)

// ffctl status counts each outbox through a bounded range of its primary
// key, not the whole table (issue 27, item 3), and says "at least" past the
// cap.
func TestStreamCountPlan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t, nil)
	testdb.Seed(t, db, testdb.SeedSize{Executions: 1_000, LeaseEvents: 200_000})
	s := dbutil.Schema(db.Schema)
	for _, table := range []string{"ff_lease_event", "ff_completion_event"} {
		testdb.AssertNoSeqScan(t, db.Pool, []string{table}, s.SQL(streamSQL(table)), StreamCountCap+1, table)
	}
	var n, partitions, defaultRows int64
	if err := db.Pool.QueryRow(ctx, s.SQL(streamSQL("ff_lease_event")), StreamCountCap+1, "ff_lease_event").Scan(&n, new(*int64), new(*int64),
		&partitions, new(*int64), &defaultRows); err != nil {
		t.Fatal(err)
	}
	if n != StreamCountCap+1 {
		t.Errorf("counted %d lease events, want the cap and one (%d): the report says at least %d", n, StreamCountCap+1, StreamCountCap)
	}
	// No partition has been created ahead in a new schema: the seeded
	// events are in the DEFAULT partition, counted up to the cap too.
	if defaultRows != StreamCountCap+1 || partitions != 0 {
		t.Errorf("counted %d rows in the DEFAULT partition and %d partitions, want %d and none", defaultRows, partitions, StreamCountCap+1)
	}
}

// ffctl status counts River's jobs per queue and state through River's
// fetch index, each count up to its cap (issue 27, item 3): it was a
// parallel sequential scan of river_job. The counts are those of a plain
// GROUP BY, capped.
func TestQueueCountPlan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t, nil)
	testdb.Seed(t, db, testdb.SeedSize{Executions: 1_000, LeaseEvents: 1, RiverJobs: 100_000})
	s := dbutil.Schema(db.Schema)
	// A few jobs of other queues and states besides the seeded ones.
	if _, err := db.Pool.Exec(ctx, `INSERT INTO river_job (args, kind, max_attempts, queue, state, scheduled_at)
		SELECT '{}', 'other', 25, q, st::river_job_state, now()
		FROM unnest(ARRAY['default', 'ff_scan', 'zz']) q, unnest(ARRAY['available', 'scheduled', 'retryable']) st`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `ANALYZE river_job`); err != nil {
		t.Fatal(err)
	}
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, dbutil.PlannerSettings); err != nil {
		t.Fatal(err)
	}
	plan := testdb.AssertNoSeqScan(t, tx, []string{"river_job"}, s.SQL(queuesSQL), QueueCountCap+1)
	plan.Walk(func(n testdb.PlanNode) {
		if n.Relation == "river_job" && n.Index != "river_job_prioritized_fetching_index" {
			t.Errorf("river_job read by %s %s, want river_job_prioritized_fetching_index:\n%s", n.NodeType, n.Index, plan)
		}
		// Read in the index's order, so that the limit stops the read: no
		// sort of the jobs.
		if n.NodeType == "Sort" && len(n.Plans) == 1 && n.Plans[0].Relation == "river_job" {
			t.Errorf("the jobs are sorted before the limit:\n%s", plan)
		}
	})
	t.Logf("plan:\n%s", plan)

	count := func(sql string, args ...any) map[[2]string]int64 {
		t.Helper()
		rows, err := db.Pool.Query(ctx, s.SQL(sql), args...)
		if err != nil {
			t.Fatal(err)
		}
		out := map[[2]string]int64{}
		for rows.Next() {
			var q, st string
			var n int64
			if err := rows.Scan(&q, &st, &n); err != nil {
				t.Fatal(err)
			}
			out[[2]string{q, st}] = n
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	all := count(`SELECT queue, state::text, count(*) FROM {S}river_job GROUP BY 1, 2`)
	var qs []Queue
	if qs, err = queues(ctx, db.Pool, s); err != nil {
		t.Fatal(err)
	}
	capped := map[[2]string]int64{}
	for _, q := range qs {
		for st, n := range q.States {
			if q.StatesAtLeast[st] != (n == QueueCountCap && all[[2]string{q.Name, st}] > QueueCountCap) {
				t.Errorf("%s %s: %d, at least %t", q.Name, st, n, q.StatesAtLeast[st])
			}
			capped[[2]string{q.Name, st}] = n
		}
	}
	if len(all) != 11 || len(capped) != len(all) {
		t.Fatalf("%d queue states counted, want the %d of a GROUP BY: %v", len(capped), len(all), capped)
	}
	for k, n := range all {
		if want := min(n, QueueCountCap); capped[k] != want {
			t.Errorf("%v: %d counted, want %d (%d in all)", k, capped[k], want, n)
		}
	}
	if all[[2]string{"ff_apply", "completed"}] <= QueueCountCap {
		t.Fatal("no count past the cap; the test proves nothing")
	}
}
