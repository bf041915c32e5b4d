// Package outboxretention is how ffriver deletes old outbox events, the
// outbox_retention scanner's job: the time partitions of both outbox tables
// (created ahead, dropped whole) and the row trim of their DEFAULT
// partitions, each recorded in ff_outbox_trim so that a stream positioned
// before a deleted event reports a gap. It is internal: only the pipeline,
// ffctl and the tests call it.
//
// # Maintenance never makes anyone wait
//
// Creating, attaching and dropping a partition need locks that conflict
// with what a reader or a writer of the outbox holds: a drop locks the
// table ACCESS EXCLUSIVE, an ATTACH PARTITION locks the DEFAULT partition
// ACCESS EXCLUSIVE (it must check that none of its rows belongs in the new
// range). A lock request that waits sits in the lock queue, and every
// query of the table that arrives after it waits behind it, even one that
// would not conflict with the transaction it waits for. So a transaction
// that holds the table for long (a session idle in BEGIN; SELECT count(*)
// FROM ff_lease_event, a pg_dump, a long ffctl exec list) would stop the
// streams, the writers and the execution view for as long as it stays
// open, if maintenance waited for it.
//
// It does not wait: every step of a pass that takes such a lock runs in a
// savepoint under a lock_timeout (Maintenance.LockTimeout, 200 ms by
// default), one helper for attach and drop alike, and a step whose lock
// times out is rolled back and left for the next pass. Readers and writers
// wait at most that long behind each such wait (a pass that has both to
// drop and to attach may make a query that arrives during both wait
// twice). The pass itself does not fail: its
// result names the partitions it did not create (CreateLocked) or drop
// (Locked) and the sessions that held the table (LockHolders), and the
// outbox_retention job records that in its output and logs it. The pass
// also records the wait in ff_outbox_maintenance_wait (since when passes
// give up, how many did, the latest one's holders), and the first pass
// that does all its work clears it: Waits reads it for ffctl status and
// the metrics. Nothing is
// lost by a pass that gave up: partitions are created at least two minutes
// (three widths) ahead of the clock, so the next passes have that long to
// get their lock, and a row written where no partition covers goes to the
// DEFAULT partition (writers never fail for want of a partition). The
// other DDL of a pass queues no one: CREATE TABLE … (LIKE table) takes an
// ACCESS SHARE lock on the table, which only an ACCESS EXCLUSIVE lock
// conflicts with; a drop's SHARE lock on its partition conflicts only with
// writers of that partition (none: its range is past) and vacuum, and is
// taken before the table's ACCESS EXCLUSIVE lock, never while holding it.
//
// What a pass still costs readers after it got its locks: the scan of the
// DEFAULT partition by ATTACH PARTITION (its rows are only those no
// partition covered, trimmed row by row), and the drops, until the job's
// transaction commits.
package outboxretention

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/outbox"
	"github.com/jackc/pgx/v5"
)

// Time partitions (migration 0015): each outbox table is partitioned by
// range of written_at_ms, the database's clock when a row was inserted.
// MaintainPartitions, run by the outbox_retention scanner's job, creates
// partitions ahead of the clock and drops the ones whose every row is
// older than the retention, recording each drop in ff_outbox_trim as a row
// trim is recorded. Rows no time partition covers (written before the first
// run, or while none runs) go to the table's DEFAULT partition,
// <table>_default, whose old rows are trimmed row by row.

// DefaultPartition returns the name of table's DEFAULT partition.
func DefaultPartition(table string) string { return table + "_default" }

// PartitionWidth returns the width of the time partitions kept for a
// retention: the widest of 1 day, 6 h, 1 h, 10 min, 1 min, 10 s and 1 s
// that is at most retention/4 (1 s below 4 s). An event is dropped between
// retention and retention plus the width after it was written: 7 days of
// retention keep day partitions (7 to 8 days of events), 5 minutes keep
// minute partitions.
//
// At most a quarter: four to eight partitions hold the retained events,
// and a drop removes at most about a quarter of them.
func PartitionWidth(retention time.Duration) time.Duration {
	for _, w := range [...]time.Duration{24 * time.Hour, 6 * time.Hour, time.Hour, 10 * time.Minute, time.Minute, 10 * time.Second} {
		if w <= retention/4 {
			return w
		}
	}
	return time.Second
}

// partitionsAhead returns how far past the clock the partitions of width w
// reach after a maintenance run: three widths, at least two minutes (two
// runs of the scanner at its default interval), and at most 64 partitions.
func partitionsAhead(w time.Duration) time.Duration {
	return min(max(3*w, 2*time.Minute), 64*w)
}

// startMargin is how far in the future every partition created starts at
// least: rows written until then are in the DEFAULT partition (ATTACH
// PARTITION must not find any of its rows inside the new range), and the
// maintenance transaction commits before the clock reaches it (an insert
// of a row of the range that ran before the commit would fail; see
// createPartitions).
const startMargin = 5 * time.Second

// DefaultLockTimeout bounds how long a step of a maintenance pass waits
// for a lock that readers or writers of the table queue behind: a drop's
// ACCESS EXCLUSIVE lock on the table, an attach's ACCESS EXCLUSIVE lock on
// the DEFAULT partition. A step that times out is left for the next run.
const DefaultLockTimeout = 200 * time.Millisecond

// shareLockTimeout bounds the wait of a drop for its partition's SHARE
// lock: its last writers, and an autovacuum of it, which the server
// cancels after deadlock_timeout (1 s by default).
const shareLockTimeout = 5 * time.Second

// maxCreate bounds the partitions one run creates.
const maxCreate = 64

// Maintenance says what MaintainPartitions does to one outbox table.
type Maintenance struct {
	// Table is outbox.LeaseTable or outbox.CompletionTable.
	Table string
	// Width of the partitions to create (PartitionWidth of the retention);
	// 0 creates none.
	Width time.Duration
	// Ahead is how far past the database's clock the partitions reach
	// after the run (default: three widths, at least two minutes, at most
	// 64 partitions).
	Ahead time.Duration
	// CutoffMs: partitions whose every row was written before it are
	// dropped (0 drops none), unless a named consumer holds them.
	CutoffMs int64
	// NowMs is the clock a named consumer's maximum lag is measured on
	// (the scanner's, as for the row trim).
	NowMs int64
	// LockTimeout bounds each wait of an attach or a drop for a lock that
	// readers or writers queue behind (default DefaultLockTimeout).
	LockTimeout time.Duration
}

// MaintainResult says what a run did.
type MaintainResult struct {
	// Created and Dropped name the partitions created and dropped.
	Created []string `json:"created,omitempty"`
	Dropped []string `json:"dropped,omitempty"`
	// DroppedEvents is how many events the dropped partitions held.
	DroppedEvents int64 `json:"dropped_events,omitempty"`
	// Held names the partitions old enough to drop that are kept because
	// a named consumer has not acknowledged one of their events (and its
	// position is younger than its maximum lag).
	Held []string `json:"held,omitempty"`
	// Locked names the partitions whose drop did not get its locks within
	// the timeout; the next run tries again.
	Locked []string `json:"locked,omitempty"`
	// CreateLocked names the partitions this run did not create because
	// attaching the first of them did not get its locks within the
	// timeout; the next run tries again.
	CreateLocked []string `json:"create_locked,omitempty"`
	// LockHolders are the other sessions that held a lock on the table or
	// its partitions when a step gave up (Locked or CreateLocked set), the
	// oldest transactions first, at most maxLockHolders.
	LockHolders []LockHolder `json:"lock_holders,omitempty"`
	// Busy is set when another transaction was maintaining the table's
	// partitions: this run did nothing.
	Busy bool `json:"busy,omitempty"`
}

// Deferred reports whether the run left a drop or a creation for the next
// run because another session held the table.
func (r MaintainResult) Deferred() bool { return len(r.Locked)+len(r.CreateLocked) > 0 }

// LockHolder is a session that held a lock on an outbox table or one of
// its partitions when maintenance gave up waiting (pg_stat_activity).
type LockHolder struct {
	// PID is the session's backend process id (pg_terminate_backend's).
	PID int32 `json:"pid"`
	// State is the session's state ("idle in transaction", "active"; empty
	// when the role may not see it).
	State string `json:"state,omitempty"`
	// Application is the session's application_name.
	Application string `json:"application_name,omitempty"`
	// XactAgeMs is how long its transaction had been open.
	XactAgeMs int64 `json:"xact_age_ms"`
	// XactStart is when its transaction began (zero when the role may not
	// see it).
	XactStart time.Time `json:"xact_start,omitzero"`
}

// String describes the session for an operator: pid 4242 (psql, idle in
// transaction, transaction open 1m0s since 2026-11-26T10:00:00Z), with
// "state hidden" and no start for a session the role may not see.
func (h LockHolder) String() string {
	open := "transaction open " + (time.Duration(h.XactAgeMs) * time.Millisecond).Round(time.Second).String()
	if !h.XactStart.IsZero() {
		open += " since " + h.XactStart.UTC().Format(time.RFC3339)
	}
	return fmt.Sprintf("pid %d (%s, %s, %s)", h.PID, cmp.Or(h.Application, "no application_name"), cmp.Or(h.State, "state hidden"), open)
}

// maxLockHolders bounds MaintainResult.LockHolders.
const maxLockHolders = 3

// tableOf checks table and returns it.
func tableOf(table string) (string, error) {
	switch table {
	case outbox.LeaseTable, outbox.CompletionTable:
		return table, nil
	}
	return "", ff.Validationf("table", "%q: want %q or %q", table, outbox.LeaseTable, outbox.CompletionTable)
}

// maintenanceLockKey is the high half of the key of the transaction-level
// advisory lock a maintenance run holds; the low half is the table's oid
// (an oid may not fit an int4, so not the two-key form).
const maintenanceLockKey = 0x66666f70 // "ffop"

// MaintainPartitions runs one maintenance of m.Table's time partitions
// inside tx: it drops those whose rows were all written before m.CutoffMs,
// then creates partitions so that they reach m.Ahead past the database's
// clock. Run it as the last work of its transaction and commit soon after:
// a drop holds an ACCESS EXCLUSIVE lock on the table until commit, and a
// partition created is locked until then too (queries of the table wait
// for it).
//
// Each dropped partition is recorded in ff_outbox_trim: one row per run of
// its rows' transaction ids that spans no transaction still running, with
// the count and the ranges of event ids and times, exactly as a row trim
// records what it deletes, so a stream whose position has not seen them
// gets a gap error. A partition holding an event a named consumer has not
// acknowledged is kept while the consumer's position is younger than its
// maximum lag (ff_stream_consumer), as a row trim keeps the event.
//
// No step waits longer than m.LockTimeout for a lock that readers or
// writers of the table would queue behind (see the package doc): a drop or
// an attach that did not get its locks in time is rolled back to its
// savepoint and listed in Locked or CreateLocked, with the sessions that
// held the table in LockHolders, and the run returns no error for it; the
// next run tries again. Such a run records the wait in tx
// (ff_outbox_maintenance_wait, read by Waits: ffctl status and the
// metrics show it); a run that left nothing clears it.
//
// Concurrent runs on one table do not wait for each other: a run that
// finds another one in progress returns with Busy set.
func MaintainPartitions(ctx context.Context, tx pgx.Tx, schema dbutil.Schema, m Maintenance) (MaintainResult, error) {
	var res MaintainResult
	table, err := tableOf(m.Table)
	if err != nil {
		return res, err
	}
	if m.Width < 0 || (m.Width > 0 && m.Width < time.Second) {
		return res, ff.Validationf("width", "%s: want 0 (create none) or at least 1s", m.Width)
	}
	if m.Ahead < 0 {
		return res, ff.Validationf("ahead", "%s is negative", m.Ahead)
	}
	if m.Ahead == 0 {
		m.Ahead = partitionsAhead(m.Width)
	}
	if m.LockTimeout <= 0 {
		m.LockTimeout = DefaultLockTimeout
	}
	var got bool
	if err := tx.QueryRow(ctx, schema.SQL(`SELECT pg_try_advisory_xact_lock(($1::bigint << 32) | '{S}`+table+`'::regclass::oid::bigint)`), maintenanceLockKey).Scan(&got); err != nil {
		return res, dbutil.MapErr(err, "outbox partitions: taking the maintenance lock")
	}
	if !got {
		res.Busy = true
		return res, nil
	}
	// Drops first: a partition this transaction created is locked until
	// it commits, and a query of the table that waits for it while holding
	// the table would deadlock with a drop's wait for the table.
	if m.CutoffMs != 0 {
		if err := dropPartitions(ctx, tx, schema, table, m, &res); err != nil {
			return res, err
		}
	}
	if m.Width > 0 {
		if err := createPartitions(ctx, tx, schema, table, m, len(res.Dropped) > 0, &res); err != nil {
			return res, err
		}
	}
	if res.Deferred() {
		if res.LockHolders, err = lockHolders(ctx, tx, schema, table); err != nil {
			return res, err
		}
	}
	if err := recordWait(ctx, tx, schema, table, res); err != nil {
		return res, err
	}
	return res, nil
}

// createPartitions creates the partitions of width m.Width that the table
// needs to reach m.Ahead past the database's clock, each in a savepoint
// under m.LockTimeout: once an attach times out, the rest are listed in
// res.CreateLocked, not tried.
//
// After a drop (afterDrop), which holds the table's ACCESS EXCLUSIVE lock
// until the transaction commits, it creates nothing while the partitions
// still reach half of m.Ahead: every step taken then would keep the
// table's readers and writers waiting (on two busy cores, a stream waited
// 4.4 s behind a drop and the creates after it). The next run creates them.
func createPartitions(ctx context.Context, tx pgx.Tx, schema dbutil.Schema, table string, m Maintenance, afterDrop bool, res *MaintainResult) error {
	var nowMs int64
	var maxHi *int64
	if err := tx.QueryRow(ctx, schema.SQL(`SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint,
		(SELECT max(hi_ms) FROM {S}ff_outbox_partition WHERE stream = $1 AND lo_ms IS NOT NULL)`), table).Scan(&nowMs, &maxHi); err != nil {
		return dbutil.MapErr(err, "outbox partitions: reading "+table+"'s partitions")
	}
	if afterDrop && maxHi != nil && *maxHi-nowMs >= m.Ahead.Milliseconds()/2 {
		return nil
	}
	began := time.Now()
	wMs := m.Width.Milliseconds()
	target := nowMs + m.Ahead.Milliseconds()
	// Every range created starts at least startMargin ahead of the clock:
	// the DEFAULT partition may hold rows written up to now, and an insert
	// of a row of the range that runs before this transaction commits is
	// routed to the DEFAULT partition (the attach is not visible to it
	// yet), waits for the attach's lock on it, and then fails its
	// partition constraint (SQLSTATE 23514) once the range is the new
	// partition's. The newest range is continued only when it ends far
	// enough ahead; otherwise the ranges in between stay the DEFAULT
	// partition's (its old rows are trimmed row by row).
	lo := nowMs + startMargin.Milliseconds()
	if maxHi != nil && *maxHi > lo {
		lo = *maxHi
	}
	for n := 0; lo < target && n < maxCreate; n++ {
		// The transaction must commit before the clock reaches its first
		// range: on a busy server, leave the rest to the next run.
		if n > 0 && time.Since(began) > startMargin/2 {
			break
		}
		hi := (lo/wMs + 1) * wMs
		if hi-lo < wMs/2 {
			hi += wMs
		}
		if len(res.CreateLocked) > 0 {
			res.CreateLocked = append(res.CreateLocked, partitionName(table, lo))
			lo = hi
			continue
		}
		var name string
		locked, err := underLockTimeout(ctx, tx, m.LockTimeout, func(sp pgx.Tx) error {
			var err error
			name, err = AttachPartition(ctx, sp, schema, table, lo, hi)
			return err
		})
		if err != nil {
			return err
		}
		if locked {
			res.CreateLocked = append(res.CreateLocked, partitionName(table, lo))
		} else {
			res.Created = append(res.Created, name)
		}
		lo = hi
	}
	return nil
}

// AttachPartition creates the partition of table (outbox.LeaseTable or
// outbox.CompletionTable) for rows written in [loMs, hiMs), attaches it and
// registers it in ff_outbox_partition, inside tx, and returns its name. It
// waits for its locks as tx's lock_timeout says: MaintainPartitions calls
// it in a savepoint under its own. MaintainPartitions creates partitions
// with it; call it yourself only to
// add a range no partition covers and the DEFAULT partition holds no row
// of (ffctl bench scale builds a month of partitions with it): the attach
// fails otherwise, naming the partition.
func AttachPartition(ctx context.Context, tx pgx.Tx, schema dbutil.Schema, table string, loMs, hiMs int64) (string, error) {
	table, err := tableOf(table)
	if err != nil {
		return "", err
	}
	if hiMs-loMs < 500 {
		return "", ff.Validationf("range", "[%d, %d) is less than half a second wide", loMs, hiMs)
	}
	name := partitionName(table, loMs)
	// CREATE TABLE … PARTITION OF would lock the whole table ACCESS
	// EXCLUSIVE; ATTACH takes SHARE UPDATE EXCLUSIVE (writers go on), and
	// locks and reads only the DEFAULT partition.
	if _, err := tx.Exec(ctx, schema.SQL(fmt.Sprintf(`CREATE TABLE {S}%s (LIKE {S}%s INCLUDING DEFAULTS)`, ident(name), table))); err != nil {
		return "", dbutil.MapErr(err, "outbox partitions: creating "+name)
	}
	if _, err := tx.Exec(ctx, schema.SQL(fmt.Sprintf(`ALTER TABLE {S}%s ATTACH PARTITION {S}%s FOR VALUES FROM (%d) TO (%d)`, table, ident(name), loMs, hiMs))); err != nil {
		return "", dbutil.MapErr(err, "outbox partitions: attaching "+name)
	}
	if _, err := tx.Exec(ctx, schema.SQL(`INSERT INTO {S}ff_outbox_partition (stream, partition_name, lo_ms, hi_ms, written_before_ms)
		VALUES ($1, $2, $3, $4, $4)`), table, name, loMs, hiMs); err != nil {
		return "", dbutil.MapErr(err, "outbox partitions: recording "+name)
	}
	return name, nil
}

// partitionName names the partition of table starting at loMs (UTC, to
// the second: partitions are at least half a second wide).
func partitionName(table string, loMs int64) string {
	return table + "_p" + time.UnixMilli(loMs).UTC().Format("20060102_150405")
}

// ident quotes a name built from the table's and a timestamp: letters,
// digits and underscores only, so it needs no quoting; quoted anyway.
func ident(name string) string { return `"` + name + `"` }

// dropPartitions drops the table's partitions whose rows were all written
// before m.CutoffMs, oldest first: one held by a consumer is kept (Held);
// the others are recorded and dropped together in one savepoint under
// m.LockTimeout (underLockTimeout), and listed in Locked when a lock times
// out, for the next run.
//
// Whatever the cutoff, a partition is dropped only once the database's
// clock is a second past its range: a cutoff from a clock ahead of the
// database's never drops the partition being written.
func dropPartitions(ctx context.Context, tx pgx.Tx, schema dbutil.Schema, table string, m Maintenance, res *MaintainResult) error {
	rows, err := tx.Query(ctx, schema.SQL(`SELECT partition_name FROM {S}ff_outbox_partition
		WHERE stream = $1 AND written_before_ms <= $2
		  AND written_before_ms <= (extract(epoch FROM clock_timestamp()) * 1000)::bigint - 1000
		ORDER BY hi_ms`), table, m.CutoffMs)
	if err != nil {
		return dbutil.MapErr(err, "outbox partitions: reading "+table+"'s old partitions")
	}
	old, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return dbutil.MapErr(err, "outbox partitions: reading "+table+"'s old partitions")
	}
	var drop []string
	for _, name := range old {
		var held bool
		if err := tx.QueryRow(ctx, schema.SQL(fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM {S}ff_stream_consumer c
			WHERE c.stream = $1 AND c.position_at_ms >= $2 - c.max_lag_ms
			  AND EXISTS (SELECT 1 FROM {S}%s x WHERE `+UnackedSQL+`))`, ident(name))), table, m.NowMs).Scan(&held); err != nil {
			if dbutil.IsUndefinedTable(err) {
				// Dropped by hand: forget it.
				if _, err := tx.Exec(ctx, schema.SQL(`DELETE FROM {S}ff_outbox_partition WHERE stream = $1 AND partition_name = $2`), table, name); err != nil {
					return dbutil.MapErr(err, "outbox partitions: forgetting "+name)
				}
				continue
			}
			return dbutil.MapErr(err, "outbox partitions: looking for consumers that hold "+name)
		}
		if held {
			res.Held = append(res.Held, name)
			continue
		}
		drop = append(drop, name)
	}
	if len(drop) == 0 {
		return nil
	}
	// Every partition is locked and recorded before the table is locked:
	// a wait for a partition's SHARE lock (up to shareLockTimeout) while
	// holding the table's ACCESS EXCLUSIVE lock would make every reader
	// wait that long.
	var ready []string
	var events int64
	locked, err := underLockTimeout(ctx, tx, m.LockTimeout, func(sp pgx.Tx) error {
		ready, events = nil, 0
		for _, name := range drop {
			var n int64
			locked, err := underLockTimeout(ctx, sp, shareLockTimeout, func(sp pgx.Tx) error {
				var err error
				n, err = recordPartition(ctx, sp, schema, table, name)
				return err
			})
			if err != nil {
				return err
			}
			if locked {
				res.Locked = append(res.Locked, name)
				continue
			}
			ready = append(ready, name)
			events += n
		}
		if len(ready) == 0 {
			return nil
		}
		return dropRecorded(ctx, sp, schema, table, ready)
	})
	if err != nil {
		return err
	}
	if locked {
		res.Locked = append(res.Locked, ready...)
		return nil
	}
	res.Dropped = append(res.Dropped, ready...)
	res.DroppedEvents += events
	return nil
}

// recordPartition records what the partition holds in ff_outbox_trim and
// returns how many events it holds. It first takes a SHARE lock on the
// partition, as long as the lock_timeout lets it wait: every transaction
// that wrote into it has then ended, and no row will appear in it (its
// range is in the past), so the runs recorded are exactly its rows.
//
// The SHARE lock queues no one behind it but the partition's own writers
// (there are none past its range) and vacuum: readers' ACCESS SHARE locks
// do not conflict with it. An autovacuum of the partition is cancelled by
// the server once a lock has waited for it longer than deadlock_timeout (1
// s by default), so shareLockTimeout lets it wait that long.
func recordPartition(ctx context.Context, tx pgx.Tx, schema dbutil.Schema, table, name string) (int64, error) {
	if _, err := tx.Exec(ctx, schema.SQL(fmt.Sprintf(`LOCK TABLE ONLY {S}%s IN SHARE MODE`, ident(name)))); err != nil {
		return 0, wrapLock(err, "locking "+name)
	}
	var n int64
	err := tx.QueryRow(ctx, schema.SQL(fmt.Sprintf(`WITH d AS (SELECT xact_id, event_id, occurred_at_ms FROM {S}%s),
	`+trimRecordSQL("$1")+`
	SELECT coalesce(sum(events), 0)::bigint FROM runs`, ident(name))), table).Scan(&n)
	if err != nil {
		return 0, dbutil.MapErr(err, "outbox partitions: recording what "+name+" holds")
	}
	return n, nil
}

// dropRecorded drops the partitions of table, recorded by recordPartition,
// and forgets them in ff_outbox_partition. It takes the table's ACCESS
// EXCLUSIVE lock first, as long as the lock_timeout lets it wait: DROP
// TABLE would lock a partition, then the table, and a query on the table
// holds its lock on the table and waits for the partition's, a deadlock.
// Taking the table's lock first is the queries' order.
func dropRecorded(ctx context.Context, tx pgx.Tx, schema dbutil.Schema, table string, names []string) error {
	if _, err := tx.Exec(ctx, schema.SQL(fmt.Sprintf(`LOCK TABLE ONLY {S}%s IN ACCESS EXCLUSIVE MODE`, table))); err != nil {
		return wrapLock(err, "locking "+table)
	}
	for _, name := range names {
		if _, err := tx.Exec(ctx, schema.SQL(fmt.Sprintf(`DROP TABLE {S}%s`, ident(name)))); err != nil {
			return wrapLock(err, "dropping "+name)
		}
	}
	if _, err := tx.Exec(ctx, schema.SQL(`DELETE FROM {S}ff_outbox_partition WHERE stream = $1 AND partition_name = ANY($2)`), table, names); err != nil {
		return dbutil.MapErr(err, "outbox partitions: forgetting "+strings.Join(names, ", "))
	}
	return nil
}

// underLockTimeout runs f in a savepoint of tx with lock_timeout set to d,
// so that no lock f asks for is waited for longer than d, nor does any
// query that queues behind that request: every step of a maintenance pass
// that takes a lock readers or writers would queue behind (an attach, a
// drop) runs in it. When a statement of f gives up on a lock, the
// savepoint is rolled back, with what f did and the locks it took, and
// underLockTimeout returns locked, without an error: the caller leaves the
// step for the next run. Any other error of f rolls it back and is
// returned. Otherwise the savepoint is released, with tx's lock_timeout as
// it was.
func underLockTimeout(ctx context.Context, tx pgx.Tx, d time.Duration, f func(sp pgx.Tx) error) (locked bool, err error) {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return false, dbutil.MapErr(err, "outbox partitions: savepoint")
	}
	defer func() { _ = sp.Rollback(context.WithoutCancel(ctx)) }()
	var was string
	if err := sp.QueryRow(ctx, "SELECT current_setting('lock_timeout')").Scan(&was); err != nil {
		return false, dbutil.MapErr(err, "outbox partitions: reading the lock timeout")
	}
	if err := setLockTimeout(ctx, sp, fmt.Sprintf("%dms", max(d.Milliseconds(), 1))); err != nil {
		return false, err
	}
	if err := f(sp); err != nil {
		if !dbutil.IsLockTimeout(err) {
			return false, err
		}
		if err := sp.Rollback(ctx); err != nil {
			return false, dbutil.MapErr(err, "outbox partitions: rolling back to the savepoint")
		}
		return true, nil
	}
	if err := setLockTimeout(ctx, sp, was); err != nil {
		return false, err
	}
	if err := sp.Commit(ctx); err != nil {
		return false, dbutil.MapErr(err, "outbox partitions: releasing the savepoint")
	}
	return false, nil
}

// setLockTimeout sets lock_timeout for the rest of tx (until a rollback to
// a savepoint taken before).
func setLockTimeout(ctx context.Context, tx pgx.Tx, d string) error {
	_, err := tx.Exec(ctx, "SELECT set_config('lock_timeout', $1, true)", d)
	return dbutil.MapErr(err, "outbox partitions: setting the lock timeout")
}

// lockHolders returns the other sessions that hold a lock on table or one
// of its partitions, the oldest transactions first, at most
// maxLockHolders: whom a step that gave up waited for.
func lockHolders(ctx context.Context, tx pgx.Tx, schema dbutil.Schema, table string) ([]LockHolder, error) {
	rows, err := tx.Query(ctx, schema.SQL(`SELECT a.pid, coalesce(a.state, ''), coalesce(a.application_name, ''),
		coalesce((extract(epoch FROM clock_timestamp() - a.xact_start) * 1000)::bigint, 0), a.xact_start
		FROM pg_stat_activity a
		WHERE a.pid <> pg_backend_pid() AND a.pid IN (SELECT l.pid FROM pg_locks l
		  WHERE l.granted AND l.locktype = 'relation'
		    AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		    AND (l.relation = '{S}`+table+`'::regclass
		      OR l.relation IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = '{S}`+table+`'::regclass)))
		ORDER BY a.xact_start NULLS LAST, a.pid LIMIT $1`), maxLockHolders)
	if err != nil {
		return nil, dbutil.MapErr(err, "outbox partitions: reading who holds "+table)
	}
	holders, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (LockHolder, error) {
		var h LockHolder
		var start *time.Time
		err := r.Scan(&h.PID, &h.State, &h.Application, &h.XactAgeMs, &start)
		if start != nil {
			h.XactStart = *start
		}
		return h, err
	})
	if err != nil {
		return nil, dbutil.MapErr(err, "outbox partitions: reading who holds "+table)
	}
	return holders, nil
}

// trimRecordSQL returns the common table expressions that record the
// removed rows of d (a preceding CTE with their xact_id, event_id and
// occurred_at_ms) in ff_outbox_trim, under the stream named by the
// parameter stream ("$1"): one row per run of their transaction ids that
// spans no transaction still running, with the count and the ranges of
// event ids and times. A stream whose position has not seen a transaction
// inside a run gets a gap error. The last, runs, has a row per run with
// its events: SELECT coalesce(sum(events), 0) FROM runs counts d. With {S}
// for the schema.
func trimRecordSQL(stream string) string {
	// A row's run is the number of running transactions below its own
	// (which is not running: its row is visible), found by a binary search
	// of the sorted list (width_bucket; the 0 keeps the list non-empty),
	// and d is read once, aggregated as it is read: a subquery counting
	// them per row over a materialized d took five times as long (EXPLAIN
	// ANALYZE of a 1,000,000-event partition's drop: 684 ms, most of it the
	// subqueries and d's spill to disk).
	return `running AS (SELECT ARRAY[0::bigint] || ARRAY(SELECT i::text::bigint FROM pg_snapshot_xip(pg_current_snapshot()) i ORDER BY 1) AS xip),
	runs AS (SELECT width_bucket(d.xact_id, running.xip) AS run, min(xact_id) AS min_xact, max(xact_id) AS max_xact,
		min(event_id) AS min_event_id, max(event_id) AS max_event_id, count(*) AS events,
		min(occurred_at_ms) AS min_at_ms, max(occurred_at_ms) AS max_at_ms
		FROM d, running GROUP BY 1),
	rec AS (INSERT INTO {S}ff_outbox_trim (stream, min_xact, max_xact, min_event_id, max_event_id, events, min_at_ms, max_at_ms)
		SELECT ` + stream + `, min_xact, max_xact, min_event_id, max_event_id, events, min_at_ms, max_at_ms FROM runs)`
}

// wrapLock keeps a lock timeout recognisable (dbutil.IsLockTimeout).
func wrapLock(err error, doing string) error {
	if dbutil.IsLockTimeout(err) {
		return fmt.Errorf("outbox partitions: %s: %w", doing, err)
	}
	return dbutil.MapErr(err, "outbox partitions: "+doing)
}

// PartitionWork is what MaintainPartitions has to do on a table.
type PartitionWork struct {
	// Create: the newest partition reaches less than the run's reach
	// minus one width past the database's clock.
	Create bool
	// Drop: a partition's rows were all written before the cutoff.
	Drop bool
}

// PartitionsDue says what MaintainPartitions, with width w (0: creating
// none) and the default reach, has to do on table with cutoffMs (0:
// dropping none). It reads ff_outbox_partition only: a partition held by
// a consumer still counts.
func PartitionsDue(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, schema dbutil.Schema, table string, w time.Duration, cutoffMs int64) (PartitionWork, error) {
	var work PartitionWork
	table, err := tableOf(table)
	if err != nil {
		return work, err
	}
	aheadMs := int64(-1) // creating none: never short
	if w > 0 {
		aheadMs = (partitionsAhead(w) - w).Milliseconds()
	}
	err = q.QueryRow(ctx, schema.SQL(`SELECT
		$2::bigint >= 0 AND coalesce((SELECT max(hi_ms) FROM {S}ff_outbox_partition WHERE stream = $1 AND lo_ms IS NOT NULL), 0)
		    < (extract(epoch FROM clock_timestamp()) * 1000)::bigint + $2::bigint,
		$3::bigint <> 0 AND EXISTS (SELECT 1 FROM {S}ff_outbox_partition WHERE stream = $1 AND written_before_ms <= $3::bigint
		    AND written_before_ms <= (extract(epoch FROM clock_timestamp()) * 1000)::bigint - 1000)`),
		table, aheadMs, cutoffMs).Scan(&work.Create, &work.Drop)
	if err != nil {
		return work, dbutil.MapErr(err, "outbox partitions: reading "+table+"'s partitions")
	}
	return work, nil
}

// UnackedSQL is a SQL predicate that holds for an outbox event x that the
// named stream consumer c (a row of ff_stream_consumer) has not
// acknowledged: x's transaction is not visible in the snapshot of c's
// position. Retention keeps such events while c is younger than its
// maximum lag.
const UnackedSQL = `NOT (x.xact_id < c.snap_xmin OR (x.xact_id < c.snap_xmax AND x.xact_id <> ALL(c.snap_xip)))`
