package ffriver

import (
	"context"
	"testing"
	"time"

	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/ffriver/ffriver/jobs"
)

// The last ticks are read from the window's ticks through River's fetch
// index, not from every tick River keeps (an hour of them: wake ticks come
// up to 50 a second per timer scanner under load, and the tick watchdog of
// every ffworker reads them every 10 s); a scanner with no tick in the
// window, or no tick there at all, is read from every tick.
func TestLastTicksReadTheWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t, &testdb.Options{RiverOnly: true})
	s := dbutil.Schema(db.Schema)
	const queue = "ff_scan"
	// An hour of old ticks and scans for scanners a, b and c; then a fresh
	// tick of a (available) and of b (completed).
	if _, err := db.Pool.Exec(ctx, s.SQL(`INSERT INTO {S}river_job (kind, queue, args, state, created_at, scheduled_at, finalized_at, max_attempts, priority, attempt)
		SELECT CASE WHEN g % 4 = 0 THEN $1 ELSE 'ff.scan' END, $2, jsonb_build_object('scanner', chr(97 + g % 3)), 'completed',
		       now() - interval '10 minutes' - g * interval '100 ms', now() - interval '10 minutes' - g * interval '100 ms',
		       now() - interval '10 minutes' - g * interval '100 ms', 25, 1, 1
		FROM generate_series(1, 40000) g`), jobs.KindTick, queue); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, s.SQL(`INSERT INTO {S}river_job (kind, queue, args, state, created_at, scheduled_at, finalized_at, max_attempts, priority, attempt)
		VALUES ($1, $2, '{"scanner": "a"}', 'available', now() - interval '2 s', now() - interval '2 s', NULL, 25, 1, 0),
		       ($1, $2, '{"scanner": "b"}', 'completed', now() - interval '1 s', now() - interval '1 s', now() - interval '500 ms', 25, 1, 1)`),
		jobs.KindTick, queue); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, s.SQL(`ANALYZE {S}river_job`)); err != nil {
		t.Fatal(err)
	}

	plan, err := testdb.Explain(ctx, db.Pool, s.SQL(`SELECT 1 FROM `+recentTicks), jobs.KindTick, queue, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	plan.Walk(func(n testdb.PlanNode) {
		if n.Relation == "river_job" && (n.NodeType != "Index Scan" || n.Index != "river_job_prioritized_fetching_index") {
			t.Errorf("the window's ticks are read by %s %s, want ranges of river_job_prioritized_fetching_index:\n%s", n.NodeType, n.Index, plan)
		}
	})

	ticks, err := readTicks(ctx, db.Pool, s, queue, 30*time.Second, []string{"b"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ticks) != 2 || ticks["a"].inserted == nil || ms(ticks["a"].insertedMs) > time.Minute || ticks["a"].worked != nil ||
		ticks["b"].workedMs == nil || ms(*ticks["b"].workedMs) > time.Minute {
		t.Errorf("the window's last ticks: %+v; want a's and b's fresh ones only, b's worked", ticks)
	}
	if n, ok := newest(ticks); !ok || ms(n.insertedMs) > time.Minute {
		t.Errorf("the newest tick: %+v, %t; want a fresh one", n, ok)
	}

	// a's tick in the window is not worked yet: every tick is read, for
	// its last worked one.
	ticks, err = readTicks(ctx, db.Pool, s, queue, 30*time.Second, []string{"a", "b"})
	if err != nil {
		t.Fatal(err)
	}
	if a := ticks["a"]; ms(a.insertedMs) > time.Minute || a.workedMs == nil || ms(*a.workedMs) < 9*time.Minute {
		t.Errorf("a's last ticks: %+v; want its fresh one inserted and its last worked one, ten minutes old", a)
	}

	// c ticked ten minutes ago: every tick is read.
	ticks, err = readTicks(ctx, db.Pool, s, queue, 30*time.Second, []string{"a", "b", "c"})
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := ticks["c"]; !ok || ms(c.insertedMs) < 9*time.Minute || ms(ticks["a"].insertedMs) > time.Minute {
		t.Errorf("with c's last tick ten minutes old: %+v; want c's and a's last ticks", ticks)
	}
	// No tick in the window at all.
	if _, err := db.Pool.Exec(ctx, s.SQL(`DELETE FROM {S}river_job WHERE created_at > now() - interval '1 minute'`)); err != nil {
		t.Fatal(err)
	}
	ticks, err = readTicks(ctx, db.Pool, s, queue, 30*time.Second, nil)
	if n, ok := newest(ticks); err != nil || !ok || ms(n.insertedMs) < 9*time.Minute || ms(n.insertedMs) > 11*time.Minute {
		t.Errorf("with no tick in the window: %+v, %t, %v; want the newest of the old ones, ten minutes old", n, ok, err)
	}
}

// New follows the River where this schema's ticks go (newestTick): the
// newest tick among those scheduled within DefaultTickStaleAfter in any
// River, read as ranges of River's fetch index, and among every tick River
// keeps only when no River has a recent one.
func TestNewestTickReadsTheWindowFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t, nil)
	other := testdb.New(t, &testdb.Options{RiverOnly: true})
	f, err := New(ctx, db.Pool, Config{Schema: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	tick := func(s string, ago time.Duration) {
		t.Helper()
		if _, err := db.Pool.Exec(ctx, dbutil.Schema(s).SQL(`INSERT INTO {S}river_job (kind, queue, args, state, created_at, scheduled_at, finalized_at, max_attempts, priority, attempt)
			VALUES ($1, $2, jsonb_build_object('schema', $3::text, 'scanner', 'a'), 'completed', now() - $4::interval, now() - $4::interval,
			        now() - $4::interval, 25, 1, 1)`), jobs.KindTick, f.pipeline.ScanQueue(), db.Schema, ago); err != nil {
			t.Fatal(err)
		}
	}
	newest := func(what, wantSchema string, atLeast, below time.Duration) {
		t.Helper()
		at, age, ok, err := f.newestTick(ctx)
		if err != nil || !ok || at != wantSchema || age < atLeast || age >= below {
			t.Errorf("%s: newest tick in %q, %s old (%t, %v); want in %q, %s to %s old", what, at, age, ok, err, wantSchema, atLeast, below)
		}
	}
	// Old ticks only: the newest of every tick River keeps.
	tick(db.Schema, 10*time.Minute)
	tick(other.Schema, 20*time.Minute)
	newest("ticks of 10 and 20 minutes ago", db.Schema, 9*time.Minute, 11*time.Minute)
	// A recent one in the other River: read from the window.
	tick(other.Schema, time.Second)
	newest("a tick a second ago in the other River", other.Schema, 0, DefaultTickStaleAfter)

	// An hour of another schema's ticks in the other River: the window's
	// read is still ranges of the fetch index.
	if _, err := db.Pool.Exec(ctx, dbutil.Schema(other.Schema).SQL(`INSERT INTO {S}river_job (kind, queue, args, state, created_at, scheduled_at, finalized_at, max_attempts, priority, attempt)
		SELECT $1, $2, '{"schema": "another"}', 'completed', now() - g * interval '100 ms', now() - g * interval '100 ms', now() - g * interval '100 ms', 25, 1, 1
		FROM generate_series(1, 36000) g`), jobs.KindTick, f.pipeline.ScanQueue()); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, dbutil.Schema(other.Schema).SQL(`ANALYZE {S}river_job`)); err != nil {
		t.Fatal(err)
	}
	newest("with an hour of another schema's ticks", other.Schema, 0, DefaultTickStaleAfter)
	plan, err := testdb.Explain(ctx, db.Pool, dbutil.Schema(other.Schema).SQL(newestRecentTickSQL), jobs.KindTick, f.pipeline.ScanQueue(),
		DefaultTickStaleAfter, []byte(`{"schema": "x"}`))
	if err != nil {
		t.Fatal(err)
	}
	plan.Walk(func(n testdb.PlanNode) {
		if n.Relation == "river_job" && n.Index != "river_job_prioritized_fetching_index" {
			t.Errorf("the window's ticks are read by %s %s, want ranges of river_job_prioritized_fetching_index:\n%s", n.NodeType, n.Index, plan)
		}
	})
}
