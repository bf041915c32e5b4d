package dbutil_test

import (
	"context"
	"testing"

	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/jackc/pgx/v5"
)

// readSettings reads the planner settings ScopedRead sets, through it.
func readSettings(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, sql string) ([]string, error) {
	var got []string
	err := dbutil.ScopedRead(ctx, q, dbutil.PlannerSettings, sql, []any{"enable_sort"}, func(rows pgx.Rows) error {
		for rows.Next() {
			var v string
			if err := rows.Scan(&v); err != nil {
				return err
			}
			got = append(got, v)
		}
		return nil
	})
	return got, err
}

const settingSQL = `SELECT current_setting($1::text) UNION ALL SELECT current_setting('jit')`

// The settings hold for the read and end with it, on a pool and inside a
// caller's transaction, whose own work goes on; a read that fails leaves
// that transaction usable.
func TestScopedRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t, &testdb.Options{NoMigrate: true, MaxConns: 1})
	setting := func(q interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}) string {
		t.Helper()
		var v string
		if err := q.QueryRow(ctx, `SELECT current_setting('enable_sort')`).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}

	got, err := readSettings(ctx, db.Pool, settingSQL)
	if err != nil || len(got) != 2 || got[0] != "off" || got[1] != "off" {
		t.Fatalf("on the pool: the read saw enable_sort, jit = %v (%v), want off, off", got, err)
	}
	// The pool has one connection: the next statement runs where the
	// read did.
	if v := setting(db.Pool); v != "on" {
		t.Fatalf("on the pool: enable_sort after the read = %s, want on", v)
	}

	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `CREATE TABLE kept (v int); INSERT INTO kept VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	got, err = readSettings(ctx, tx, settingSQL)
	if err != nil || len(got) != 2 || got[0] != "off" {
		t.Fatalf("in a transaction: the read saw %v (%v), want off", got, err)
	}
	if v := setting(tx); v != "on" {
		t.Fatalf("in a transaction: enable_sort after the read = %s, want on", v)
	}
	if _, err := readSettings(ctx, tx, `SELECT (1/0)::text WHERE $1::text IS NOT NULL`); err == nil {
		t.Fatal("a read that divides by zero: no error")
	}
	if v := setting(tx); v != "on" {
		t.Fatalf("after a failed read: enable_sort = %s, want on", v)
	}
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM kept`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the transaction after a failed read: %d rows of its own table (%v), want 1", n, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("committing after a failed read: %v", err)
	}

	// A connection with a transaction open by hand (BEGIN sent as a
	// statement) is in a transaction too: the read must not end it.
	c, err := db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	conn := c.Conn()
	if _, err := conn.Exec(ctx, `BEGIN`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `CREATE TEMP TABLE mine (v int)`); err != nil {
		t.Fatal(err)
	}
	if got, err := readSettings(ctx, conn, settingSQL); err != nil || len(got) != 2 || got[0] != "off" {
		t.Fatalf("on a connection in a transaction: the read saw %v (%v), want off", got, err)
	}
	if _, err := readSettings(ctx, conn, `SELECT (1/0)::text WHERE $1::text IS NOT NULL`); err == nil {
		t.Fatal("a read that divides by zero on a connection in a transaction: no error")
	}
	if v := setting(conn); v != "on" || conn.PgConn().TxStatus() != 'T' {
		t.Fatalf("on the connection after the reads: enable_sort = %s, transaction status %c; want on, still in its transaction", v, conn.PgConn().TxStatus())
	}
	if _, err := conn.Exec(ctx, `INSERT INTO mine VALUES (1); ROLLBACK`); err != nil {
		t.Fatalf("the hand-opened transaction after the reads: %v", err)
	}
	c.Release()

	// A failed read on the pool leaves no broken connection behind.
	if _, err := readSettings(ctx, db.Pool, `SELECT (1/0)::text WHERE $1::text IS NOT NULL`); err == nil {
		t.Fatal("a read that divides by zero on the pool: no error")
	}
	if v := setting(db.Pool); v != "on" {
		t.Fatalf("after a failed read on the pool: enable_sort = %s, want on", v)
	}
}

// Every settings ffriver reads with turns JIT off for the read (a plan
// estimated past jit_above_cost is compiled first, tens of milliseconds
// for a read of a few rows), and every one but OrderedSettings parallel
// workers too; on a connection whose own jit_above_cost would compile
// everything, they are back as they were after the read.
func TestSettingsTurnJITOff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t, &testdb.Options{NoMigrate: true, MaxConns: 1})
	if _, err := db.Pool.Exec(ctx, `SET jit = on; SET jit_above_cost = 0; SET max_parallel_workers_per_gather = 2`); err != nil {
		t.Fatal(err)
	}
	const read = `SELECT current_setting('jit'), current_setting('max_parallel_workers_per_gather') WHERE $1::int = 1`
	for name, c := range map[string]struct {
		settings, parallel string
	}{
		"PlannerSettings": {dbutil.PlannerSettings, "0"},
		"OrderedSettings": {dbutil.OrderedSettings, "2"},
		"KeyedSettings":   {dbutil.KeyedSettings, "0"},
		"BoundedSettings": {dbutil.BoundedSettings, "0"},
	} {
		var jit, parallel string
		err := dbutil.ScopedRead(ctx, db.Pool, c.settings, read, []any{1}, func(rows pgx.Rows) error {
			_, err := pgx.ForEachRow(rows, []any{&jit, &parallel}, func() error { return nil })
			return err
		})
		if err != nil || jit != "off" || parallel != c.parallel {
			t.Errorf("%s: the read saw jit %q, max_parallel_workers_per_gather %q (%v); want off, %s", name, jit, parallel, err, c.parallel)
		}
		if err := db.Pool.QueryRow(ctx, `SELECT current_setting('jit'), current_setting('max_parallel_workers_per_gather')`).Scan(&jit, &parallel); err != nil || jit != "on" || parallel != "2" {
			t.Errorf("%s: after the read jit %q, max_parallel_workers_per_gather %q (%v); want on, 2", name, jit, parallel, err)
		}
	}
}
