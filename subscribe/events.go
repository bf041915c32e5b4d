package subscribe

import (
	"log/slog"

	"github.com/ffriver/ffriver/ff"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// LeaseEvent is one row of ff_lease_event: a lease transition.
type LeaseEvent struct {
	// Cursor is the stream position of this event; resuming after it
	// delivers exactly the events that follow.
	Cursor Cursor
	// EventID is the row's event_id.
	EventID int64
	// Type is one of ff.LeaseAcquired, ff.LeaseRenewed, ff.LeaseExpired,
	// ff.LeaseReclaimed and ff.LeaseRevoked. Rows of any other type are
	// skipped with a warning.
	Type string
	// ExecutionID is the execution, {fp:N}:<uuid>, from partition_key and
	// the row's execution_id.
	ExecutionID ff.ExecutionID
	// LeaseID of the lease the event is about; "" when the row has none.
	LeaseID string
	// Partition is the row's partition_key.
	Partition int16
	// Namespace and InstanceTag (the value of the execution's
	// "cairn.instance_id" tag) copied onto the row; "" when NULL.
	Namespace   string
	InstanceTag string
	// AtMs is when the transition happened (occurred_at_ms).
	AtMs int64
	// AttemptIndex and LeaseEpoch of the attempt, when the producer
	// recorded them.
	AttemptIndex *int32
	LeaseEpoch   *int64
	// WorkerInstanceID that held (or now holds) the lease; "" when unknown.
	WorkerInstanceID string
}

// CompletionEvent is one row of ff_completion_event: an execution reached a
// terminal state.
type CompletionEvent struct {
	// Cursor is the stream position of this event; resuming after it
	// delivers exactly the events that follow.
	Cursor Cursor
	// EventID is the row's event_id.
	EventID int64
	// Outcome as written: ff.OutcomeSuccess, ff.OutcomeFailed,
	// ff.OutcomeExpired, ff.OutcomeCancelled, ff.OutcomeSkipped, or whatever
	// another producer wrote (delivered as is).
	Outcome string
	// ExecutionID is the execution, {fp:N}:<uuid>.
	ExecutionID ff.ExecutionID
	// FlowID of the execution's flow; not Valid for a solo execution.
	FlowID uuid.NullUUID
	// Partition is the row's partition_key.
	Partition int16
	// Namespace and InstanceTag (the value of the execution's
	// "cairn.instance_id" tag) copied onto the row; "" when NULL.
	Namespace   string
	InstanceTag string
	// AtMs is when the execution reached its outcome (occurred_at_ms).
	AtMs int64
}

// table describes one outbox table to the generic stream machinery.
type table[E any] struct {
	name string
	// columns is the select list after "xact_id, event_id".
	columns string
	// newDecoder returns a decoder with its own scan destinations.
	newDecoder func(logger *slog.Logger) decoder[E]
	// cursor returns an event's cursor.
	cursor func(E) Cursor
	// stream is the stream label of the metrics ("leases", "completions").
	stream string
	// atMs returns an event's occurred_at_ms.
	atMs func(E) int64
}

// decoder turns scanned rows into events without per-row maps or
// reflection: rows are scanned into the decoder's fixed destinations.
type decoder[E any] interface {
	// dest returns the scan destinations; the first two are *int64 for
	// xact_id and event_id.
	dest() []any
	// position returns the xact_id and event_id of the row last scanned.
	position() (int64, int64)
	// event builds the event of the row last scanned; ok is false for a
	// row that is skipped (after a warning).
	event() (ev E, ok bool)
	// setBatch sets the batch whose rows are scanned next (their cursors).
	setBatch(b batch)
}

var leaseTable = table[LeaseEvent]{
	cursor: func(ev LeaseEvent) Cursor { return ev.Cursor },
	stream: "leases",
	atMs:   func(ev LeaseEvent) int64 { return ev.AtMs },
	name:   "ff_lease_event",
	columns: "execution_id, lease_id, event_type, occurred_at_ms, partition_key, " +
		"namespace, instance_tag, attempt_index, lease_epoch, worker_instance_id",
	newDecoder: func(logger *slog.Logger) decoder[LeaseEvent] {
		d := &leaseDecoder{logger: logger}
		d.dst = []any{&d.xact, &d.eventID, &d.execID, &d.leaseID, &d.eventType, &d.atMs, &d.partition,
			&d.namespace, &d.instanceTag, &d.attemptIndex, &d.leaseEpoch, &d.worker}
		return d
	},
}

var completionTable = table[CompletionEvent]{
	cursor:  func(ev CompletionEvent) Cursor { return ev.Cursor },
	stream:  "completions",
	atMs:    func(ev CompletionEvent) int64 { return ev.AtMs },
	name:    "ff_completion_event",
	columns: "execution_id, flow_id, outcome, occurred_at_ms, partition_key, namespace, instance_tag",
	newDecoder: func(logger *slog.Logger) decoder[CompletionEvent] {
		d := &completionDecoder{logger: logger}
		d.dst = []any{&d.xact, &d.eventID, &d.execID, &d.flowID, &d.outcome, &d.atMs, &d.partition,
			&d.namespace, &d.instanceTag}
		return d
	},
}

type leaseDecoder struct {
	logger *slog.Logger
	dst    []any
	batch  batch

	xact, eventID int64
	execID        pgtype.DriverBytes
	leaseID       pgtype.Text
	eventType     pgtype.DriverBytes
	atMs          int64
	partition     int32
	namespace     pgtype.Text
	instanceTag   pgtype.Text
	attemptIndex  pgtype.Int4
	leaseEpoch    pgtype.Int8
	worker        pgtype.Text

	// Optional integers point into these chunks: one allocation per many
	// events instead of one per field.
	ints32 []int32
	ints64 []int64
}

func (d *leaseDecoder) dest() []any              { return d.dst }
func (d *leaseDecoder) position() (int64, int64) { return d.xact, d.eventID }
func (d *leaseDecoder) setBatch(b batch)         { d.batch = b }

func (d *leaseDecoder) event() (LeaseEvent, bool) {
	typ := leaseType(d.eventType)
	if typ == "" {
		d.logger.Warn("subscribe: skipping lease event of unknown type",
			"event_id", d.eventID, "event_type", string(d.eventType))
		return LeaseEvent{}, false
	}
	id, ok := executionID(d.logger, "ff_lease_event", d.eventID, int64(d.partition), d.execID)
	if !ok {
		return LeaseEvent{}, false
	}
	ev := LeaseEvent{
		Cursor:           d.batch.Cursor(d.xact, d.eventID),
		EventID:          d.eventID,
		Type:             typ,
		ExecutionID:      id,
		LeaseID:          d.leaseID.String,
		Partition:        id.Partition,
		Namespace:        d.namespace.String,
		InstanceTag:      d.instanceTag.String,
		AtMs:             d.atMs,
		WorkerInstanceID: d.worker.String,
	}
	if d.attemptIndex.Valid {
		if len(d.ints32) == cap(d.ints32) {
			d.ints32 = make([]int32, 0, 256)
		}
		d.ints32 = append(d.ints32, d.attemptIndex.Int32)
		ev.AttemptIndex = &d.ints32[len(d.ints32)-1]
	}
	if d.leaseEpoch.Valid {
		if len(d.ints64) == cap(d.ints64) {
			d.ints64 = make([]int64, 0, 256)
		}
		d.ints64 = append(d.ints64, d.leaseEpoch.Int64)
		ev.LeaseEpoch = &d.ints64[len(d.ints64)-1]
	}
	return ev, true
}

// leaseType returns the canonical constant for a known event type (no
// allocation) or "" for an unknown one.
func leaseType(b []byte) string {
	switch string(b) {
	case ff.LeaseAcquired:
		return ff.LeaseAcquired
	case ff.LeaseRenewed:
		return ff.LeaseRenewed
	case ff.LeaseExpired:
		return ff.LeaseExpired
	case ff.LeaseReclaimed:
		return ff.LeaseReclaimed
	case ff.LeaseRevoked:
		return ff.LeaseRevoked
	}
	return ""
}

// executionID rebuilds {fp:N}:<uuid> from a row's partition_key and its
// execution_id text: a bare UUID (what producers write) or, leniently, the
// full {fp:N}:<uuid> form when its partition agrees.
func executionID(logger *slog.Logger, tableName string, eventID, partition int64, raw []byte) (ff.ExecutionID, bool) {
	if partition < 0 || partition >= ff.MaxPartitions {
		logger.Warn("subscribe: skipping row with a partition_key out of range",
			"table", tableName, "event_id", eventID, "partition_key", partition)
		return ff.ExecutionID{}, false
	}
	if u, err := uuid.ParseBytes(raw); err == nil {
		return ff.ExecutionID{Partition: int16(partition), UUID: u}, true
	}
	if id, err := ff.ParseExecutionID(string(raw)); err == nil && int64(id.Partition) == partition {
		return id, true
	}
	logger.Warn("subscribe: skipping row with an unparseable execution_id",
		"table", tableName, "event_id", eventID, "execution_id", string(raw))
	return ff.ExecutionID{}, false
}

type completionDecoder struct {
	logger *slog.Logger
	dst    []any
	batch  batch

	xact, eventID int64
	execID        pgtype.UUID
	flowID        pgtype.UUID
	outcome       pgtype.DriverBytes
	atMs          int64
	partition     int16
	namespace     pgtype.Text
	instanceTag   pgtype.Text
}

func (d *completionDecoder) dest() []any              { return d.dst }
func (d *completionDecoder) position() (int64, int64) { return d.xact, d.eventID }
func (d *completionDecoder) setBatch(b batch)         { d.batch = b }

func (d *completionDecoder) event() (CompletionEvent, bool) {
	if d.partition < 0 || !d.execID.Valid {
		d.logger.Warn("subscribe: skipping completion row with a bad partition_key or execution_id",
			"event_id", d.eventID, "partition_key", d.partition)
		return CompletionEvent{}, false
	}
	id := ff.ExecutionID{Partition: d.partition, UUID: d.execID.Bytes}
	return CompletionEvent{
		Cursor:      d.batch.Cursor(d.xact, d.eventID),
		EventID:     d.eventID,
		Outcome:     outcome(d.outcome),
		ExecutionID: id,
		FlowID:      uuid.NullUUID{UUID: d.flowID.Bytes, Valid: d.flowID.Valid},
		Partition:   d.partition,
		Namespace:   d.namespace.String,
		InstanceTag: d.instanceTag.String,
		AtMs:        d.atMs,
	}, true
}

// outcome returns the canonical constant for a known outcome (no
// allocation), or a copy of an unknown one.
func outcome(b []byte) string {
	switch string(b) {
	case ff.OutcomeSuccess:
		return ff.OutcomeSuccess
	case ff.OutcomeFailed:
		return ff.OutcomeFailed
	case ff.OutcomeExpired:
		return ff.OutcomeExpired
	case ff.OutcomeCancelled:
		return ff.OutcomeCancelled
	case ff.OutcomeSkipped:
		return ff.OutcomeSkipped
	}
	return string(b)
}
