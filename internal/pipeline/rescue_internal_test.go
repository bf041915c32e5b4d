package pipeline

import (
	"context"
	"testing"
	"time"

	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/jackc/pgx/v5"
)

// ff.rescue, every second, must not visit the heap for the dead index
// entries that every job that ran leaves behind until river_job is
// vacuumed (issue 23, item 8): its first scan marks them dead, and later
// scans read the index pages and the live running jobs' heap pages only.
// It read them all again each time through a bitmap scan (30,000 jobs run
// and completed: some 500 heap pages, every second).
func TestRescueStepsOverDeadEntries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t, nil)
	exec := (&fftest.DB{TB: t, Ctx: ctx, Pool: db.Pool}).Exec
	// No vacuum removes the dead entries during the test: they stay, as
	// they do between two vacuums of a busy river_job.
	exec(`ALTER TABLE river_job SET (autovacuum_enabled = false)`)
	exec(`INSERT INTO river_job (args, kind, max_attempts, queue, state, scheduled_at)
		SELECT '{}', 'ff.expire_attempt', 25, 'ff_apply', 'available', now() FROM generate_series(1, 30000)`)
	exec(`UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now() - interval '1 minute'`)
	// All but 20 complete; those 20 are stuck (their process died).
	exec(`UPDATE river_job SET state = 'completed', finalized_at = now() WHERE id % 1500 <> 0`)
	s := dbutil.Schema(db.Schema)
	queues := []string{"ff_scan", "ff_apply"}
	var rows, heap int64
	// A dead entry is marked once its row is dead to every transaction of
	// the database: other tests' transactions may hold that back a while.
	fftest.Await(t, 90*time.Second, "a rescue scan that reads no heap page for dead entries", func() bool {
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if _, err := tx.Exec(ctx, rescueScanSQL); err != nil {
			t.Fatal(err)
		}
		// The heap pages the scan asks for, counted in this transaction.
		const fetched = `SELECT pg_stat_get_xact_blocks_fetched('river_job'::regclass)`
		var before, after int64
		if err := tx.QueryRow(ctx, fetched).Scan(&before); err != nil {
			t.Fatal(err)
		}
		if err := tx.QueryRow(ctx, s.SQL(`SELECT count(*) FROM (SELECT id FROM {S}river_job WHERE `+rescueWhere+`) x`),
			queues, int64(4000), int64(0)).Scan(&rows); err != nil {
			t.Fatal(err)
		}
		if err := tx.QueryRow(ctx, fetched).Scan(&after); err != nil {
			t.Fatal(err)
		}
		heap = after - before
		t.Logf("%d stuck jobs found, %d heap pages read", rows, heap)
		return heap <= rows+5
	})
	if rows != 20 {
		t.Errorf("the rescue finds %d stuck jobs, want 20", rows)
	}

	// And the rescue itself re-queues exactly the stuck ones.
	var n int64
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		var err error
		n, err = rescueStuck(ctx, tx, s, queues, 4000, 0)
		return err
	})
	if err != nil || n != 20 {
		t.Fatalf("rescueStuck: %d, %v; want 20", n, err)
	}
}

// ff.rescue's statement reads river_job through River's fetch index
// (state, queue, …) on a seeded store of 100,000 jobs, 100 of them running
// (issue 27, item 3): the running range of ff's queues, never a
// sequential or bitmap scan (rescueScanSQL).
func TestRescuePlan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t, nil)
	testdb.Seed(t, db, testdb.SeedSize{Executions: 1_000, LeaseEvents: 1, RiverJobs: 100_000})
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, rescueScanSQL); err != nil {
		t.Fatal(err)
	}
	plan := testdb.AssertNoSeqScan(t, tx, []string{"river_job"}, dbutil.Schema(db.Schema).SQL(rescueSQL),
		[]string{"ff_scan", "ff_apply"}, int64(4000), int64(0))
	var read bool
	plan.Walk(func(n testdb.PlanNode) {
		if n.Relation != "river_job" || n.NodeType == "ModifyTable" {
			return
		}
		read = true
		if n.NodeType != "Index Scan" || n.Index != "river_job_prioritized_fetching_index" {
			t.Errorf("river_job read by %s %s, want an index scan of river_job_prioritized_fetching_index:\n%s", n.NodeType, n.Index, plan)
		}
	})
	if !read {
		t.Errorf("no read of river_job in the plan:\n%s", plan)
	}
}
