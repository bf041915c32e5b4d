package subscribe

// The stream's snapshots and batches, for the external tests that build a
// cursor from them (one from a server far ahead, one of an older form).
type (
	Snapshot = snapshot
	Batch    = batch
)

// NewBatch is newBatch.
var NewBatch = newBatch

// BatchOf is c's batch (Cursor.batchOf).
func (c Cursor) BatchOf() (Batch, bool) { return c.batchOf() }
