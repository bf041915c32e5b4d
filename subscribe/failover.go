package subscribe

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/jackc/pgx/v5"
)

// Failover: see "Failover" in the package documentation.

// tickTimelineShift places a tick's WAL timeline in its id: tick_id =
// timeline << tickTimelineShift | n (migration 0018). Ids below 1 <<
// tickTimelineShift were taken before ticks recorded their timeline.
const tickTimelineShift = 40

// tickTimeline returns the WAL timeline tick id was taken on; 0 when it
// does not say (a tick of the ids before migration 0018, or no tick).
func tickTimeline(id int64) int64 { return id >> tickTimelineShift }

// PositionAheadError is returned, at subscribe time or when a running
// stream reconnects, for a position this server's history does not hold:
// the stream tick it was taken at is newer than the newest this server
// kept of that tick's WAL timeline (the database failed over to a standby
// that had not received every commit the stream had read: asynchronous
// replication), it was taken on a timeline this server is not on, or it
// names transaction ids this server has not reached. Transaction ids after
// such a position belong to other transactions here, and events delivered
// before it may be gone: resuming after it would skip or mis-order events
// in silence, so the stream refuses it and ends. It matches
// ff.ErrPositionAhead.
//
// Resume names a position this server holds, earlier than the refused one
// (zero when none is known): a stream started after it delivers again the
// events after it that survived, some of which the consumer may have had.
// A named consumer resumes from the position stored in the database, which
// the new primary holds, with the same proviso.
type PositionAheadError struct {
	// Stream is the outbox table, ff_lease_event or ff_completion_event.
	Stream string
	// Consumer is the named consumer's name; "" for an anonymous stream.
	Consumer string
	// Cursor is the refused position: the cursor of the last event the
	// stream delivered (or the start it was given).
	Cursor Cursor
	// Timeline is the WAL timeline Cursor's position was taken on (0 when
	// the cursor does not say); ServerTimeline the one this server writes
	// on.
	Timeline, ServerTimeline int64
	// CursorXact is the newest transaction id the position names;
	// ServerXact the next one this server will assign (the bound of its
	// snapshot), when the position is ahead of it (else both are 0).
	CursorXact, ServerXact int64
	// Resume is a position this server holds before Cursor: the newest
	// stream tick it kept of Cursor's timeline; zero when there is none.
	Resume Cursor
	// ResumeAtMs is when Resume's tick was taken.
	ResumeAtMs int64

	origin Origin
	// stored says Cursor is the named consumer's stored position.
	stored bool
}

// Error implements error.
func (e *PositionAheadError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "subscribe: %s: position %s is beyond this server's history: ", e.Stream, e.Cursor)
	switch {
	case e.Timeline > 0 && e.Timeline < e.ServerTimeline:
		fmt.Fprintf(&b, "it was taken on WAL timeline %d, after the last point of that timeline this server (now on timeline %d) holds", e.Timeline, e.ServerTimeline)
		if e.CursorXact > 0 {
			fmt.Fprintf(&b, " (it names transaction %d, and this server has only reached %d)", e.CursorXact, e.ServerXact)
		}
		b.WriteString(": the database failed over to a standby that had not received every commit the stream had read (asynchronous replication)")
	case e.CursorXact > 0:
		fmt.Fprintf(&b, "it names transaction %d, and this server has only reached %d: "+
			"the database failed over and lost commits the stream had read, or the position comes from another server", e.CursorXact, e.ServerXact)
	case e.Timeline == e.ServerTimeline:
		fmt.Fprintf(&b, "it names a stream tick of WAL timeline %d, this server's, that this server does not hold "+
			"(lost in a crash, or the position comes from another server)", e.Timeline)
	default:
		fmt.Fprintf(&b, "it was taken on WAL timeline %d, and this server writes timeline %d: it comes from another server",
			e.Timeline, e.ServerTimeline)
	}
	b.WriteString("; events delivered up to it may be gone and transaction ids after it belong to other transactions here, " +
		"so the stream does not resume after it (that would skip events in silence). ")
	stream := e.origin.Stream
	if stream == "" {
		stream = "leases|completions"
	}
	switch {
	case e.Consumer != "" && e.stored:
		fmt.Fprintf(&b, "Consumer %q stores this position: drop it (ffctl consumer drop --stream %s %s) and start it again from a time "+
			"(ffctl tail --consumer %s --since …), which delivers again the events after that time", e.Consumer, stream, e.Consumer, e.Consumer)
	case e.Consumer != "":
		fmt.Fprintf(&b, "Start consumer %q again: it resumes after the position stored on this server, which is earlier, "+
			"and delivers again the events after that which survived (some it has had)", e.Consumer)
	case !e.Resume.IsZero():
		fmt.Fprintf(&b, "Resume from cursor %s, the last position of that timeline this server holds (taken %s; ffctl tail --stream %s --cursor %s): "+
			"it delivers again the events after it that survived (some the consumer has had)", e.Resume, msTime(e.ResumeAtMs), stream, e.Resume)
	default:
		b.WriteString("Start again from a time (ffctl tail --since) or from the beginning: events after that point are delivered again")
	}
	b.WriteString(". The executions whose transitions were lost are redone by the scanners as their leases, delays and deadlines come due again")
	return b.String()
}

// Is makes errors.Is(err, ff.ErrPositionAhead) true.
func (e *PositionAheadError) Is(target error) bool { return target == ff.ErrPositionAhead }

// historySQL reads, for a tick id $1 and its snapshot ($2, $3, $4): this
// server's timeline and next transaction id, whether the tick is here with
// that snapshot, whether a tick with its id is here at all, whether a later
// tick of its timeline is, and the newest earlier tick of its timeline (40
// is tickTimelineShift).
const historySQL = `SELECT {S}ff_wal_timeline(), pg_snapshot_xmax(pg_current_snapshot())::text::bigint,
	EXISTS (SELECT 1 FROM {S}ff_stream_tick WHERE tick_id = $1::int8 AND snap_xmin = $2::int8 AND snap_xmax = $3::int8 AND snap_xip = $4::int8[]),
	EXISTS (SELECT 1 FROM {S}ff_stream_tick WHERE tick_id = $1::int8),
	EXISTS (SELECT 1 FROM {S}ff_stream_tick WHERE tick_id > $1::int8 AND tick_id < (($1::int8 >> 40) + 1) << 40),
	n.tick_id, n.snap_xmin, n.snap_xmax, n.snap_xip, n.at_ms
FROM (SELECT 1) one LEFT JOIN LATERAL (
	SELECT * FROM {S}ff_stream_tick
	WHERE tick_id >= ($1::int8 >> 40) << 40 AND tick_id < $1::int8
	ORDER BY tick_id DESC LIMIT 1) n ON true`

// checkHistory returns a *PositionAheadError when the position whose newest
// snapshot is to, and whose cursor is cur, is not in this server's history.
// A position is in it when its tick is here, or is older than a tick of
// the same timeline that is here (ticks older than an hour are pruned, the
// newest of each timeline kept). Positions whose tick does not record its
// timeline (taken before migration 0018), and cursors of the older forms,
// which do not record their stream and schema (Cursor.Origin), are only
// checked against the server's transaction ids (see ForeignCursorError).
func (r *reader[E]) checkHistory(ctx context.Context, q *pgx.Conn, to snapshot, cur Cursor) error {
	tl := tickTimeline(to.Tick)
	if _, ok := cur.Origin(); !ok && !cur.IsZero() && !(r.afterStored && cur == r.cfg.after) {
		// A cursor of an older form says nothing of where it was taken:
		// its ticks may be another schema's, and any stream accepts it.
		tl = 0
	}
	if tl == 0 {
		var serverXmax int64
		err := q.QueryRow(ctx, "SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint").Scan(&serverXmax)
		if err != nil {
			return dbutil.MapErr(err, "subscribe: checking the stream position")
		}
		if to.Xmax > serverXmax {
			return &ForeignCursorError{Cursor: cur, CursorXact: to.Xmax, ServerXact: serverXmax}
		}
		return nil
	}
	xip := to.Xip
	if xip == nil {
		xip = []int64{}
	}
	var (
		serverTL, serverXmax        int64
		exact, sameID, later        bool
		newestID, nXmin, nXmax, nAt *int64
		nXip                        []int64
	)
	err := q.QueryRow(ctx, r.cfg.schema.SQL(historySQL), to.Tick, to.Xmin, to.Xmax, xip).
		Scan(&serverTL, &serverXmax, &exact, &sameID, &later, &newestID, &nXmin, &nXmax, &nXip, &nAt)
	if err != nil {
		return dbutil.MapErr(err, "subscribe: checking the stream position")
	}
	if to.Xmax > serverXmax && tl >= serverTL {
		return &ForeignCursorError{Cursor: cur, CursorXact: to.Xmax, ServerXact: serverXmax}
	}
	e := &PositionAheadError{Stream: r.table.name, Cursor: cur, Timeline: tl, ServerTimeline: serverTL,
		origin: r.origin, stored: r.afterStored && cur == r.cfg.after}
	if r.consumer != nil {
		e.Consumer = r.consumer.name
	}
	if newestID != nil {
		snap := snapshot{Tick: *newestID, Xmin: *nXmin, Xmax: *nXmax}
		if len(nXip) > 0 {
			snap.Xip = nXip
		}
		e.Resume, e.ResumeAtMs = r.newBatch(snap, snap).Cursor(0, 0), *nAt
	}
	switch {
	case to.Xmax > serverXmax:
		e.CursorXact, e.ServerXact = to.Xmax, serverXmax
		return e
	case exact:
		return nil
	case !sameID && later && tl <= serverTL:
		return nil // pruned: a later tick of its timeline is here
	}
	return e
}

// checkResume, on a new connection of a running stream, makes sure the
// stream's position is in this server's history (the server may be a
// promoted standby now) before it reads on: the newest snapshot the stream
// has read, else the position of the last event it delivered, from which
// it then reads again. It drops the ticks read ahead: they come from the
// server before, which may have lost them.
func (r *reader[E]) checkResume(ctx context.Context, q *pgx.Conn) error {
	// Read on at once until past every tick there is now: wake-ups were
	// lost with the connection.
	r.ticks = r.ticks[:0]
	if err := q.QueryRow(ctx, r.cfg.schema.SQL(`SELECT coalesce(max(tick_id), 0) FROM {S}ff_stream_tick`)).Scan(&r.catchUpTo); err != nil {
		return dbutil.MapErr(err, "subscribe: reading the stream ticks")
	}
	cur := r.from
	if r.inBatch {
		cur = r.to
	}
	err := r.checkHistory(ctx, q, cur, r.last)
	if err == nil || !errors.Is(err, ff.ErrPositionAhead) {
		return err
	}
	// The stream read past what it delivered (batches without events for
	// it): if the last delivered event is in this server's history, read
	// on from there.
	b, ok := r.last.batchOf()
	if !ok {
		return err
	}
	from, to := b.Snapshots()
	if to.Tick == cur.Tick {
		return err
	}
	if err := r.checkHistory(ctx, q, to, r.last); err != nil {
		return err
	}
	r.abandonRun()
	r.toAtMs = 0
	r.begin(from, to, position{r.last.Xact, r.last.EventID})
	r.skip = false
	r.logger.Warn("subscribe: the stream had read past its last event into ticks this server does not hold "+
		"(a failover lost them); it reads again after its last event", "cursor", r.last.String())
	return nil
}
