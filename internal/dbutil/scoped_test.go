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
