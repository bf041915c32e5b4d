package ffview

import (
	"context"
	"testing"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/google/uuid"
)

// The execution page finds an execution's River jobs through River's GIN
// index on river_job.args (issue 27, item 3), on 140,000 River jobs of the
// kinds it looks for: not a sequential scan, nor a walk of river_job's
// primary key in id order until 200 match.
func TestExecutionJobsPlan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t, nil)
	testdb.Seed(t, db, testdb.SeedSize{Executions: 10_000, LeaseEvents: 1, RiverJobs: 100_000})
	// Jobs of the other kinds the page looks for, 10,000 each, with args
	// of their shape: with none, the planner rightly reads the few of a
	// kind through river_job_kind instead.
	if _, err := db.Pool.Exec(ctx, `INSERT INTO river_job (args, kind, max_attempts, queue, state, scheduled_at, finalized_at)
		SELECT CASE k
		         WHEN 'ff.advance' THEN jsonb_build_object('upstream', '{fp:1}:' || gen_random_uuid(), 'flow_id', gen_random_uuid(), 'downstream', gen_random_uuid())
		         WHEN 'ff.dispatch_completion' THEN jsonb_build_object('event_id', j)
		         ELSE jsonb_build_object('partition', 1, 'flow_id', gen_random_uuid(), 'downstream_eid', gen_random_uuid()) END,
		       k, 25, 'ff_apply', 'completed', now(), now()
		FROM unnest(ARRAY['ff.advance', 'ff.dispatch_completion', 'ff.cancel_group', 'ff.reconcile_group']) k, generate_series(1, 10000) j`); err != nil {
		t.Fatal(err)
	}
	// Vacuumed, as autovacuum does after such inserts: until then the
	// rows sit in the GIN index's pending list, which every containment
	// reads whole, and the planner rightly prefers a sequential scan (see
	// docs/performance.md's Operator reads).
	if _, err := db.Pool.Exec(ctx, `VACUUM ANALYZE river_job`); err != nil {
		t.Fatal(err)
	}
	var id ff.ExecutionID
	if err := db.Pool.QueryRow(ctx, `SELECT partition_key, execution_id FROM ff_exec_core WHERE lifecycle_phase = 'active' LIMIT 1`).
		Scan(&id.Partition, &id.UUID); err != nil {
		t.Fatal(err)
	}
	flow := uuid.New()
	for name, e := range map[string]*executions.Execution{
		"solo":        {ID: id},
		"flow member": {ID: id, FlowID: &flow},
	} {
		t.Run(name, func(t *testing.T) {
			sql, args, err := jobsSQL(dbutil.Schema(db.Schema), jobMatches(e, []uuid.UUID{uuid.New(), uuid.New()}, []int64{1, 2}))
			if err != nil {
				t.Fatal(err)
			}
			plan := testdb.AssertNoSeqScan(t, db.Pool, []string{"river_job"}, sql, args...)
			scans := 0
			plan.Walk(func(n testdb.PlanNode) {
				if n.Relation == "river_job" && n.NodeType != "Bitmap Heap Scan" {
					t.Errorf("river_job read by %s %s, want a bitmap of river_job_args_index:\n%s", n.NodeType, n.Index, plan)
				}
				if n.NodeType == "Bitmap Index Scan" {
					scans++
					if n.Index != "river_job_args_index" {
						t.Errorf("a bitmap of %s, want river_job_args_index:\n%s", n.Index, plan)
					}
				}
			})
			// Each scan of the GIN index reads its whole pending list:
			// one for the page, whatever its matches.
			if scans != 1 {
				t.Errorf("%d scans of river_job_args_index, want 1:\n%s", scans, plan)
			}
			var n int
			if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM (`+sql+`) x`, args...).Scan(&n); err != nil || n == 0 {
				t.Fatalf("%d jobs of the seeded execution (%v), want some", n, err)
			}
		})
	}
}
