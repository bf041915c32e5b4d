package status

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/internal/outboxretention"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/ffriver/ffriver/outbox"
	"github.com/jackc/pgx/v5"
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
		testdb.AssertNoSeqScan(t, db.Pool, []string{table}, s.SQL(streamSQL(table)), StreamCountCap+1, table, int64(math.MinInt64))
	}
	var n, partitions, defaultRows int64
	if err := db.Pool.QueryRow(ctx, s.SQL(streamSQL("ff_lease_event")), StreamCountCap+1, "ff_lease_event", int64(math.MinInt64)).Scan(&n, new(*int64), new(*int64),
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

// A report's stream row reads the outbox's current and previous time
// partitions (and the DEFAULT one), not all of them, and says the same as a
// read of the whole outbox would: the newest event, and the events counted
// up to the cap, exact when the window holds fewer (issue 38, item 4: a
// new connection opened every partition to plan the read).
func TestStreamRowReadsItsWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t, nil)
	s := dbutil.Schema(db.Schema)
	const dayMs = 24 * 3_600_000
	var now int64
	if err := db.Pool.QueryRow(ctx, `SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	today := now / dayMs * dayMs
	// Day partitions from ten days ago to tomorrow.
	if err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		for d := int64(10); d >= -1; d-- {
			if _, err := outboxretention.AttachPartition(ctx, tx, s, outbox.LeaseTable, today-d*dayMs, today-(d-1)*dayMs); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Events written daysAgo days ago (written_at_ms as the column's
	// default would have taken it then).
	write := func(n int, daysAgo int64) {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, `INSERT INTO ff_lease_event (execution_id, lease_id, event_type, occurred_at_ms, partition_key, namespace,
		     attempt_index, lease_epoch, worker_instance_id, written_at_ms)
			SELECT gen_random_uuid()::text, gen_random_uuid()::text, 'acquired', $2::bigint, 1, 'ns', 0, 1, 'w', $2::bigint
			FROM generate_series(1, $1::int)`, n, now-daysAgo*dayMs); err != nil {
			t.Fatal(err)
		}
	}
	lease := func() Stream {
		t.Helper()
		out, err := streams(ctx, db.Pool, s, true)
		if err != nil {
			t.Fatal(err)
		}
		return out[0]
	}
	newest := func() (id, at int64) {
		t.Helper()
		if err := db.Pool.QueryRow(ctx, s.SQL(`SELECT event_id, occurred_at_ms FROM {S}ff_lease_event ORDER BY event_id DESC LIMIT 1`)).Scan(&id, &at); err != nil {
			t.Fatal(err)
		}
		return id, at
	}
	check := func(what string, events int64, atLeast bool) {
		t.Helper()
		st := lease()
		id, at := newest()
		if st.Events != events || st.EventsAtLeast != atLeast || st.NewestEventID == nil || *st.NewestEventID != id ||
			st.NewestAtMs == nil || *st.NewestAtMs != at || st.Partitions != 12 {
			t.Errorf("%s: events %d (at least %t), newest %v at %v, %d partitions; want %d (at least %t), newest %d at %d, 12 partitions",
				what, st.Events, st.EventsAtLeast, deref(st.NewestEventID), deref(st.NewestAtMs), st.Partitions, events, atLeast, id, at)
		}
	}
	// A quiet window (five events today) before a busy week: counted over
	// the whole outbox.
	write(StreamCountCap, 5)
	write(5, 0)
	check("five events in the window, the cap's worth before it", StreamCountCap, true)
	// Fewer than the cap in all: exact.
	if _, err := db.Pool.Exec(ctx, s.SQL(`DELETE FROM {S}ff_lease_event WHERE written_at_ms < $1`), today-dayMs); err != nil {
		t.Fatal(err)
	}
	write(20, 3)
	check("25 events in all", 25, false)
	// A busy window: read alone.
	write(StreamCountCap, 1)
	write(3, 0)
	check("the cap's worth in the window", StreamCountCap, true)

	// The window's statement is planned over the window's partitions and
	// the DEFAULT one only.
	var from *int64
	if err := db.Pool.QueryRow(ctx, s.SQL(streamWindowSQL), []string{outbox.LeaseTable}).Scan(new(string), &from); err != nil || from == nil || *from != today-dayMs {
		t.Fatalf("window from %v (%v), want yesterday's start %d", deref(from), err, today-dayMs)
	}
	plan := testdb.AssertNoSeqScan(t, db.Pool, []string{outbox.LeaseTable}, s.SQL(streamSQL(outbox.LeaseTable)), StreamCountCap+1, outbox.LeaseTable, *from)
	read := map[string]bool{}
	plan.Walk(func(n testdb.PlanNode) {
		if strings.HasPrefix(n.Relation, outbox.LeaseTable) {
			read[n.Relation] = true
		}
	})
	// Yesterday's, today's, tomorrow's and the DEFAULT partition.
	if len(read) != 4 || !read[outboxretention.DefaultPartition(outbox.LeaseTable)] {
		t.Errorf("the window's read plans %d partitions (%v), want 4, the DEFAULT one among them:\n%s", len(read), read, plan)
	}
}

func deref(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}
