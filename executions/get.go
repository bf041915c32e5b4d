package executions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Execution is an execution's stored state.
type Execution struct {
	ID                 ff.ExecutionID
	FlowID             *uuid.UUID
	Lane               string
	Namespace          string
	Tags               map[string]string
	Priority           int32
	LifecyclePhase     string
	OwnershipState     string
	EligibilityState   string
	PublicState        string
	AttemptState       string
	AttemptIndex       int32
	BlockingReason     *string
	CancellationReason *string
	CancelledBy        *string
	CreatedAtMs        int64
	TerminalAtMs       *int64
	DeadlineAtMs       *int64
	DelayUntilMs       *int64
	StartedAtMs        *int64
	Payload            []byte
	Result             []byte
	Policy             Policy
	LastFailureMessage string
	LeaseReclaimCount  int32
	// Attempt is the row of the current attempt, nil before the first claim
	// and between a retry and its claim.
	Attempt *Attempt
}

// Attempt is one ff_attempt row.
type Attempt struct {
	Index            int32
	WorkerID         *string
	WorkerInstanceID *string
	LeaseID          *uuid.UUID
	Epoch            int64
	LeaseExpiresAtMs *int64
	StartedAtMs      *int64
	TerminalAtMs     *int64
	Outcome          *string
}

// execColumns are the columns scanExecution reads: the execution, then its
// current attempt (LEFT JOIN, so NULLs before the first claim). Payload and
// result are read only when withPayload is set.
func execColumns(withPayload bool) string {
	payload := "e.payload, e.result"
	if !withPayload {
		payload = "NULL::bytea, NULL::bytea"
	}
	return `e.partition_key, e.execution_id, e.flow_id, e.lane_id, e.priority, e.lifecycle_phase, e.ownership_state,
		       e.eligibility_state, e.public_state, e.attempt_state, e.attempt_index, e.blocking_reason,
		       e.cancellation_reason, e.cancelled_by, e.created_at_ms, e.terminal_at_ms, e.deadline_at_ms,
		       e.delay_until_ms, e.started_at_ms, ` + payload + `, e.policy, e.raw_fields, e.lease_reclaim_count,
		       a.attempt_index, a.worker_id, a.worker_instance_id, a.lease_id, a.lease_epoch,
		       a.lease_expires_at_ms, a.started_at_ms, a.terminal_at_ms, a.outcome`
}

// execFrom joins an execution to its current attempt.
const execFrom = `{S}ff_exec_core e
		LEFT JOIN {S}ff_attempt a ON a.partition_key = e.partition_key AND a.execution_id = e.execution_id
		     AND a.attempt_index = e.attempt_index`

// scanExecution reads one row of execColumns.
func scanExecution(row pgx.Row) (*Execution, error) {
	e := &Execution{}
	var raw, policy []byte
	var a Attempt
	var aIdx *int32
	var aEpoch *int64
	err := row.Scan(
		&e.ID.Partition, &e.ID.UUID, &e.FlowID, &e.Lane, &e.Priority, &e.LifecyclePhase, &e.OwnershipState,
		&e.EligibilityState, &e.PublicState, &e.AttemptState, &e.AttemptIndex, &e.BlockingReason,
		&e.CancellationReason, &e.CancelledBy, &e.CreatedAtMs, &e.TerminalAtMs, &e.DeadlineAtMs,
		&e.DelayUntilMs, &e.StartedAtMs, &e.Payload, &e.Result, &policy, &raw, &e.LeaseReclaimCount,
		&aIdx, &a.WorkerID, &a.WorkerInstanceID, &a.LeaseID, &aEpoch,
		&a.LeaseExpiresAtMs, &a.StartedAtMs, &a.TerminalAtMs, &a.Outcome)
	if err != nil {
		return nil, err
	}
	if aIdx != nil {
		a.Index, a.Epoch = *aIdx, *aEpoch
		e.Attempt = &a
	}
	e.Policy = decodePolicy(policy)
	var fields struct {
		Namespace          *string           `json:"namespace"`
		Tags               map[string]string `json:"tags"`
		LastFailureMessage *string           `json:"last_failure_message"`
	}
	_ = json.Unmarshal(raw, &fields) // rows written outside ffriver may hold anything
	if fields.Namespace != nil {
		e.Namespace = *fields.Namespace
	}
	e.Tags = fields.Tags
	if fields.LastFailureMessage != nil {
		e.LastFailureMessage = *fields.LastFailureMessage
	}
	return e, nil
}

// Get reads an execution and its current attempt.
func (s *Store) Get(ctx context.Context, id ff.ExecutionID) (*Execution, error) {
	if err := s.checkID(id); err != nil {
		return nil, err
	}
	e, err := scanExecution(s.pool.QueryRow(ctx, s.sql(`SELECT `+execColumns(true)+` FROM `+execFrom+`
		WHERE e.partition_key = $1 AND e.execution_id = $2`), id.Partition, id.UUID))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("execution %s: %w", id, ff.ErrNotFound)
	}
	if err != nil {
		return nil, dbutil.MapErr(err, "get "+id.String())
	}
	return e, nil
}

// Public states an execution can be in (ff_exec_core.public_state), the
// values ListParams.State accepts.
var publicStates = []string{
	ff.PublicWaiting, ff.PublicDelayed, ff.PublicWaitingChildren, ff.PublicActive, ff.PublicCompleted,
	ff.PublicFailed, ff.PublicCancelled, ff.PublicExpired, ff.PublicSkipped,
}

// PublicStates returns the public states an execution can be in, the values
// ListParams.State accepts.
func PublicStates() []string { return slices.Clone(publicStates) }

// DefaultListLimit is ListParams.Limit unless set; MaxListLimit is the most
// List returns.
const (
	DefaultListLimit = 100
	MaxListLimit     = 10000
)

// ListParams select executions for List. Empty fields match everything.
type ListParams struct {
	// Namespace the executions were created in.
	Namespace string
	// Lane of the executions.
	Lane string
	// State is a public state (PublicStates: waiting, delayed,
	// waiting_children, active, completed, failed, cancelled, expired,
	// skipped).
	State string
	// FlowID: only the members of this flow.
	FlowID uuid.UUID
	// Limit on the executions returned, newest first (default
	// DefaultListLimit, at most MaxListLimit).
	Limit int
}

// List returns the executions matching p, newest first, each with its
// current attempt; payloads and results are not read (Get reads them). It is
// an operator's query: a filter on the namespace, the state or a lane reads
// the executions table without an index of its own.
func (s *Store) List(ctx context.Context, p ListParams) ([]*Execution, error) {
	if p.State != "" && !slices.Contains(publicStates, p.State) {
		return nil, ff.Validationf("state", "%q is not a state: want one of %s", p.State, strings.Join(publicStates, ", "))
	}
	if err := validateText("namespace", p.Namespace, false, 255); err != nil {
		return nil, err
	}
	if err := validateText("lane", p.Lane, false, 255); err != nil {
		return nil, err
	}
	switch {
	case p.Limit < 0 || p.Limit > MaxListLimit:
		return nil, ff.Validationf("limit", "%d is not in 1..%d", p.Limit, MaxListLimit)
	case p.Limit == 0:
		p.Limit = DefaultListLimit
	}
	var flow *uuid.UUID
	if p.FlowID != uuid.Nil {
		flow = &p.FlowID
	}
	rows, err := s.pool.Query(ctx, s.sql(`SELECT `+execColumns(false)+` FROM `+execFrom+`
		WHERE ($1 = '' OR e.raw_fields->>'namespace' = $1)
		  AND ($2 = '' OR e.lane_id = $2)
		  AND ($3 = '' OR e.public_state = $3)
		  AND ($4::uuid IS NULL OR e.flow_id = $4)
		ORDER BY e.created_at_ms DESC, e.partition_key, e.execution_id
		LIMIT $5`), p.Namespace, p.Lane, p.State, flow, p.Limit)
	if err != nil {
		return nil, dbutil.MapErr(err, "list executions")
	}
	defer rows.Close()
	var out []*Execution
	for rows.Next() {
		e, err := scanExecution(rows)
		if err != nil {
			return nil, dbutil.MapErr(err, "list executions")
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, dbutil.MapErr(err, "list executions")
	}
	return out, nil
}

// Streams of HistoryEvent.
const (
	StreamLease      = "lease"
	StreamCompletion = "completion"
)

// HistoryEvent is one outbox row about an execution: a lease event
// (ff_lease_event) or a completion event (ff_completion_event).
type HistoryEvent struct {
	// Stream is StreamLease or StreamCompletion.
	Stream string
	// EventID is the row's event_id in its table.
	EventID int64
	// Type is the lease event type (acquired, renewed, expired, reclaimed,
	// revoked) or the completion outcome (success, failed, expired,
	// cancelled, skipped).
	Type         string
	OccurredAtMs int64
	// AttemptIndex, LeaseEpoch, LeaseID and WorkerInstanceID are set on
	// lease events.
	AttemptIndex     *int32
	LeaseEpoch       *int64
	LeaseID          *string
	WorkerInstanceID *string
	// DispatchedAtMs is set on a completion event of a flow member once its
	// cascade was dispatched.
	DispatchedAtMs *int64
}

// DefaultHistoryLimit is History's limit unless given.
const DefaultHistoryLimit = 100

// History returns the execution's newest outbox events, lease and
// completion, oldest first: at most limit of them (0: DefaultHistoryLimit).
// Events retention deleted are gone. Lease events have no index by
// execution, so this reads the lease outbox in full: an operator's query.
func (s *Store) History(ctx context.Context, id ff.ExecutionID, limit int) ([]HistoryEvent, error) {
	if err := s.checkID(id); err != nil {
		return nil, err
	}
	switch {
	case limit < 0:
		return nil, ff.Validationf("limit", "%d is negative", limit)
	case limit == 0:
		limit = DefaultHistoryLimit
	}
	rows, err := s.pool.Query(ctx, s.sql(`SELECT * FROM (
		SELECT 'lease' AS stream, event_id, event_type, occurred_at_ms, attempt_index, lease_epoch, lease_id,
		       worker_instance_id, NULL::bigint AS dispatched_at_ms
		FROM {S}ff_lease_event WHERE partition_key = $1 AND execution_id = $2::uuid::text
		UNION ALL
		SELECT 'completion', event_id, outcome, occurred_at_ms, NULL, NULL, NULL, NULL, dispatched_at_ms
		FROM {S}ff_completion_event WHERE partition_key = $1 AND execution_id = $2
		ORDER BY occurred_at_ms DESC, stream, event_id DESC
		LIMIT $3) h ORDER BY occurred_at_ms, stream DESC, event_id`), id.Partition, id.UUID, limit)
	if err != nil {
		return nil, dbutil.MapErr(err, "history of "+id.String())
	}
	defer rows.Close()
	var out []HistoryEvent
	for rows.Next() {
		var h HistoryEvent
		if err := rows.Scan(&h.Stream, &h.EventID, &h.Type, &h.OccurredAtMs, &h.AttemptIndex, &h.LeaseEpoch, &h.LeaseID,
			&h.WorkerInstanceID, &h.DispatchedAtMs); err != nil {
			return nil, dbutil.MapErr(err, "history of "+id.String())
		}
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		return nil, dbutil.MapErr(err, "history of "+id.String())
	}
	return out, nil
}
