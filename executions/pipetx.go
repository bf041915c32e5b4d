package executions

import (
	"context"
	"errors"
	"fmt"

	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pipeTx is a transaction of the coalesced Claim and Complete/Fail/Release
// batches that costs fewer round trips than pgx.BeginFunc's: BEGIN is not
// sent on its own but in front of the transaction's first statement, and
// COMMIT may travel with its last batch (commitWith, the claim's). Everything in
// between runs as in any pgx.Tx, in order, with READ COMMITTED's snapshot
// per statement, so a statement sent after another has returned still sees
// what that one locked or wrote.
//
// A pipeTx that fails is abandoned, not rolled back: its connection is
// left inside the failed (or open) transaction, and pgxpool closes a
// connection released in a transaction instead of reusing it, which ends
// the transaction on the server. Release the connection when done.
type pipeTx struct {
	conn  *pgxpool.Conn
	begun bool
}

var _ pgx.Tx = (*pipeTx)(nil)

// inPipeTx runs fn in a pipeTx on a connection of s's pool; fn must end
// by calling commitWith. After a commit, readers of the outbox are poked.
func (s *Store) inPipeTx(ctx context.Context, doing string, fn func(tx *pipeTx) error) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return dbutil.MapErr(err, doing)
	}
	defer conn.Release()
	tx := &pipeTx{conn: conn}
	if err := fn(tx); err != nil {
		return txErr(err, doing)
	}
	if tx.begun {
		s.waker.Poke()
	}
	return nil
}

// begin puts BEGIN and the Store's planner settings (dbutil.KeyedSettings,
// as beginSQL does) in front of b when the transaction has not begun.
func (t *pipeTx) begin(b *pgx.Batch) *pgx.Batch {
	if t.begun {
		return b
	}
	t.begun = true
	return &pgx.Batch{QueuedQueries: append([]*pgx.QueuedQuery{{SQL: "BEGIN"}, {SQL: dbutil.KeyedSettings}}, b.QueuedQueries...)}
}

// commitWith sends b followed by COMMIT, in one round trip, and reports
// the first error of either. With nothing sent before and nothing in b,
// there is nothing to commit.
//
// Only the server's errors stop COMMIT: an error b's callbacks return (a
// row count a guard did not expect, a scan) is reported after COMMIT has
// run. So b must hold only statements whose failure the server itself
// raises, and callbacks that only read (the claim's statement and its
// scan); writes guarded in Go go before, and COMMIT alone after them
// (Commit).
func (t *pipeTx) commitWith(ctx context.Context, b *pgx.Batch) error {
	if !t.begun && b.Len() == 0 {
		return nil
	}
	b = t.begin(b)
	b.Queue("COMMIT").Exec(func(ct pgconn.CommandTag) error {
		if ct.String() != "COMMIT" {
			return fmt.Errorf("COMMIT answered %s: %w", ct, pgx.ErrTxCommitRollback)
		}
		return nil
	})
	if err := t.conn.SendBatch(ctx, b).Close(); err != nil {
		return commitErr(err, "pipelined transaction")
	}
	return nil
}

// SendBatch implements pgx.Tx; the transaction's first batch carries BEGIN
// and the settings. Read its results by the queued queries' callbacks and
// Close (BEGIN's and the settings' own results come first).
func (t *pipeTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return t.conn.SendBatch(ctx, t.begin(b))
}

// start sends BEGIN and the settings on their own before a statement that
// cannot carry them.
func (t *pipeTx) start(ctx context.Context) error {
	if t.begun {
		return nil
	}
	t.begun = true
	_, err := t.conn.Exec(ctx, beginSQL)
	return err
}

// Exec implements pgx.Tx.
func (t *pipeTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := t.start(ctx); err != nil {
		return pgconn.CommandTag{}, err
	}
	return t.conn.Exec(ctx, sql, args...)
}

// Query implements pgx.Tx.
func (t *pipeTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := t.start(ctx); err != nil {
		return nil, err
	}
	return t.conn.Query(ctx, sql, args...)
}

// QueryRow implements pgx.Tx.
func (t *pipeTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := t.start(ctx); err != nil {
		return errRow{err}
	}
	return t.conn.QueryRow(ctx, sql, args...)
}

// errRow is a pgx.Row whose Scan fails with err.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// CopyFrom implements pgx.Tx.
func (t *pipeTx) CopyFrom(ctx context.Context, table pgx.Identifier, cols []string, src pgx.CopyFromSource) (int64, error) {
	if err := t.start(ctx); err != nil {
		return 0, err
	}
	return t.conn.CopyFrom(ctx, table, cols, src)
}

// Prepare implements pgx.Tx.
func (t *pipeTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	return t.conn.Conn().Prepare(ctx, name, sql)
}

// LargeObjects implements pgx.Tx. Large objects are not used by the store,
// and a pipeTx has none: the value returned must not be used.
func (t *pipeTx) LargeObjects() pgx.LargeObjects { return pgx.LargeObjects{} }

// Conn implements pgx.Tx.
func (t *pipeTx) Conn() *pgx.Conn { return t.conn.Conn() }

// errNested: a pipeTx has no savepoints (nothing of the store nests one in
// the batches that use it).
var errNested = errors.New("executions: a pipelined transaction does not nest")

// Begin implements pgx.Tx; a pipeTx does not nest.
func (t *pipeTx) Begin(context.Context) (pgx.Tx, error) { return nil, errNested }

// Commit implements pgx.Tx: commitWith an empty batch.
func (t *pipeTx) Commit(ctx context.Context) error { return t.commitWith(ctx, &pgx.Batch{}) }

// Rollback implements pgx.Tx.
func (t *pipeTx) Rollback(ctx context.Context) error {
	if !t.begun {
		return nil
	}
	t.begun = false
	_, err := t.conn.Exec(ctx, "ROLLBACK")
	return err
}
