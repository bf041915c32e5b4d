package fftest

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DB runs a test's plain SQL on a pool. Its helpers fail the test on an
// error (with TB.Fatalf: call them from the test's goroutine). A Kit has
// one on its schema; build one directly for a pool of your own:
// fftest.DB{TB: t, Pool: pool}.
type DB struct {
	// TB is the test the helpers fail.
	TB testing.TB
	// Ctx is the context of every query (context.Background() when nil, so
	// that the helpers work in a Cleanup function too).
	Ctx context.Context
	// Pool runs the queries.
	Pool *pgxpool.Pool
	// Timeout, when positive, bounds each call of a helper: a query, an
	// InTx as a whole, a Kit's store call.
	Timeout time.Duration
}

// Strings runs q, whose rows are one text column, and returns the values
// in row order.
func (d *DB) Strings(q string, args ...any) []string {
	d.TB.Helper()
	ctx, cancel := d.queryCtx()
	defer cancel()
	rows, err := d.Pool.Query(ctx, q, args...)
	if err != nil {
		d.TB.Fatalf("%s: %v", q, err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		d.TB.Fatalf("%s: %v", q, err)
	}
	return out
}

// Count runs q, which returns one row of one integer column (a count(*),
// say), and returns the integer.
func (d *DB) Count(q string, args ...any) int {
	d.TB.Helper()
	ctx, cancel := d.queryCtx()
	defer cancel()
	var n int
	if err := d.Pool.QueryRow(ctx, q, args...).Scan(&n); err != nil {
		d.TB.Fatalf("%s: %v", q, err)
	}
	return n
}

// Exec runs the statement q.
func (d *DB) Exec(q string, args ...any) {
	d.TB.Helper()
	ctx, cancel := d.queryCtx()
	defer cancel()
	if _, err := d.Pool.Exec(ctx, q, args...); err != nil {
		d.TB.Fatalf("%s: %v", q, err)
	}
}

// InTx runs fn in a transaction, commits it when fn returns nil and rolls
// it back otherwise, and returns the error of fn or of the commit: a test
// may expect one, so InTx does not fail the test.
func (d *DB) InTx(fn func(tx pgx.Tx) error) error {
	d.TB.Helper()
	ctx, cancel := d.queryCtx()
	defer cancel()
	return pgx.BeginFunc(ctx, d.Pool, fn)
}

// ctx returns Ctx, or context.Background() when it is nil.
func (d *DB) ctx() context.Context {
	if d.Ctx == nil {
		return context.Background()
	}
	return d.Ctx
}

// queryCtx returns the context of one query: ctx, bounded by Timeout.
func (d *DB) queryCtx() (context.Context, context.CancelFunc) {
	if d.Timeout > 0 {
		return context.WithTimeout(d.ctx(), d.Timeout)
	}
	return d.ctx(), func() {}
}
