package subscribe

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/jackc/pgx/v5"
)

// newTestReader starts a reader on db without its goroutine, so a test can
// drive readPage itself.
func newTestReader(t *testing.T, db *testdb.DB, opts Options) (*reader[LeaseEvent], *session) {
	t.Helper()
	cfg, err := opts.validate()
	if err != nil {
		t.Fatal(err)
	}
	r := newReader(cfg, leaseTable, db.Pool.Config().ConnConfig)
	sess, err := r.start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sess.close)
	r.out, r.chunk = make(chan delivery[LeaseEvent], 1000), cfg.pageSize
	return r, sess
}

func insertRows(t *testing.T, db *testdb.DB, n int, namespace string) {
	t.Helper()
	(&fftest.DB{TB: t, Pool: db.Pool}).Exec(`INSERT INTO ff_lease_event (execution_id, lease_id, event_type, occurred_at_ms, partition_key, namespace, instance_tag)
		SELECT gen_random_uuid()::text, NULL, 'acquired', g, 0, $2, NULL FROM generate_series(1, $1) g`, n, namespace)
}

func maxPosition(t *testing.T, db *testdb.DB) position {
	t.Helper()
	var p position
	if err := db.Pool.QueryRow(context.Background(),
		`SELECT xact_id, event_id FROM ff_lease_event ORDER BY xact_id DESC, event_id DESC LIMIT 1`).Scan(&p.xact, &p.event); err != nil {
		t.Fatal(err)
	}
	return p
}

// readAll reads pages until the reader has nothing more at once, and
// returns how many events each page that delivered any delivered (a page
// may deliver none: rows filtered out, or the exact-id part of a batch
// holding only other tests' transactions, which share the server).
func readAll(t *testing.T, r *reader[LeaseEvent], sess *session) []int {
	t.Helper()
	var pages []int
	for {
		more, err := r.readPage(context.Background(), sess.q)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for len(r.out) > 0 {
			d := <-r.out
			for _, ev := range d.events {
				if ev.Namespace != "mine" {
					t.Fatalf("delivered %+v", ev)
				}
				n++
			}
		}
		if n > 0 {
			pages = append(pages, n)
		}
		if !more {
			return pages
		}
	}
}

// A filtered read moves past the rows the filter dropped, so they are
// never read again: the batch ends and the next one starts above them.
func TestFilteredRowsAdvancePosition(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, nil)
	insertRows(t, db, 40, "other")
	r, sess := newTestReader(t, db, Options{Start: StartBeginning, PageSize: 5, Filter: ff.Filter{Namespace: "mine"}})
	// The first batch, up to the start snapshot, holds the 40 rows: the
	// reads scan them all and deliver nothing.
	if pages := readAll(t, r, sess); len(pages) != 0 {
		t.Fatalf("pages %v, want nothing delivered", pages)
	}
	if max := maxPosition(t, db); !r.from.Visible(max.xact) || r.inBatch {
		t.Fatalf("the stream's snapshot %s does not cover the last filtered row %+v", r.from, max)
	}
	if len(r.out) != 0 {
		t.Fatalf("%d deliveries of filtered rows", len(r.out))
	}

	insertRows(t, db, 12, "mine")
	if pages := readAll(t, r, sess); !slices.Equal(pages, []int{5, 5, 2}) {
		t.Fatalf("pages delivered %v events, want two full pages then a partial one", pages)
	}
}

func TestBuildSQL(t *testing.T) {
	t.Parallel()
	cfg, err := Options{Schema: "s1", Partitions: []int16{4, 2, 4}, Start: StartAfter,
		After:  Cursor{EventID: 3, Legacy: true},
		Filter: ff.Filter{Namespace: "n", InstanceTag: &ff.Tag{Key: "k", Value: "v"}}}.validate()
	if err != nil {
		t.Fatal(err)
	}
	r := newReader(cfg, leaseTable, nil)
	r.buildSQL()
	for _, want := range []string{
		`FROM "s1".ff_lease_event WHERE (xact_id, event_id) > ($3, $4) AND xact_id < $2::int8 AND xact_id <> ALL($1::int8[])`,
		`partition_key = ANY($6::int4[]) AND namespace = $7 AND instance_tag = $8`,
		`ORDER BY xact_id, event_id LIMIT $5`,
	} {
		if !strings.Contains(r.rangeSQL, want) {
			t.Errorf("range SQL lacks %q:\n%s", want, r.rangeSQL)
		}
	}
	if !strings.Contains(r.heldSQL, `WHERE xact_id = ANY($1::int8[]) AND xact_id < $2::int8 AND (xact_id, event_id) > ($3, $4)`) {
		t.Errorf("held SQL: %s", r.heldSQL)
	}
	if !strings.Contains(r.rangeSkip, "AND event_id > $9 ORDER BY") || !strings.Contains(r.heldSkip, "AND event_id > $9 ORDER BY") {
		t.Errorf("skip SQL: %s\n%s", r.rangeSkip, r.heldSkip)
	}
	if got := r.filterArgs[0].([]int32); len(got) != 2 || got[0] != 2 || got[1] != 4 {
		t.Errorf("partitions %v, want [2 4]", got)
	}
}

// A reader that reads ticks in runs and applies the exclusions itself
// (more than the range query takes) delivers what a reader that walked
// the ticks one by one delivered, with the same cursors.
func TestRunsWithExclusionsInTheReader(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, nil)
	ctx := context.Background()
	live, lsess := newTestReader(t, db, Options{Start: StartBeginning})
	var got []LeaseEvent
	step := func() {
		t.Helper()
		for {
			more, err := live.readPage(ctx, lsess.q)
			if err != nil {
				t.Fatal(err)
			}
			for len(live.out) > 0 {
				got = append(got, (<-live.out).events...)
			}
			if !more {
				return
			}
		}
	}
	begin := func() pgx.Tx {
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback(ctx) })
		if _, err := tx.Exec(ctx, `INSERT INTO ff_lease_event (execution_id, event_type, occurred_at_ms, partition_key, namespace)
			SELECT gen_random_uuid()::text, 'renewed', g, 0, 'mine' FROM generate_series(1, 3) g`); err != nil {
			t.Fatal(err)
		}
		return tx
	}
	var open []pgx.Tx
	for range 6 {
		open = append(open, begin(), begin())
		insertRows(t, db, 2, "mine")
		step() // a tick while the round's transactions are open
		// Commit an older one and a newer one, out of order.
		for _, i := range []int{len(open) - 1, 0} {
			if err := open[i].Commit(ctx); err != nil {
				t.Fatal(err)
			}
			open = slices.Delete(open, i, i+1)
		}
		step()
	}
	for _, tx := range open {
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	step()
	step()
	if want := 6 * (2*3 + 2); len(got) != want {
		t.Fatalf("the live reader got %d events, want %d", len(got), want)
	}

	again, asess := newTestReader(t, db, Options{Start: StartBeginning})
	again.maxSQLExcl = 0
	var replay []LeaseEvent
	for reads := 0; len(replay) < len(got) && reads < 1000; reads++ {
		if _, err := again.readPage(ctx, asess.q); err != nil {
			t.Fatal(err)
		}
		for len(again.out) > 0 {
			replay = append(replay, (<-again.out).events...)
		}
	}
	if len(replay) != len(got) {
		t.Fatalf("second reader: %d events, want %d", len(replay), len(got))
	}
	for i := range got {
		if replay[i].EventID != got[i].EventID || replay[i].Cursor != got[i].Cursor {
			t.Fatalf("event %d: %d %#v, the live reader's %d %#v", i, replay[i].EventID, replay[i].Cursor, got[i].EventID, got[i].Cursor)
		}
	}
}
