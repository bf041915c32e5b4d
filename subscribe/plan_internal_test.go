package subscribe

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/internal/outboxretention"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/ffriver/ffriver/outbox"
	"github.com/jackc/pgx/v5"
)

// A page of a stream reads each partition of the outbox through its
// (xact_id, event_id) index and merges them, at most a page, even when the
// statistics of the partition being written are stale (issue 27): planned
// as it was, the page read every row of its range in every partition and
// sorted them (160,000 rows for a page of 5,000 on a store of 5,000,000
// events), and a catch-up on a partitioned outbox ran at a sixth of its
// speed on one table. The plan is explained through the reader's own read.
func TestPagePlanMergesPartitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t, nil)
	s := dbutil.Schema(db.Schema)
	const day = 24 * time.Hour
	today := time.Now().Truncate(day).UnixMilli()
	if err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		for d := int64(7); d >= 0; d-- {
			if _, err := outboxretention.AttachPartition(ctx, tx, s, outbox.LeaseTable, today-d*day.Milliseconds(), today-(d-1)*day.Milliseconds()); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	insert := func(n int, writtenMs int64) {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, `INSERT INTO ff_lease_event (execution_id, event_type, occurred_at_ms, partition_key, written_at_ms)
			SELECT gen_random_uuid()::text, 'renewed', $2, g % 256, $2 FROM generate_series(1, $1) g`, n, writtenMs); err != nil {
			t.Fatal(err)
		}
	}
	// A week of events, analyzed; then today's partition goes on
	// growing, in transactions the statistics have not seen.
	for d := int64(7); d >= 0; d-- {
		insert(20_000, today-d*day.Milliseconds()+1000)
	}
	if _, err := db.Pool.Exec(ctx, `ANALYZE ff_lease_event`); err != nil {
		t.Fatal(err)
	}
	from := maxPosition(t, db)
	for range 5 {
		insert(20_000, today+2000)
	}

	r, sess := newTestReader(t, db, Options{Schema: db.Schema, Start: StartBeginning})
	var xmax int64
	if err := db.Pool.QueryRow(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint`).Scan(&xmax); err != nil {
		t.Fatal(err)
	}
	r.args = append(r.args[:0], []int64{}, xmax, from.xact, from.event, r.cfg.pageSize)
	// explain explains sql through the reader's own read, with its
	// settings, and checks that it merges the partitions' index reads.
	explain := func(what, sql string) {
		t.Helper()
		var raw []byte
		if err := r.readRows(ctx, sess.q, sql, func(rows pgx.Rows) error {
			for rows.Next() {
				if err := rows.Scan(&raw); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		var out []struct{ Plan testdb.PlanNode }
		if err := json.Unmarshal(raw, &out); err != nil || len(out) != 1 {
			t.Fatalf("explain: %s: %v", raw, err)
		}
		var merged, sorted bool
		out[0].Plan.Walk(func(n testdb.PlanNode) {
			merged = merged || n.NodeType == "Merge Append"
			sorted = sorted || n.NodeType == "Sort"
		})
		if !merged || sorted {
			t.Errorf("%s of the stream is not a merge of the partitions' index reads:\n%s", what, out[0].Plan)
		}
	}
	explain("a page planned for its values", "EXPLAIN (FORMAT JSON) "+r.rangeSQL)

	// The reader's pages use the statement's generic plan, planned once
	// per connection (pageSettings), not a plan of their own each.
	for range 3 {
		if err := r.readRows(ctx, sess.q, r.rangeSQL, func(rows pgx.Rows) error {
			for rows.Next() {
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	var name string
	var generic, custom int64
	if err := sess.q.QueryRow(ctx, `SELECT name, generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1`,
		r.rangeSQL).Scan(&name, &generic, &custom); err != nil {
		t.Fatalf("the page statement is not prepared on the reader's connection: %v", err)
	}
	if generic < 3 || custom != 0 {
		t.Errorf("pages read with %d generic and %d custom plans, want every one generic", generic, custom)
	}
	// EXECUTE takes its values as literals (a utility statement has no
	// parameters).
	r.args = nil
	explain("the generic plan of a page", fmt.Sprintf("EXPLAIN (FORMAT JSON) EXECUTE %s('{}', %d, %d, %d, %d)",
		pgx.Identifier{name}.Sanitize(), xmax, from.xact, from.event, r.cfg.pageSize))
	// For the record: the plan the planner picks for the same read without
	// the reader's settings.
	if plain, err := testdb.Explain(ctx, db.Pool, r.rangeSQL, r.args...); err == nil {
		t.Logf("planned without the settings:\n%s", plain)
	}
}
