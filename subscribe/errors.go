package subscribe

import (
	"errors"
	"fmt"
	"time"

	"github.com/ffriver/ffriver/ff"
)

// ErrForeignCursor matches a *ForeignCursorError with errors.Is.
var ErrForeignCursor = errors.New("subscribe: cursor from another server")

// ForeignCursorError is returned at subscribe time (or when a running
// stream reconnects) for a cursor that this server cannot have produced: it
// names a transaction id this server has not reached yet. It comes from
// another server (a pg_dump restored elsewhere, a cutover to a logical
// replica), or the database failed over and lost commits the stream had
// read: transaction ids and snapshots are per server, so it means nothing
// here. Resume with StartBeginning, or from a time (ffctl tail --since),
// instead. It matches ErrForeignCursor and ff.ErrPositionAhead; where the
// failover is known from the cursor's timeline, a *PositionAheadError is
// returned instead.
//
// A legacy cursor (Cursor.Legacy, an event id only) is refused the same way
// when it names an event id the outbox's sequence has not handed out yet:
// no stream of this server can have produced it (it was made up, or comes
// from another server).
type ForeignCursorError struct {
	// Cursor is the rejected cursor.
	Cursor Cursor
	// CursorXact is the newest transaction id the cursor names; ServerXact
	// is the next transaction id this server will assign.
	CursorXact, ServerXact int64
	// CursorEventID is the event id a rejected legacy cursor names;
	// ServerEventID the last one the outbox's sequence handed out (0:
	// none yet). Both are 0 for the other forms.
	CursorEventID, ServerEventID int64
}

// Error implements error.
func (e *ForeignCursorError) Error() string {
	if e.Cursor.Legacy {
		return fmt.Sprintf("subscribe: legacy cursor %s names event id %d, but this outbox has only handed out event ids up to %d: "+
			"no stream of this server can have produced it (it was made up, or comes from another server); "+
			"resume from the start or from a time instead",
			e.Cursor, e.CursorEventID, e.ServerEventID)
	}
	return fmt.Sprintf("subscribe: cursor %s names transaction %d, but this server has only reached %d: "+
		"the cursor comes from another server or a restored copy, or the database failed over and lost commits the stream had read; "+
		"resume from the start or from a time instead",
		e.Cursor, e.CursorXact, e.ServerXact)
}

// Is makes errors.Is(err, ErrForeignCursor) and errors.Is(err,
// ff.ErrPositionAhead) true.
func (e *ForeignCursorError) Is(target error) bool {
	return target == ErrForeignCursor || target == ff.ErrPositionAhead
}

// ErrCursorOrigin matches a *CursorOriginError with errors.Is.
var ErrCursorOrigin = errors.New("subscribe: cursor from another stream")

// CursorOriginError is returned at subscribe time for a cursor taken from
// another stream: the other of the two (leases, completions), or the same
// stream of another schema. Its position means nothing here: resuming after
// it would skip or repeat events at random. Hand it to the stream it was
// taken from, or start this one from the beginning or from a time.
//
// Only cursors that record their origin are checked (Cursor.Origin):
// those of the older forms record none and are accepted by every stream, as
// they always were. A named consumer's stored position is never refused.
type CursorOriginError struct {
	// Cursor is the rejected cursor.
	Cursor Cursor
	// TakenFrom is the stream the cursor was taken from; HandedTo the one
	// it was given to.
	TakenFrom, HandedTo Origin
}

// Error implements error.
func (e *CursorOriginError) Error() string {
	return fmt.Sprintf("subscribe: cursor %s was taken from %s, not from %s, and a cursor resumes only the stream it was taken from: "+
		"hand it to that stream (ffctl tail --stream %s --schema %s), or start this one from the beginning or from a time (ffctl tail --from-start or --since)",
		e.Cursor, e.TakenFrom, e.HandedTo, e.TakenFrom.Stream, e.TakenFrom.Schema)
}

// Is makes errors.Is(err, ErrCursorOrigin) true.
func (e *CursorOriginError) Is(target error) bool { return target == ErrCursorOrigin }

// ErrGap matches a *GapError with errors.Is.
var ErrGap = errors.New("subscribe: events deleted before the stream read them")

// GapError reports that events the stream had not delivered yet were
// deleted (by outbox retention, or by hand when the deleter recorded it in
// ff_outbox_trim): resuming would skip them. It is terminal; the stream
// never carries on past the hole. Start again from the beginning, or from a
// time, to read what is left.
//
// The figures come from the retention's records of what it deleted, which
// are kept per run of transaction ids: Events is an upper bound (a run may
// also hold events the stream had delivered before they were deleted), and
// the ranges cover the runs.
type GapError struct {
	// Stream is the outbox table, ff_lease_event or ff_completion_event.
	Stream string
	// Cursor is the stream's position: the cursor of the last delivered
	// event, or the start.
	Cursor Cursor
	// Events deleted after Cursor, at most.
	Events int64
	// FirstEventID and LastEventID bound the deleted events' ids;
	// FirstAtMs and LastAtMs their occurred_at_ms.
	FirstEventID, LastEventID int64
	FirstAtMs, LastAtMs       int64
}

// Error implements error.
func (e *GapError) Error() string {
	return fmt.Sprintf("subscribe: %s: up to %d events after cursor %s were deleted before the stream read them "+
		"(event ids %d..%d, occurred %s..%s); start again from the beginning or from a time",
		e.Stream, e.Events, e.Cursor, e.FirstEventID, e.LastEventID, msTime(e.FirstAtMs), msTime(e.LastAtMs))
}

// Is makes errors.Is(err, ErrGap) true.
func (e *GapError) Is(target error) bool { return target == ErrGap }

func msTime(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339Nano) }
