package subscribe

import (
	"errors"
	"fmt"

	"github.com/ffriver/ffriver/ff"
)

// ErrForeignCursor matches a *ForeignCursorError with errors.Is.
var ErrForeignCursor = errors.New("subscribe: cursor from another server")

// ForeignCursorError is returned at subscribe time for a cursor that this
// server cannot have produced: it names a transaction id this server has not
// reached yet. It comes from another server (a pg_dump restored elsewhere, a
// cutover to a logical replica): transaction ids and snapshots are per
// server, so it means nothing here. Resume with StartBeginning, or from a
// time (ffctl tail --since), instead.
type ForeignCursorError struct {
	// Cursor is the rejected cursor.
	Cursor ff.Cursor
	// CursorXact is the newest transaction id the cursor names; ServerXact
	// is the next transaction id this server will assign.
	CursorXact, ServerXact int64
}

// Error implements error.
func (e *ForeignCursorError) Error() string {
	return fmt.Sprintf("subscribe: cursor %s names transaction %d, but this server has only reached %d: "+
		"the cursor comes from another server or a restored copy; resume from the start or from a time instead",
		e.Cursor, e.CursorXact, e.ServerXact)
}

// Is makes errors.Is(err, ErrForeignCursor) true.
func (e *ForeignCursorError) Is(target error) bool { return target == ErrForeignCursor }
