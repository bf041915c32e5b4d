// Package outbox writes ffriver's two event logs, ff_lease_event and
// ff_completion_event, inside the caller's transaction, so that an event
// exists if and only if the state change it describes committed.
//
// Each INSERT copies the execution's namespace and the value of its
// "cairn.instance_id" tag onto the row in the same statement (the upstream
// seed's behaviour), so stream filters never need a join. Each row also
// records the id of its writing transaction (column xact_id, filled by a
// column default), which commit-safe stream readers order by; see package
// subscribe.
//
// Writers do not NOTIFY inside their transaction: a NOTIFY in every writing
// transaction serialises commits. A Waker sends at most one NOTIFY per
// interval, after commit, to wake stream readers early; readers also poll.
//
// Both tables are partitioned by time (written_at_ms); the outbox_retention
// scanner's job creates their partitions ahead and drops the old ones
// whole, which is how retention removes events.
package outbox

import (
	"context"
	"fmt"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Execer is satisfied by pgx.Tx, *pgx.Conn and *pgxpool.Pool. Producers are
// meant to run on a transaction the caller owns.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// LeaseRow is one lease transition, as the Writer inserts it into
// ff_lease_event (a reader receives it as a subscribe.LeaseEvent).
type LeaseRow struct {
	ID   ff.ExecutionID
	Type string // ff.LeaseAcquired … ff.LeaseRevoked
	// LeaseID of the lease the event is about (nil when unknown).
	LeaseID *uuid.UUID
	// AttemptIndex and LeaseEpoch of the attempt, when known.
	AttemptIndex *int32
	LeaseEpoch   *int64
	// WorkerInstanceID that held (or now holds) the lease, when known.
	WorkerInstanceID *string
	OccurredAtMs     int64
	// Source, when set, is the execution's namespace and instance tag as
	// the producer read them in its transaction (under the execution's
	// lock), so the INSERT does not read the execution's row again.
	Source *Source
}

// Source is what an event copies from its execution's row: its namespace,
// the value of its "cairn.instance_id" tag (nil when absent) and, for a
// completion event, its flow.
type Source struct {
	Namespace, InstanceTag *string
	FlowID                 *uuid.UUID
}

// CompletionRow is one terminal transition, as the Writer inserts it into
// ff_completion_event (a reader receives it as a subscribe.CompletionEvent).
type CompletionRow struct {
	ID           ff.ExecutionID
	Outcome      string // ff.OutcomeSuccess … ff.OutcomeSkipped
	OccurredAtMs int64
	// DispatchedAtMs marks the event as already dispatched to its flow's
	// downstream edge groups (the writer enqueued the cascade in the same
	// transaction); nil leaves it undispatched. ffriver finds hops from the
	// edges (the dependency scanner), not from this column; it is written
	// for upstream FlowFabric, whose dispatcher and reconciler claim and
	// scan completion events by dispatched_at_ms IS NULL and would count
	// an undispatched event's hops a second time, and read by
	// the DispatchCompletion transition (its claim) and History.
	DispatchedAtMs *int64
	// Source, when set, is the execution's namespace, instance tag and
	// flow as the producer read them under the execution's lock, so the
	// INSERT does not read the execution's row again.
	Source *Source
}

// Writer writes events into one schema's outbox tables.
type Writer struct {
	leaseSQL            string
	leaseSourceSQL      string
	completionSQL       string
	completionSourceSQL string
	leasesSQL           string
	completionsSQL      string
	discard             bool
}

// Discarding returns a Writer that validates events but writes none. It
// exists to measure what the outbox costs (ffctl bench): a store using it
// breaks every stream guarantee.
func (w *Writer) Discarding() *Writer {
	c := *w
	c.discard = true
	return &c
}

// Discards reports whether w is a Discarding writer: a writer of its own
// events in SQL (one statement that changes rows and writes their events)
// must then leave them out too.
func (w *Writer) Discards() bool { return w.discard }

// NewWriter returns a Writer for schema ("" for the search_path).
func NewWriter(schema string) (*Writer, error) {
	s, err := dbutil.ParseSchema(schema)
	if err != nil {
		return nil, err
	}
	return &Writer{leaseSQL: s.SQL(leaseSQL), leaseSourceSQL: s.SQL(leaseSourceSQL),
		completionSQL: s.SQL(completionSQL), completionSourceSQL: s.SQL(completionSourceSQL),
		leasesSQL: s.SQL(leasesSQL), completionsSQL: s.SQL(completionsSQL)}, nil
}

// The execution's row is read in the same statement. An event for an
// execution that does not exist (a producer outside ffriver may emit one) is
// still written, with NULL namespace and tag.
const leaseSQL = `
INSERT INTO {S}ff_lease_event
  (execution_id, lease_id, event_type, occurred_at_ms, partition_key,
   namespace, instance_tag, attempt_index, lease_epoch, worker_instance_id)
SELECT $1::uuid::text, $2, $3, $4, $5,
       x.namespace, x.instance_tag, $7, $8, $9
FROM (SELECT 1) one
LEFT JOIN LATERAL (
  SELECT raw_fields->>'namespace' AS namespace,
         raw_fields->'tags'->>'cairn.instance_id' AS instance_tag
  FROM {S}ff_exec_core
  WHERE partition_key = $5 AND execution_id = $6::uuid) x ON true`

// leaseSourceSQL is leaseSQL for an event whose Source the producer gives.
const leaseSourceSQL = `
INSERT INTO {S}ff_lease_event
  (execution_id, lease_id, event_type, occurred_at_ms, partition_key,
   namespace, instance_tag, attempt_index, lease_epoch, worker_instance_id)
VALUES ($1::uuid::text, $2, $3, $4, $5, $6, $7, $8, $9, $10)`

const completionSQL = `
INSERT INTO {S}ff_completion_event
  (partition_key, execution_id, flow_id, outcome, namespace, instance_tag, occurred_at_ms, dispatched_at_ms)
SELECT $1, $2::uuid, x.flow_id, $3, x.namespace, x.instance_tag, $4, $5
FROM (SELECT 1) one
LEFT JOIN LATERAL (
  SELECT flow_id, raw_fields->>'namespace' AS namespace,
         raw_fields->'tags'->>'cairn.instance_id' AS instance_tag
  FROM {S}ff_exec_core
  WHERE partition_key = $1 AND execution_id = $2::uuid) x ON true`

// completionSourceSQL is completionSQL for an event whose Source the
// producer gives.
const completionSourceSQL = `
INSERT INTO {S}ff_completion_event
  (partition_key, execution_id, flow_id, outcome, namespace, instance_tag, occurred_at_ms, dispatched_at_ms)
VALUES ($1, $2::uuid, $6, $3, $7, $8, $4, $5)`

// leaseInsert returns ev's INSERT and its arguments: with ev.Source the
// values it carries, else the lookup of the execution's row.
func (w *Writer) leaseInsert(ev LeaseRow) (string, []any, error) {
	switch ev.Type {
	case ff.LeaseAcquired, ff.LeaseRenewed, ff.LeaseExpired, ff.LeaseReclaimed, ff.LeaseRevoked:
	default:
		return "", nil, ff.Validationf("event_type", "%q is not a lease event type", ev.Type)
	}
	var leaseID *string
	if ev.LeaseID != nil {
		s := ev.LeaseID.String()
		leaseID = &s
	}
	if ev.Source != nil {
		return w.leaseSourceSQL, []any{dbutil.UUID(ev.ID.UUID), leaseID, ev.Type, ev.OccurredAtMs, int32(ev.ID.Partition),
			ev.Source.Namespace, ev.Source.InstanceTag, ev.AttemptIndex, ev.LeaseEpoch, ev.WorkerInstanceID}, nil
	}
	return w.leaseSQL, []any{dbutil.UUID(ev.ID.UUID), leaseID, ev.Type, ev.OccurredAtMs, int32(ev.ID.Partition),
		dbutil.UUID(ev.ID.UUID), ev.AttemptIndex, ev.LeaseEpoch, ev.WorkerInstanceID}, nil
}

// completionInsert returns ev's INSERT and its arguments, as leaseInsert.
func (w *Writer) completionInsert(ev CompletionRow) (string, []any, error) {
	switch ev.Outcome {
	case ff.OutcomeSuccess, ff.OutcomeFailed, ff.OutcomeExpired, ff.OutcomeCancelled, ff.OutcomeSkipped:
	default:
		return "", nil, ff.Validationf("outcome", "%q is not a completion outcome", ev.Outcome)
	}
	if ev.Source != nil {
		return w.completionSourceSQL, []any{ev.ID.Partition, dbutil.UUID(ev.ID.UUID), ev.Outcome, ev.OccurredAtMs, ev.DispatchedAtMs,
			dbutil.NullUUID(ev.Source.FlowID), ev.Source.Namespace, ev.Source.InstanceTag}, nil
	}
	return w.completionSQL, []any{ev.ID.Partition, dbutil.UUID(ev.ID.UUID), ev.Outcome, ev.OccurredAtMs, ev.DispatchedAtMs}, nil
}

// Lease writes one lease event on tx.
func (w *Writer) Lease(ctx context.Context, tx Execer, ev LeaseRow) error {
	sql, args, err := w.leaseInsert(ev)
	if err != nil || w.discard {
		return err
	}
	if _, err := tx.Exec(ctx, sql, args...); err != nil {
		return dbutil.MapErr(err, fmt.Sprintf("outbox: lease %s event for %s", ev.Type, ev.ID))
	}
	return nil
}

// Completion writes one completion event on tx.
func (w *Writer) Completion(ctx context.Context, tx Execer, ev CompletionRow) error {
	sql, args, err := w.completionInsert(ev)
	if err != nil || w.discard {
		return err
	}
	if _, err := tx.Exec(ctx, sql, args...); err != nil {
		return dbutil.MapErr(err, fmt.Sprintf("outbox: completion %s event for %s", ev.Outcome, ev.ID))
	}
	return nil
}

// QueueLease adds the lease event's INSERT to a batch, so that it travels in
// the same round trip as the state change it belongs to.
func (w *Writer) QueueLease(b *pgx.Batch, ev LeaseRow) error {
	sql, args, err := w.leaseInsert(ev)
	if err != nil || w.discard {
		return err
	}
	b.Queue(sql, args...)
	return nil
}

// QueueCompletion adds the completion event's INSERT to a batch.
func (w *Writer) QueueCompletion(b *pgx.Batch, ev CompletionRow) error {
	sql, args, err := w.completionInsert(ev)
	if err != nil || w.discard {
		return err
	}
	b.Queue(sql, args...)
	return nil
}

// leasesSQL writes many lease events whose Source the producer gives, in
// one statement: one row per array element, in order.
const leasesSQL = `
INSERT INTO {S}ff_lease_event
  (execution_id, lease_id, event_type, occurred_at_ms, partition_key,
   namespace, instance_tag, attempt_index, lease_epoch, worker_instance_id)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::int[],
                     $6::text[], $7::text[], $8::int[], $9::bigint[], $10::text[])`

// completionsSQL writes many completion events whose Source the producer
// gives, in one statement.
const completionsSQL = `
INSERT INTO {S}ff_completion_event
  (partition_key, execution_id, flow_id, outcome, namespace, instance_tag, occurred_at_ms, dispatched_at_ms)
SELECT * FROM unnest($1::int2[], $2::uuid[], $3::uuid[], $4::text[], $5::text[], $6::text[], $7::bigint[], $8::bigint[])`

// QueueLeases adds many lease events to a batch. Events that carry their
// Source travel in one set-based INSERT (in the order given); the others
// as QueueLease queues them.
func (w *Writer) QueueLeases(b *pgx.Batch, evs []LeaseRow) error {
	var (
		ids, leaseIDs, types, nss, tags, workers []*string
		ats, epochs                              []*int64
		parts, attempts                          []*int32
	)
	for _, ev := range evs {
		if ev.Source == nil {
			if err := w.QueueLease(b, ev); err != nil {
				return err
			}
			continue
		}
		if _, _, err := w.leaseInsert(ev); err != nil {
			return err
		}
		var leaseID *string
		if ev.LeaseID != nil {
			l := ev.LeaseID.String()
			leaseID = &l
		}
		id, typ, at, part := ev.ID.UUID.String(), ev.Type, ev.OccurredAtMs, int32(ev.ID.Partition)
		ids, leaseIDs, types, ats, parts = append(ids, &id), append(leaseIDs, leaseID), append(types, &typ), append(ats, &at), append(parts, &part)
		nss, tags, attempts, epochs, workers = append(nss, ev.Source.Namespace), append(tags, ev.Source.InstanceTag),
			append(attempts, ev.AttemptIndex), append(epochs, ev.LeaseEpoch), append(workers, ev.WorkerInstanceID)
	}
	if len(ids) > 0 && !w.discard {
		b.Queue(w.leasesSQL, ids, leaseIDs, types, ats, parts, nss, tags, attempts, epochs, workers)
	}
	return nil
}

// QueueCompletions adds many completion events to a batch, as QueueLeases.
func (w *Writer) QueueCompletions(b *pgx.Batch, evs []CompletionRow) error {
	var (
		parts               []int16
		ids                 [][16]byte
		flows               []*[16]byte
		outcomes, nss, tags []*string
		ats, dispatched     []*int64
	)
	for _, ev := range evs {
		if ev.Source == nil {
			if err := w.QueueCompletion(b, ev); err != nil {
				return err
			}
			continue
		}
		if _, _, err := w.completionInsert(ev); err != nil {
			return err
		}
		var flow *[16]byte
		if ev.Source.FlowID != nil {
			f := dbutil.UUID(*ev.Source.FlowID)
			flow = &f
		}
		outcome, at := ev.Outcome, ev.OccurredAtMs
		parts, ids, flows, outcomes = append(parts, ev.ID.Partition), append(ids, dbutil.UUID(ev.ID.UUID)), append(flows, flow), append(outcomes, &outcome)
		nss, tags, ats, dispatched = append(nss, ev.Source.Namespace), append(tags, ev.Source.InstanceTag), append(ats, &at), append(dispatched, ev.DispatchedAtMs)
	}
	if len(ids) > 0 && !w.discard {
		b.Queue(w.completionsSQL, parts, ids, flows, outcomes, nss, tags, ats, dispatched)
	}
	return nil
}

// The outbox tables, by the names ff_outbox_trim and ff_outbox_partition
// record them under.
const (
	LeaseTable      = "ff_lease_event"
	CompletionTable = "ff_completion_event"
)
