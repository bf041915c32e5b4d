package subscribe

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/jackc/pgx/v5"
)

// position is a place inside a batch, in (xact_id, event_id) order: the
// stream has dealt with every row of the batch at or before it.
type position struct{ xact, event int64 }

// less reports whether p comes before q in (xact_id, event_id) order.
func (p position) less(q position) bool {
	return p.xact < q.xact || (p.xact == q.xact && p.event < q.event)
}

// below returns the position after every row whose transaction id is below
// x.
func below(x int64) position { return position{x - 1, math.MaxInt64} }

// tick is a row of ff_stream_tick.
type tick struct {
	snap snapshot
	atMs int64
}

// tickBatch is how many ticks one read of ff_stream_ticks returns at most.
const tickBatch = 256

// checkGap fails with a *GapError when retention deleted events after
// the stream's position. exact says the position inside the batch is
// exact (a cursor to resume after): rows of the batch before it were
// delivered. Otherwise every row of the batch counts, except in a batch
// from the table's beginning (the older snapshot sees nothing), whose
// rows before the position were there to read: the beginning of the table
// is wherever retention left it.
func (r *reader[E]) checkGap(ctx context.Context, q *pgx.Conn, exact bool) error {
	if r.from.Xmax == 0 {
		if r.pos == (position{}) {
			return nil // the start of the table
		}
		exact = true
	}
	minEvent := int64(-1)
	if r.inBatch && r.skip && r.cfg.start == StartAfter {
		minEvent = r.skipArg // a legacy cursor saw every event_id <= skipArg
	}
	to := r.from
	if r.inBatch {
		to = r.to
	}
	orEmpty := func(x []int64) []int64 {
		if x == nil {
			return []int64{}
		}
		return x
	}
	var runs int
	g := &GapError{Stream: r.table.name, Cursor: r.last}
	err := q.QueryRow(ctx, r.gapSQL, r.table.name, r.from.Xmax, orEmpty(r.from.Xip), minEvent,
		to.Xmax, orEmpty(to.Xip), r.pos.xact, r.pos.event, exact).
		Scan(&runs, &g.Events, &g.FirstEventID, &g.LastEventID, &g.FirstAtMs, &g.LastAtMs)
	if err != nil {
		return dbutil.MapErr(err, "subscribe: reading the outbox trim records")
	}
	if runs > 0 {
		return g
	}
	return nil
}

// readTicks reads the ticks after tick id after, taking a new one when
// there is none and a transaction finished since the newest.
func (r *reader[E]) readTicks(ctx context.Context, q *pgx.Conn, query string, args ...any) ([]tick, error) {
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	var out []tick
	for rows.Next() {
		var t tick
		if err := rows.Scan(&t.snap.Tick, &t.snap.Xmin, &t.snap.Xmax, &t.snap.Xip, &t.atMs); err != nil {
			rows.Close()
			return nil, err
		}
		if len(t.snap.Xip) == 0 {
			t.snap.Xip = nil
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// now returns a tick at least as new as the call: a new one, or the newest
// when nothing finished since it was taken.
func (r *reader[E]) now(ctx context.Context, q *pgx.Conn) (tick, error) {
	ts, err := r.readTicks(ctx, q, r.nowSQL)
	if err != nil {
		return tick{}, err
	}
	if len(ts) == 0 {
		return tick{}, errors.New("no stream tick")
	}
	return ts[0], nil
}

// nextTick returns the tick after from, or ok false when there is none yet.
func (r *reader[E]) nextTick(ctx context.Context, q *pgx.Conn) (tick, bool, error) {
	for {
		if len(r.ticks) == 0 {
			ts, err := r.readTicks(ctx, q, r.ticksSQL, r.from.Tick, tickBatch)
			if err != nil {
				return tick{}, false, dbutil.MapErr(err, "subscribe: reading the stream ticks")
			}
			r.ticksFull = len(ts) == tickBatch
			if len(ts) == 0 {
				return tick{}, false, nil
			}
			r.ticks = append(r.ticks[:0], ts...)
		}
		t := r.ticks[0]
		r.ticks = r.ticks[1:]
		// A tick not newer than from (from is no tick of this table's
		// chain, say after a restore) adds nothing: skip it.
		if r.from.Before(t.snap) {
			return t, true, nil
		}
	}
}

// adoptRestoredRows gives the rows whose xact_id this server has not
// reached (the schema was restored from another server's dump) the id of a
// transaction of this server, so that streams deliver them now rather than
// when this server's ids catch up with the other's. Such rows cannot exist
// otherwise: a transaction id at or above a snapshot's xmax has not started.
func (r *reader[E]) adoptRestoredRows(ctx context.Context, q *pgx.Conn) error {
	tag, err := q.Exec(ctx, r.cfg.schema.SQL(`UPDATE {S}`+r.table.name+` SET xact_id = pg_current_xact_id()::text::bigint
WHERE xact_id >= pg_snapshot_xmax(pg_current_snapshot())::text::bigint`))
	if err != nil {
		return r.startErr(err)
	}
	if n := tag.RowsAffected(); n > 0 {
		r.logger.Warn("subscribe: the outbox holds rows of another server's transactions (a restored dump?); "+
			"they are delivered as this server's now", "rows", n)
	}
	return nil
}

// initPosition sets the first batch and last from the start point.
func (r *reader[E]) initPosition(ctx context.Context, q *pgx.Conn) error {
	if err := r.adoptRestoredRows(ctx, q); err != nil {
		return err
	}
	nt, err := r.now(ctx, q)
	if err != nil {
		return r.startErr(err)
	}
	now := nt.snap
	r.toAtMs = nt.atMs
	after := r.cfg.after
	switch {
	case r.cfg.start == StartBeginning || (r.cfg.start == StartAfter && after.IsZero()):
		// Everything visible in the oldest tick, then on along the ticks,
		// so the stream has the batches every reader that walked them
		// had. (Taking the now tick first drops the ticks of another
		// server, after a restore.)
		ts, err := r.readTicks(ctx, q, r.oldestSQL)
		if err != nil {
			return r.startErr(err)
		}
		first := nt
		if len(ts) > 0 {
			first = ts[0]
		}
		r.toAtMs = first.atMs
		r.begin(snapshot{}, first.snap, position{})
		r.last = Cursor{}

	case r.cfg.start == StartAfter && !after.Legacy:
		if o, ok := after.Origin(); ok && o != r.origin && !r.afterStored {
			return &CursorOriginError{Cursor: after, TakenFrom: o, HandedTo: r.origin}
		}
		if b, ok := after.batchOf(); ok {
			from, to := b.Snapshots()
			if err := r.checkHistory(ctx, q, to, after); err != nil {
				return err
			}
			r.begin(from, to, position{after.Xact, after.EventID})
		} else {
			// A v1 cursor: every row before (Xact, EventID) in
			// (xact_id, event_id) order was seen, none after it. The
			// horizon-based stream that wrote it had only read below a
			// horizon above Xact, so Xact had finished.
			if after.Xact >= now.Xmax {
				return &ForeignCursorError{Cursor: after, CursorXact: after.Xact, ServerXact: now.Xmax}
			}
			point := snapshot{Xmin: after.Xact, Xmax: after.Xact}
			r.begin(point, now, position{after.Xact, after.EventID})
		}
		r.last = after

	case r.cfg.start == StartSince:
		// The events in the table now that occurred at or after since:
		// the first batch, up to now, keeps those; later batches keep
		// everything. Rows below both xmin(now) and the lowest xact_id of
		// such an event are all dropped: the batch starts there.
		if err := r.beginBelow(ctx, q, now, `occurred_at_ms >= $1`, r.cfg.sinceMs); err != nil {
			return err
		}
		r.skip, r.skipArg = true, r.cfg.sinceMs
		r.last = r.batch.Cursor(0, 0)

	case r.cfg.start == StartAfter:
		// A legacy cursor says "every event_id <= E was seen", in id order.
		// The legacy consumer can only have seen rows committed before now,
		// so the first batch, up to now, skips the rows with event_id <= E,
		// and later batches skip nothing: rows with event_id <= E that
		// commit after now are delivered (upstream's id cursor loses them).
		// Rows below both xmin(now) and the lowest xact_id of a row with
		// event_id > E are all skipped: the batch starts there.
		e := after.EventID
		// A stream of this outbox can only have produced an event id its
		// sequence handed out: a larger one was made up, or comes from
		// another server. Resuming after it would skip every event up to
		// it in silence. (A role that may not read the sequence, or an
		// outbox without one, is not checked: the cursor is taken as it
		// always was.)
		var readable *bool
		var last *int64
		if err := q.QueryRow(ctx, `SELECT has_sequence_privilege(s, 'SELECT, USAGE'),
	CASE WHEN has_sequence_privilege(s, 'SELECT, USAGE') THEN pg_sequence_last_value(s) END
FROM (SELECT pg_get_serial_sequence($1, 'event_id')::regclass AS s) seq`,
			r.cfg.schema.SQL(`{S}`+r.table.name)).Scan(&readable, &last); err != nil {
			return r.startErr(err)
		}
		if readable != nil && *readable && e > derefOr(last, 0) {
			return &ForeignCursorError{Cursor: after, CursorEventID: e, ServerEventID: derefOr(last, 0)}
		}
		if err := r.beginBelow(ctx, q, now, `event_id > $1`, e); err != nil {
			return err
		}
		r.skip, r.skipArg = true, e
		r.last = after

	default: // StartNow
		// The transactions not visible now are the ones that commit
		// "after now": the stream starts at the boundary after now.
		r.from, r.fromAtMs = now, nt.atMs
		r.last = r.newBatch(now, now).Cursor(0, 0)
	}
	return nil
}

// begin starts the batch (from, to) at pos.
func (r *reader[E]) begin(from, to snapshot, pos position) {
	r.beginRun(from, []tick{{snap: to, atMs: r.toAtMs}}, pos)
	r.started = true
}

// beginRun starts reading the batches of the ticks run, which follow from,
// at pos. Consecutive batches are read together when none but the first
// has transactions that were in progress at the tick before and finished
// by its own (those are looked up by exact id, first): then the rows of
// the run's batches are the first batch's held transactions followed by
// the range [from.Xmax, last.Xmax) less excl, and (xact_id, event_id)
// order over that range is the order of the batches, each batch's rows
// lying in its own span [previous Xmax, Xmax). Each row still carries the
// cursor of its own batch, so a reader that walked the ticks one by one
// and one that read them together deliver the same events in the same
// order with the same cursors.
func (r *reader[E]) beginRun(from snapshot, run []tick, pos position) {
	r.from, r.span, r.pos, r.inBatch = from, run, pos, true
	r.to, r.toAtMs = run[len(run)-1].snap, run[len(run)-1].atMs
	r.batches = append(r.batches[:0], make([]batch, len(run))...)
	r.batch = r.batchOf(0)
	r.dec.setBatch(r.batch)
	r.done = r.done[:0]
	for _, x := range from.Xip {
		if run[0].snap.Visible(x) {
			r.done = append(r.done, x)
		}
	}
	r.excl = r.excl[:0]
	lo := from.Xmax
	for _, t := range run {
		for _, x := range t.snap.Xip {
			if x >= lo {
				r.excl = append(r.excl, x)
			}
		}
		lo = t.snap.Xmax
	}
	// excl is ascending: each tick's span lies above the one before.
}

// newBatch returns the batch (from, to) of this stream: its cursors record
// the stream's origin.
func (r *reader[E]) newBatch(from, to snapshot) batch {
	return newBatch(from, to).WithOrigin(r.origin)
}

// batchOf returns the batch of the run's k-th tick.
func (r *reader[E]) batchOf(k int) batch {
	if r.batches[k] == (batch{}) {
		prev := r.from
		if k > 0 {
			prev = r.span[k-1].snap
		}
		r.batches[k] = r.newBatch(prev, r.span[k].snap)
	}
	return r.batches[k]
}

// tickOf returns the index in the run of the batch of a row of transaction
// x: the first tick whose span holds x (x below from.Xmax: the first).
func (r *reader[E]) tickOf(x int64) int {
	lo, hi := 0, len(r.span)-1
	for lo < hi {
		mid := (lo + hi) / 2
		if x < r.span[mid].snap.Xmax {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// abandonRun drops the run just begun, before any of it was delivered:
// the next read begins it again from from (its ticks are the caller's to
// put back).
func (r *reader[E]) abandonRun() {
	r.inBatch, r.pos = false, position{}
	clear(r.heldRows)
	r.heldRows = r.heldRows[:0]
}

// finish ends the current run: the next one starts at its newest snapshot.
func (r *reader[E]) finish() {
	r.from, r.fromAtMs, r.inBatch, r.pos = r.to, r.toAtMs, false, position{}
	r.skip = false
}

// beginBelow begins the first batch, up to now, at the lower of now's xmin
// and the lowest xact_id of a row of the table for which pred (with arg as
// $1) holds: the rows of a StartSince or legacy start that the first batch
// must still examine.
func (r *reader[E]) beginBelow(ctx context.Context, q *pgx.Conn, now snapshot, pred string, arg any) error {
	var minX *int64
	err := q.QueryRow(ctx, r.cfg.schema.SQL(`SELECT min(xact_id) FROM {S}`+r.table.name+` WHERE `+pred), arg).Scan(&minX)
	if err != nil {
		return r.startErr(err)
	}
	startX := now.Xmin
	if minX != nil {
		startX = min(startX, *minX)
	}
	r.begin(snapshot{Xmin: startX, Xmax: startX}, now, position{})
	return nil
}

// startErr wraps an error of working out the start position: an
// undefined table says the schema is not migrated (ff.ErrNotMigrated).
func (r *reader[E]) startErr(err error) error {
	if dbutil.IsUndefinedTable(err) {
		return fmt.Errorf("subscribe: schema %s: %w (run `ffctl migrate --schema %s`): %w", r.cfg.schema, ff.ErrNotMigrated, r.cfg.schema, err)
	}
	return dbutil.MapErr(err, "subscribe: reading the start position")
}

// derefOr returns *p, or otherwise when p is nil.
func derefOr[T any](p *T, otherwise T) T {
	if p == nil {
		return otherwise
	}
	return *p
}
