package dbutil

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// PlannerSettings turns off what a bounded read (an index read in order
// under a LIMIT) must not be planned with: bitmap scans and sorts, which
// read every matching row before the limit, and JIT, which the sorts'
// cost would otherwise trigger (tens of milliseconds to compile); and
// parallel workers (NoParallel). It is set with set_config(…, true) for
// one statement only, by ScopedRead.
const PlannerSettings = OrderedSettings + `, ` + NoParallel

// OrderedSettings are PlannerSettings with parallel workers left on: the
// stream pages' (package subscribe), whose catch-up over a partitioned
// outbox read half as fast without them.
const OrderedSettings = `SELECT set_config('enable_bitmapscan', 'off', true), set_config('enable_sort', 'off', true), ` + NoJIT

// BoundedSettings are the settings of a read of a bounded handful of rows
// whose plan is left to the planner (the scanners' audits, which count at
// most pipeline.AuditCap+1 rows and need a bitmap scan to read an OR by
// index): no JIT (NoJIT) and no parallel workers (NoParallel).
const BoundedSettings = `SELECT ` + NoJIT + `, ` + NoParallel

// NoJIT is the set_config call (in a SELECT list) that keeps a statement
// from being compiled by JIT. ffriver's reads and writes each touch a
// bounded handful of rows, and a plan's estimate past jit_above_cost
// (100,000 by default: a bitmap scan over an estimate of tens of thousands
// of rows reaches it at 10,000,000 executions) makes Postgres compile it
// first: about 11 ms on the 2-core VM, 28-35 ms on a new connection, which
// loads the JIT provider too, for a read of 0.1 ms (the delayed_promoter
// audit in ffctl status, 28 November 2026).
const NoJIT = `set_config('jit', 'off', true)`

// NoParallel is the set_config call (in a SELECT list) that keeps a
// statement from starting parallel workers. The statements run under
// ffriver's settings (PlannerSettings, KeyedSettings) each read a bounded
// handful of rows, and starting workers costs more than reading them: the
// attempt_timeout scanner's due read and its audit took 10-12 ms each with
// 2 workers launched (on 1,000,000 executions), 0.1-0.7 ms without, and
// were a third of ffctl status (auto_explain, the 2-core VM).
const NoParallel = `set_config('max_parallel_workers_per_gather', '0', true)`

// KeyedSettings are the settings of a transaction whose statements find
// every row they read or write by key through an index (the executions
// Store's own transactions: claims, finishes, renewals, operator actions;
// and the item engine's, which share statements with them): no sequential
// or bitmap scan, no hash or merge join (each would read a whole table or
// index to meet a handful of keys: a join is a nested loop over the keys,
// probing an index), no JIT, which the cost of a plan left with a
// disabled node would otherwise trigger, and no parallel workers
// (NoParallel). A statement under
// them joins no two unindexed sets (CTEs with CTEs), which would become a
// nested loop of one over the other.
//
// Without them a plan chosen while a table was small is kept: a prepared
// statement's generic plan lasts as long as its connection (until an
// ANALYZE of a table it reads), and one chosen when ff_attempt held a few
// hundred rows scanned or merged the whole table for every batch of keys
// as it grew (ffctl bench lifecycle on the 2-core machine, autovacuum off:
// 773 sequential scans of ff_attempt, of up to 8 ms each, in one run; the
// runner 20–37 % slower at 50,000 executions).
//
// They are set with set_config(…, true), so they end with the
// transaction. A cached plan is kept whatever the settings of the
// transactions that reuse it: a statement planned without them (run in a
// caller's transaction first, on the same connection) keeps that plan.
const KeyedSettings = `SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true), set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true), ` + NoJIT + `, ` + NoParallel

// scopedSavepoint names the savepoint ScopedRead opens in a transaction.
const scopedSavepoint = "ffriver_scoped_read"

// ScopedRead runs the query sql with args after the statement settings (of
// set_config(…, true) calls, such as PlannerSettings) and passes its rows
// to read, in a transaction of its own that it rolls back so the settings
// end with it: BEGIN … ROLLBACK on a pool or an idle connection, a
// savepoint rolled back and released in a transaction (a pgx.Tx, or a
// *pgx.Conn on which one is open). The statements are
// pipelined in one batch: one round trip, where a transaction opened,
// set, read and rolled back took four. A q that cannot send a batch runs
// the query as it is, without the settings.
func ScopedRead(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, settings, sql string, args []any, read func(pgx.Rows) error) error {
	b, ok := q.(Batcher)
	if !ok {
		rows, err := q.Query(ctx, sql, args...)
		return readRows(rows, err, read)
	}
	return ScopedBatch(ctx, b, settings, func(batch *pgx.Batch) { batch.Queue(sql, args...) }, func(br pgx.BatchResults) error {
		rows, err := br.Query()
		return readRows(rows, err, read)
	})
}

// readRows runs read over rows, the result of a query that returned err,
// closes them and returns the first error: the query's, read's or the
// rows'.
func readRows(rows pgx.Rows, err error, read func(pgx.Rows) error) error {
	if err != nil {
		return err
	}
	err = read(rows)
	rows.Close()
	if err == nil {
		err = rows.Err()
	}
	return err
}

// Batcher is what sends a batch: a pool, a connection, a transaction.
type Batcher interface {
	SendBatch(context.Context, *pgx.Batch) pgx.BatchResults
}

// ScopedBatch is ScopedRead for several statements: queue adds them to the
// batch after the settings, and read reads their results, in order, all
// in the one round trip and the one transaction (or savepoint) the
// settings end with.
func ScopedBatch(ctx context.Context, q Batcher, settings string, queue func(*pgx.Batch), read func(pgx.BatchResults) error) error {
	var conn *pgx.Conn // the connection of a transaction q is in
	switch c := q.(type) {
	case pgx.Tx:
		conn = c.Conn()
	case *pgx.Conn:
		if c.PgConn().TxStatus() != 'I' {
			conn = c
		}
	}
	open, end := "BEGIN", []string{"ROLLBACK"}
	if conn != nil {
		open = "SAVEPOINT " + scopedSavepoint
		end = []string{"ROLLBACK TO SAVEPOINT " + scopedSavepoint, "RELEASE SAVEPOINT " + scopedSavepoint}
	}
	batch := &pgx.Batch{}
	batch.Queue(open)
	batch.Queue(settings)
	queue(batch)
	for _, s := range end {
		batch.Queue(s)
	}
	err := runScoped(q.SendBatch(ctx, batch), len(end), read)
	if conn != nil && err != nil && conn.PgConn().TxStatus() == 'E' {
		// The server stopped at an error, before the savepoint was
		// rolled back: roll it back here, so that the caller's
		// transaction goes on as it was (a failed read does not abort
		// it). If this fails too, the transaction is broken anyway.
		for _, s := range end {
			if _, rerr := conn.Exec(ctx, s); rerr != nil {
				break
			}
		}
	}
	return err
}

// runScoped reads the results of ScopedBatch's batch: the open statement,
// the settings, the queued statements (to read) and end statements.
func runScoped(br pgx.BatchResults, end int, read func(pgx.BatchResults) error) (err error) {
	defer func() {
		if cerr := br.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	for range 2 { // the open statement and the settings
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	if err := read(br); err != nil {
		return err
	}
	for range end {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("ending the scoped read: %w", err)
		}
	}
	return nil
}
