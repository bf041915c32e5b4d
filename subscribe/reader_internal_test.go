package subscribe

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/testdb"
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
	if _, err := db.Pool.Exec(context.Background(),
		`INSERT INTO ff_lease_event (execution_id, lease_id, event_type, occurred_at_ms, partition_key, namespace, instance_tag)
		 SELECT gen_random_uuid()::text, NULL, 'acquired', g, 0, $2, NULL FROM generate_series(1, $1) g`, n, namespace); err != nil {
		t.Fatal(err)
	}
}

// awaitHorizon waits until every row's transaction is below the horizon:
// another session's open transaction (other tests share the server) can
// hold it back for a while.
func awaitHorizon(t *testing.T, db *testdb.DB) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var past bool
		if err := db.Pool.QueryRow(context.Background(),
			`SELECT ff_xact_horizon() > (SELECT max(xact_id) FROM ff_lease_event)`).Scan(&past); err != nil {
			t.Fatal(err)
		}
		if past {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the horizon did not pass the test's rows")
		}
		time.Sleep(10 * time.Millisecond)
	}
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

// A filtered read moves the position past the rows the filter dropped, so
// they are never read again.
func TestFilteredRowsAdvancePosition(t *testing.T) {
	db := testdb.New(t, nil)
	ctx := context.Background()
	insertRows(t, db, 40, "other")
	r, sess := newTestReader(t, db, Options{Start: StartBeginning, PageSize: 5, Filter: ff.Filter{Namespace: "mine"}})
	awaitHorizon(t, db)

	more, err := r.readPage(ctx, sess.q)
	if err != nil || more {
		t.Fatalf("readPage: more=%v err=%v", more, err)
	}
	if max := maxPosition(t, db); !max.less(r.pos) {
		t.Fatalf("position %+v is not past the last filtered row %+v", r.pos, max)
	}
	if len(r.out) != 0 {
		t.Fatalf("%d deliveries of filtered rows", len(r.out))
	}

	insertRows(t, db, 12, "mine")
	awaitHorizon(t, db)
	var pages []bool
	for {
		more, err := r.readPage(ctx, sess.q)
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, more)
		if !more {
			break
		}
	}
	if len(pages) != 3 || !pages[0] || !pages[1] {
		t.Fatalf("pages %v, want two full pages then a partial one", pages)
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
	if n != 12 {
		t.Fatalf("delivered %d, want 12", n)
	}
}

func TestBuildSQL(t *testing.T) {
	cfg, err := Options{Schema: "s1", Partitions: []int16{4, 2, 4}, Start: StartAfter,
		After:  ff.Cursor{EventID: 3, Legacy: true},
		Filter: ff.Filter{Namespace: "n", InstanceTag: &ff.Tag{Key: "k", Value: "v"}}}.validate()
	if err != nil {
		t.Fatal(err)
	}
	r := newReader(cfg, leaseTable, nil)
	r.skip = &skipRule{until: 10, pred: "(event_id > $%d OR xact_id >= $%d)", args: []any{int64(3), int64(10)}}
	r.buildSQL()
	for _, want := range []string{
		`FROM "s1".ff_lease_event WHERE xact_id < $1 AND (xact_id, event_id) > ($2, $3)`,
		`partition_key = ANY($5::int4[]) AND namespace = $6 AND instance_tag = $7`,
		`ORDER BY xact_id, event_id LIMIT $4`,
	} {
		if !strings.Contains(r.pageSQL, want) {
			t.Errorf("page SQL lacks %q:\n%s", want, r.pageSQL)
		}
	}
	if !strings.Contains(r.skipSQL, "AND (event_id > $8 OR xact_id >= $9) ORDER BY") {
		t.Errorf("skip SQL: %s", r.skipSQL)
	}
	if got := r.filterArgs[0].([]int32); len(got) != 2 || got[0] != 2 || got[1] != 4 {
		t.Errorf("partitions %v, want [2 4]", got)
	}
	if r.horizonSQL != `SELECT "s1".ff_xact_horizon()` {
		t.Errorf("horizon SQL: %s", r.horizonSQL)
	}
}
