package testdb

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// SeedSize is how much Seed writes.
type SeedSize struct {
	// Executions written, of which about a twentieth each are active with
	// an expired lease, active with a live lease (created up to Span ago
	// and still running), waiting past their deadline, delayed and due,
	// delayed and not due; the other three quarters are terminal
	// (completed), each with one attempt and one completion event.
	Executions int
	// LeaseEvents written, oldest first, spread evenly over Span, each of
	// an execution picked across all of them.
	LeaseEvents int
	// RiverJobs written: completed ff.expire_attempt jobs naming an
	// execution each, and a few running ones.
	RiverJobs int
	// Edges written, each from a terminal execution (upstream) to a
	// random id: a twentieth are flow hops not counted yet, terminal
	// since the upstream's end (due for the dependency scanner), the
	// others counted.
	Edges int
	// CancelGroups written: pending sibling-cancel groups with no edge
	// group (orphans, due for both edge-cancel scanners), enqueued over
	// Span.
	CancelGroups int
	// Tombstones written (ff_exec_removed), removed over Span.
	Tombstones int
	// Span the executions' creation times and the lease events cover,
	// ending now (default 7 days).
	Span time.Duration
}

// seedSQL writes SeedSize's rows (named arguments: executions, events,
// jobs, edges, groups, tombstones, now in ms, span in ms). The executions' ids are
// md5('ffseed' || i)::uuid and partitions i % 256.
var seedSQL = []string{
	`INSERT INTO ff_exec_core (partition_key, execution_id, lane_id, attempt_index, lifecycle_phase, ownership_state,
	     eligibility_state, public_state, attempt_state, created_at_ms, terminal_at_ms, deadline_at_ms, delay_until_ms, raw_fields)
	SELECT (i % 256)::smallint, md5('ffseed' || i)::uuid, 'lane-' || (i % 8), 0,
	       CASE WHEN k < 2 THEN 'active' WHEN k < 5 THEN 'runnable' ELSE 'terminal' END,
	       CASE WHEN k < 2 THEN 'leased' ELSE 'unowned' END,
	       CASE WHEN k < 2 OR k >= 5 THEN 'not_applicable' WHEN k = 2 THEN 'eligible_now' ELSE 'not_eligible_until_time' END,
	       CASE WHEN k < 2 THEN 'active' WHEN k = 2 THEN 'waiting' WHEN k < 5 THEN 'delayed' ELSE 'completed' END,
	       CASE WHEN k < 2 THEN 'running_attempt' WHEN k < 5 THEN 'pending_first_attempt' ELSE 'attempt_terminal' END,
	       created, CASE WHEN k >= 5 THEN created + 1000 END,
	       CASE WHEN k = 2 THEN @now::bigint - 5000 WHEN k < 5 THEN @now::bigint + 3600000 END,
	       CASE WHEN k = 3 THEN @now::bigint - 5000 WHEN k = 4 THEN @now::bigint + 3600000 END,
	       jsonb_build_object('namespace', 'ns-' || (i % 4))
	FROM generate_series(1, @executions::int) i,
	     LATERAL (SELECT i % 20 AS k, @now::bigint - @span::bigint + (i::bigint * @span::bigint / @executions::int) AS created) x`,
	`INSERT INTO ff_attempt (partition_key, execution_id, attempt_index, worker_id, lease_id, lease_epoch,
	     lease_expires_at_ms, started_at_ms, terminal_at_ms, outcome)
	SELECT partition_key, execution_id, 0, 'seed-worker', md5('lease' || execution_id)::uuid, 1,
	       CASE WHEN lifecycle_phase = 'terminal' THEN NULL
	            WHEN delay_until_ms IS NULL AND deadline_at_ms > @now::bigint AND hashtext(execution_id::text) % 2 = 0 THEN @now::bigint - 10000
	            ELSE @now::bigint + 60000 END,
	       created_at_ms, terminal_at_ms, CASE WHEN lifecycle_phase = 'terminal' THEN 'success' END
	FROM ff_exec_core WHERE lifecycle_phase IN ('active', 'terminal')`,
	`INSERT INTO ff_completion_event (partition_key, execution_id, outcome, namespace, occurred_at_ms, committed_at_ms, dispatched_at_ms)
	SELECT partition_key, execution_id, 'success', raw_fields->>'namespace', terminal_at_ms, terminal_at_ms, terminal_at_ms
	FROM ff_exec_core WHERE lifecycle_phase = 'terminal' ORDER BY terminal_at_ms`,
	`INSERT INTO ff_lease_event (execution_id, lease_id, event_type, occurred_at_ms, partition_key, namespace,
	     attempt_index, lease_epoch, worker_instance_id)
	SELECT md5('ffseed' || e)::uuid::text, md5('lease' || md5('ffseed' || e)::uuid)::uuid::text,
	       (ARRAY['acquired', 'renewed', 'renewed', 'revoked'])[1 + j % 4], @now::bigint - @span::bigint + (j::bigint * @span::bigint / @events::int),
	       e % 256, 'ns-' || (e % 4), 0, 1, 'seed-worker'
	FROM generate_series(1, @events::int) j, LATERAL (SELECT 1 + (j::bigint * 7919) % @executions::int AS e) x`,
	`INSERT INTO river_job (args, kind, max_attempts, queue, state, attempt, attempted_at, scheduled_at, finalized_at)
	SELECT jsonb_build_object('id', '{fp:' || (e % 256) || '}:' || md5('ffseed' || e)::uuid, 'attempt_index', 0),
	       'ff.expire_attempt', 25, 'ff_apply', CASE WHEN j % 1000 = 0 THEN 'running' ELSE 'completed' END::river_job_state,
	       1, now() - interval '1 minute', now() - interval '1 minute', CASE WHEN j % 1000 <> 0 THEN now() END
	FROM generate_series(1, @jobs::int) j, LATERAL (SELECT 1 + (j::bigint * 7919) % @executions::int AS e) x`,
	`INSERT INTO ff_edge (partition_key, flow_id, edge_id, upstream_eid, downstream_eid, upstream_terminal_at_ms, upstream_outcome)
	SELECT c.partition_key, md5('flow' || j)::uuid, md5('edge' || j)::uuid, c.execution_id, md5('down' || j)::uuid,
	       c.terminal_at_ms, CASE WHEN j % 20 <> 0 THEN 'success' END
	FROM generate_series(1, @edges::int) j,
	     LATERAL (SELECT 5 + 20 * (j % greatest(@executions::int / 20, 1)) AS i) x
	JOIN ff_exec_core c ON c.partition_key = (x.i % 256)::smallint AND c.execution_id = md5('ffseed' || x.i)::uuid`,
	`INSERT INTO ff_pending_cancel_groups (partition_key, flow_id, downstream_eid, enqueued_at_ms)
	SELECT (j % 256)::smallint, md5('cflow' || j)::uuid, md5('cdown' || j)::uuid,
	       @now::bigint - @span::bigint + (j::bigint * @span::bigint / @groups::int)
	FROM generate_series(1, @groups::int) j`,
	`INSERT INTO ff_exec_removed (partition_key, execution_id, namespace, public_state, terminal_at_ms, removed_at_ms)
	SELECT (j % 256)::smallint, md5('gone' || j)::uuid, 'ns-' || (j % 4), 'completed',
	       @now::bigint - @span::bigint + (j::bigint * @span::bigint / @tombstones::int) - 1000,
	       @now::bigint - @span::bigint + (j::bigint * @span::bigint / @tombstones::int)
	FROM generate_series(1, @tombstones::int) j`,
}

// Seed fills db's schema (migrated, empty) with size's rows by bulk SQL,
// then analyzes the tables, so that the planner sees a store of that size:
// for plan tests (AssertNoSeqScan) and by hand.
func Seed(tb testing.TB, db *DB, size SeedSize) {
	tb.Helper()
	if err := SeedPool(context.Background(), db.Pool, size); err != nil {
		tb.Fatalf("testdb: seeding %s: %v", db.Schema, err)
	}
}

// SeedPool is Seed on a pool whose search_path is a migrated, empty schema.
func SeedPool(ctx context.Context, pool *pgxpool.Pool, size SeedSize) error {
	if size.Span <= 0 {
		size.Span = 7 * 24 * time.Hour
	}
	if size.Executions <= 0 {
		size.Executions = 1
	}
	if size.LeaseEvents <= 0 {
		size.LeaseEvents = 1
	}
	args := pgx.NamedArgs{"executions": size.Executions, "events": size.LeaseEvents, "jobs": size.RiverJobs,
		"edges": size.Edges, "groups": size.CancelGroups, "tombstones": size.Tombstones,
		"now": time.Now().UnixMilli(), "span": size.Span.Milliseconds()}
	for _, q := range seedSQL {
		if _, err := pool.Exec(ctx, q, args); err != nil {
			return err
		}
	}
	_, err := pool.Exec(ctx, `ANALYZE ff_exec_core, ff_attempt, ff_completion_event, ff_lease_event, river_job,
		ff_edge, ff_pending_cancel_groups, ff_exec_removed`)
	return err
}
