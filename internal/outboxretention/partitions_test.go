package outboxretention_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/internal/outboxretention"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/ffriver/ffriver/outbox"
	"github.com/jackc/pgx/v5"
)

func TestPartitionWidthFollowsTheRetention(t *testing.T) {
	for _, c := range []struct{ retention, want time.Duration }{
		{7 * 24 * time.Hour, 24 * time.Hour},
		{24 * time.Hour, 6 * time.Hour},
		{4 * time.Hour, time.Hour},
		{time.Hour, 10 * time.Minute},
		{5 * time.Minute, time.Minute},
		{time.Minute, 10 * time.Second},
		{time.Second, time.Second},
	} {
		if got := outboxretention.PartitionWidth(c.retention); got != c.want {
			t.Errorf("PartitionWidth(%s) = %s, want %s", c.retention, got, c.want)
		}
	}
}

// A maintenance run creates contiguous partitions that reach ahead of the
// database's clock, registered as created; a second run finds nothing to
// do; a run while another holds the table's maintenance does nothing and
// says so; bad input is refused with an error naming it.
func TestMaintainPartitionsCreatesAhead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t, nil)
	s := dbutil.Schema(db.Schema)
	run := func(tx pgx.Tx, m outboxretention.Maintenance) outboxretention.MaintainResult {
		t.Helper()
		res, err := outboxretention.MaintainPartitions(ctx, tx, s, m)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	m := outboxretention.Maintenance{Table: outbox.CompletionTable, Width: time.Minute}
	due, err := outboxretention.PartitionsDue(ctx, db.Pool, s, outbox.CompletionTable, time.Minute, 0)
	if err != nil || !due.Create || due.Drop {
		t.Fatalf("due %+v, %v: want partitions to create in a new schema, none to drop", due, err)
	}
	var res outboxretention.MaintainResult
	if err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error { res = run(tx, m); return nil }); err != nil {
		t.Fatal(err)
	}
	// At least two minutes ahead, from 5 s ahead: two or three partitions.
	if len(res.Created) < 2 || len(res.Created) > 4 || len(res.Dropped) != 0 {
		t.Fatalf("first run %+v: want two to four minute partitions created", res)
	}
	rows, err := db.Pool.Query(ctx, `SELECT p.partition_name, p.lo_ms, p.hi_ms, pg_get_expr(c.relpartbound, c.oid)
		FROM ff_outbox_partition p JOIN pg_class c ON c.relname = p.partition_name AND c.relnamespace = $1::regnamespace
		WHERE p.stream = 'ff_completion_event' ORDER BY p.lo_ms`, db.Schema)
	if err != nil {
		t.Fatal(err)
	}
	type part struct {
		name   string
		lo, hi int64
		bound  string
	}
	parts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (part, error) {
		var p part
		return p, r.Scan(&p.name, &p.lo, &p.hi, &p.bound)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(parts) != len(res.Created) {
		t.Fatalf("%d partitions attached and registered, %d created", len(parts), len(res.Created))
	}
	var now int64
	if err := db.Pool.QueryRow(ctx, `SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	for i, p := range parts {
		if i > 0 && p.lo != parts[i-1].hi {
			t.Errorf("partition %s starts at %d, the one before ends at %d: want them contiguous", p.name, p.lo, parts[i-1].hi)
		}
		if i > 0 && p.hi%time.Minute.Milliseconds() != 0 {
			t.Errorf("partition %s ends at %d: want minute boundaries", p.name, p.hi)
		}
		if !strings.Contains(p.bound, "FROM") || p.name != res.Created[i] {
			t.Errorf("partition %+v: want it attached by range, named as created (%v)", p, res.Created)
		}
	}
	if parts[0].lo <= now || parts[len(parts)-1].hi < now+2*time.Minute.Milliseconds() {
		t.Errorf("partitions from %d to %d at %d: want them to start ahead and reach two minutes past the clock", parts[0].lo, parts[len(parts)-1].hi, now)
	}
	if due, err = outboxretention.PartitionsDue(ctx, db.Pool, s, outbox.CompletionTable, time.Minute, 0); err != nil || due.Create {
		t.Fatalf("due %+v, %v after a run: want nothing to create", due, err)
	}

	// Another transaction maintaining the table: this run does nothing.
	hold, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback(ctx)
	run(hold, outboxretention.Maintenance{Table: outbox.CompletionTable})
	if err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error { res = run(tx, m); return nil }); err != nil {
		t.Fatal(err)
	}
	if !res.Busy || len(res.Created) != 0 {
		t.Fatalf("a run beside another %+v: want busy, nothing done", res)
	}
	hold.Rollback(ctx)

	for _, bad := range []outboxretention.Maintenance{{Table: "ff_exec_core"}, {Table: outbox.LeaseTable, Width: time.Millisecond}, {Table: outbox.LeaseTable, Ahead: -time.Second}} {
		err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			_, err := outboxretention.MaintainPartitions(ctx, tx, s, bad)
			return err
		})
		var verr *ff.ValidationError
		if !errors.As(err, &verr) {
			t.Errorf("MaintainPartitions(%+v): %v, want a validation error", bad, err)
		}
	}

	// Rows written now (before the first partition starts) are in the
	// DEFAULT partition: no writer ever waits for a partition.
	if _, err := db.Pool.Exec(ctx, `INSERT INTO ff_completion_event (partition_key, execution_id, outcome, occurred_at_ms)
		VALUES (0, gen_random_uuid(), 'success', 1)`); err != nil {
		t.Fatal(err)
	}
	var where string
	if err := db.Pool.QueryRow(ctx, `SELECT tableoid::regclass::text FROM ff_completion_event`).Scan(&where); err != nil {
		t.Fatal(err)
	}
	if where != outboxretention.DefaultPartition(outbox.CompletionTable) {
		t.Fatalf("a row written before the first partition is in %s, want the DEFAULT partition", where)
	}
}

// A maintenance run that found the newest partition ending just ahead of
// the clock continued it from there, so a row written at that time while
// the run's transaction was open went to the DEFAULT partition, waited for
// the attach's lock on it and then failed its partition constraint
// (SQLSTATE 23514): a Complete beside retention on a busy machine failed
// "new row for relation ff_completion_event_default violates partition
// constraint". Every range a run creates now starts at least 5 s ahead;
// the time in between stays the DEFAULT partition's.
func TestMaintainPartitionsCreatesNoRangeAWriterReachesBeforeTheCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t, nil)
	s := dbutil.Schema(db.Schema)
	dbNow := func() int64 {
		t.Helper()
		var ms int64
		if err := db.Pool.QueryRow(ctx, `SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint`).Scan(&ms); err != nil {
			t.Fatal(err)
		}
		return ms
	}
	// The newest partition ends 1.5 s ahead of the clock.
	now := dbNow()
	edge := now + 1500
	if err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		_, err := outboxretention.AttachPartition(ctx, tx, s, outbox.CompletionTable, now-60_000, edge)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	maint, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer maint.Rollback(ctx)
	res, err := outboxretention.MaintainPartitions(ctx, maint, s, outboxretention.Maintenance{Table: outbox.CompletionTable, Width: time.Second})
	if err != nil || len(res.Created) == 0 {
		t.Fatalf("maintenance: %+v, %v: want partitions created", res, err)
	}
	// A writer past the newest partition's end, while the run is open.
	fftest.Await(t, 10*time.Second, "the clock to pass the newest partition's end", func() bool { return dbNow() > edge+100 })
	written := make(chan error, 1)
	go func() {
		_, err := db.Pool.Exec(ctx, `INSERT INTO ff_completion_event /* past the edge */ (partition_key, execution_id, outcome, occurred_at_ms)
			VALUES (0, gen_random_uuid(), 'success', 1)`)
		written <- err
	}()
	fftest.Await(t, 10*time.Second, "the insert to wait for the run's lock on the DEFAULT partition", func() bool {
		var n int
		_ = db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%/* past the edge */%'
			AND pid <> pg_backend_pid()`).Scan(&n)
		return n == 1
	})
	if err := maint.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-written; err != nil {
		t.Fatalf("a row written past the newest partition's end while maintenance ran: %v (partitions created: %v)", err, res.Created)
	}
	var first int64
	if err := db.Pool.QueryRow(ctx, `SELECT min(lo_ms) FROM ff_outbox_partition WHERE stream = 'ff_completion_event' AND lo_ms >= $1`, edge).Scan(&first); err != nil {
		t.Fatal(err)
	}
	if first < now+5000 {
		t.Errorf("the run's first partition starts at %d, %d ms after the clock it read: want at least 5 s ahead", first, first-now)
	}
}
