package outboxretention

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/jackc/pgx/v5"
)

// Wait is an outbox table whose partition maintenance is waiting for a
// lock another session holds: the latest pass left a drop or an attach
// for the next one (MaintainResult.Deferred), and no pass has done all
// its work since. MaintainPartitions records it (ff_outbox_maintenance_wait,
// migration 0016); Waits reads it.
type Wait struct {
	// Table is the outbox table (outbox.LeaseTable or
	// outbox.CompletionTable).
	Table string `json:"table"`
	// Since is when the first pass of this wait gave up, Last when the
	// latest did (the database's clock), and Passes how many gave up.
	Since  time.Time `json:"since"`
	Last   time.Time `json:"last"`
	Passes int64     `json:"passes"`
	// Age is how long the wait had lasted when Waits read it (the
	// database's clock).
	Age time.Duration `json:"age_ns"`
	// DropsLeft and CreatesLeft are the partitions the latest pass did not
	// drop (MaintainResult.Locked) and did not create (CreateLocked).
	DropsLeft   []string `json:"drops_left,omitempty"`
	CreatesLeft []string `json:"creates_left,omitempty"`
	// LockHolders are the sessions that held the table at the latest pass.
	LockHolders []LockHolder `json:"lock_holders,omitempty"`
}

// String is the operator's line for w: what the maintenance waits for,
// since when and who holds it, e.g. "waiting since 2026-11-26T10:00:01Z
// (3 passes, the latest at 2026-11-26T10:00:03Z) for a lock on
// ff_lease_event_default to create 12 partitions, held by pid 4242 (psql,
// idle in transaction, transaction open 1m0s since
// 2026-11-26T09:59:03Z); the next pass tries again".
func (w Wait) String() string {
	var on []string
	if n := len(w.DropsLeft); n > 0 {
		on = append(on, fmt.Sprintf("%s to drop %s", w.Table, plural(n, "partition")))
	}
	if n := len(w.CreatesLeft); n > 0 {
		on = append(on, fmt.Sprintf("%s to create %s", DefaultPartition(w.Table), plural(n, "partition")))
	}
	held := "no session seen holding it (it may have ended)"
	if len(w.LockHolders) > 0 {
		hs := make([]string, len(w.LockHolders))
		for i, h := range w.LockHolders {
			hs[i] = h.String()
		}
		held = "held by " + strings.Join(hs, ", ")
	}
	return fmt.Sprintf("waiting since %s (%s, the latest at %s) for a lock on %s, %s; the next pass tries again",
		w.Since.UTC().Format(time.RFC3339), plural(int(w.Passes), "pass"), w.Last.UTC().Format(time.RFC3339),
		strings.Join(on, " and on "), held)
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	if strings.HasSuffix(what, "s") {
		return fmt.Sprintf("%d %ses", n, what)
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// recordWait records in tx what a run of MaintainPartitions on table left
// for lack of a lock (res.Deferred), keeping the start of a wait already
// recorded, or clears the table's wait when the run did all its work. A
// busy run (another one was maintaining the table) records nothing.
func recordWait(ctx context.Context, tx pgx.Tx, schema dbutil.Schema, table string, res MaintainResult) error {
	if res.Busy {
		return nil
	}
	if !res.Deferred() {
		_, err := tx.Exec(ctx, schema.SQL(`DELETE FROM {S}ff_outbox_maintenance_wait WHERE stream = $1`), table)
		return dbutil.MapErr(err, "outbox partitions: clearing "+table+"'s maintenance wait")
	}
	holders, err := json.Marshal(res.LockHolders)
	if err != nil {
		return fmt.Errorf("outbox partitions: encoding the lock holders: %w", err)
	}
	_, err = tx.Exec(ctx, schema.SQL(`INSERT INTO {S}ff_outbox_maintenance_wait AS w
		(stream, since_ms, last_ms, passes, drops_left, creates_left, lock_holders)
		VALUES ($1, (extract(epoch FROM clock_timestamp()) * 1000)::bigint, (extract(epoch FROM clock_timestamp()) * 1000)::bigint, 1, $2, $3, $4)
		ON CONFLICT (stream) DO UPDATE SET last_ms = EXCLUDED.last_ms, passes = w.passes + 1,
			drops_left = EXCLUDED.drops_left, creates_left = EXCLUDED.creates_left, lock_holders = EXCLUDED.lock_holders`),
		table, nonNil(res.Locked), nonNil(res.CreateLocked), string(holders))
	return dbutil.MapErr(err, "outbox partitions: recording "+table+"'s maintenance wait")
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// Waits returns the outbox tables whose partition maintenance is waiting
// for a lock (see Wait), by table name; none when every latest pass did
// all its work. It reads one small table and takes no lock a pass waits
// for.
func Waits(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, schema dbutil.Schema) ([]Wait, error) {
	rows, err := q.Query(ctx, schema.SQL(`SELECT stream, since_ms, last_ms, passes,
		(extract(epoch FROM clock_timestamp()) * 1000)::bigint - since_ms, drops_left, creates_left, lock_holders
		FROM {S}ff_outbox_maintenance_wait ORDER BY stream`))
	if err != nil {
		return nil, dbutil.MapErr(err, "outbox partitions: reading the maintenance waits")
	}
	waits, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Wait, error) {
		var w Wait
		var since, last, age int64
		err := r.Scan(&w.Table, &since, &last, &w.Passes, &age, &w.DropsLeft, &w.CreatesLeft, &w.LockHolders)
		w.Since, w.Last, w.Age = time.UnixMilli(since), time.UnixMilli(last), time.Duration(max(age, 0))*time.Millisecond
		return w, err
	})
	if err != nil {
		return nil, dbutil.MapErr(err, "outbox partitions: reading the maintenance waits")
	}
	return waits, nil
}
