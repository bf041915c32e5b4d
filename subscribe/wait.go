package subscribe

import (
	"context"
	"fmt"
	"time"

	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/jackc/pgx/v5"
)

// WaitNoticeAfter is how long a writer of the outbox must have been open
// before a stream reports it, and how often an idle stream looks.
const WaitNoticeAfter = time.Second

// Wait is an open transaction that wrote to a stream's outbox table: its
// events reach the stream once it commits.
type Wait struct {
	// Stream is the outbox table.
	Stream string
	// PID of the session (0 for a prepared transaction).
	PID int
	// Prepared is the gid of a prepared (two-phase) transaction; "" for a
	// session's.
	Prepared string
	// Xact is the transaction id as pg_stat_activity shows it (32 bits).
	Xact int64
	// Database, Application and State of the session, as
	// pg_stat_activity shows them.
	Database, Application, State string
	// Age is how long the transaction had been open when the stream looked.
	Age time.Duration
	// Done is true in the notice that the writer has ended.
	Done bool
}

// String names the writer the way ffctl status does.
func (w Wait) String() string {
	who := fmt.Sprintf("pid %d", w.PID)
	if w.Prepared != "" {
		who = "prepared transaction " + w.Prepared
	}
	if w.Done {
		return fmt.Sprintf("%s (xid %d) ended: its %s events are on their way", who, w.Xact, w.Stream)
	}
	return fmt.Sprintf("%s (xid %d, %s, database %s, %s) has written to %s and has been open for %s: its events wait for it to commit",
		who, w.Xact, w.Application, w.Database, w.State, w.Stream, w.Age.Round(time.Millisecond))
}

// Querier is what OpenWriters and Consumers read with: a pool, a connection or a
// transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// openWritersSQL finds the transactions holding a transaction id and a
// RowExclusiveLock on the table ($1, qualified) open for at least $2 ms:
// sessions, and prepared transactions (whose locks belong to no backend).
const openWritersSQL = `
SELECT a.pid, '' AS prepared, a.backend_xid::text::bigint, COALESCE(a.datname, ''), COALESCE(a.application_name, ''),
       COALESCE(a.state, ''), (extract(epoch FROM clock_timestamp() - a.xact_start) * 1000)::bigint
FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'relation' AND l.relation = $1::regclass AND l.mode = 'RowExclusiveLock' AND l.granted
  AND a.backend_xid IS NOT NULL AND a.pid <> pg_backend_pid()
  AND a.xact_start <= clock_timestamp() - $2 * interval '1 millisecond'
UNION ALL
SELECT 0, p.gid, p.transaction::text::bigint, p.database, '', 'prepared',
       (extract(epoch FROM clock_timestamp() - p.prepared) * 1000)::bigint
FROM pg_prepared_xacts p
WHERE p.prepared <= clock_timestamp() - $2 * interval '1 millisecond'
  AND EXISTS (SELECT 1 FROM pg_locks l WHERE l.pid IS NULL AND l.locktype = 'relation' AND l.relation = $1::regclass
              AND l.virtualtransaction = '-1/' || p.transaction::text)
ORDER BY 7 DESC`

// OpenWriters returns the transactions that wrote to the outbox table
// (ff_lease_event or ff_completion_event) of schema and have been open for
// at least olderThan, oldest first: the events they wrote wait for them.
func OpenWriters(ctx context.Context, q Querier, schema, table string, olderThan time.Duration) ([]Wait, error) {
	s, err := dbutil.ParseSchema(schema)
	if err != nil {
		return nil, err
	}
	rel := s.SQL("{S}" + table)
	rows, err := q.Query(ctx, openWritersSQL, rel, olderThan.Milliseconds())
	if err != nil {
		return nil, dbutil.MapErr(err, "subscribe: looking for open writers")
	}
	var out []Wait
	for rows.Next() {
		w := Wait{Stream: table}
		var ageMs int64
		if err := rows.Scan(&w.PID, &w.Prepared, &w.Xact, &w.Database, &w.Application, &w.State, &ageMs); err != nil {
			rows.Close()
			return nil, dbutil.MapErr(err, "subscribe: looking for open writers")
		}
		w.Age = time.Duration(ageMs) * time.Millisecond
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, dbutil.MapErr(err, "subscribe: looking for open writers")
	}
	return out, nil
}

// waitKey identifies a writer across looks.
type waitKey struct {
	pid      int
	prepared string
	xact     int64
}

// checkWaits tells OnWait about writers that appeared or ended since the
// last look, at most every WaitNoticeAfter.
func (r *reader[E]) checkWaits(ctx context.Context, q *pgx.Conn) error {
	if r.cfg.onWait == nil || time.Since(r.waitsAt) < WaitNoticeAfter {
		return nil
	}
	r.waitsAt = time.Now()
	ws, err := OpenWriters(ctx, q, string(r.cfg.schema), r.table.name, WaitNoticeAfter)
	if err != nil {
		return err
	}
	seen := make(map[waitKey]bool, len(ws))
	for _, w := range ws {
		k := waitKey{w.PID, w.Prepared, w.Xact}
		seen[k] = true
		if _, ok := r.waits[k]; !ok {
			r.cfg.onWait(w)
		}
		r.waits[k] = w
	}
	for k, w := range r.waits {
		if !seen[k] {
			delete(r.waits, k)
			w.Done = true
			r.cfg.onWait(w)
		}
	}
	return nil
}
