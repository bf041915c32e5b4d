package executions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

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

// Get reads an execution and its current attempt.
func (s *Store) Get(ctx context.Context, id ff.ExecutionID) (*Execution, error) {
	if err := s.checkID(id); err != nil {
		return nil, err
	}
	e := &Execution{ID: id}
	var raw, policy []byte
	var a Attempt
	var aIdx *int32
	var aEpoch *int64
	err := s.pool.QueryRow(ctx, s.sql(`
		SELECT e.flow_id, e.lane_id, e.priority, e.lifecycle_phase, e.ownership_state, e.eligibility_state,
		       e.public_state, e.attempt_state, e.attempt_index, e.blocking_reason, e.cancellation_reason,
		       e.cancelled_by, e.created_at_ms, e.terminal_at_ms, e.deadline_at_ms, e.delay_until_ms,
		       e.started_at_ms, e.payload, e.result, e.policy, e.raw_fields, e.lease_reclaim_count,
		       a.attempt_index, a.worker_id, a.worker_instance_id, a.lease_id, a.lease_epoch,
		       a.lease_expires_at_ms, a.started_at_ms, a.terminal_at_ms, a.outcome
		FROM {S}ff_exec_core e
		LEFT JOIN {S}ff_attempt a ON a.partition_key = e.partition_key AND a.execution_id = e.execution_id
		     AND a.attempt_index = e.attempt_index
		WHERE e.partition_key = $1 AND e.execution_id = $2`), id.Partition, id.UUID).Scan(
		&e.FlowID, &e.Lane, &e.Priority, &e.LifecyclePhase, &e.OwnershipState, &e.EligibilityState,
		&e.PublicState, &e.AttemptState, &e.AttemptIndex, &e.BlockingReason, &e.CancellationReason,
		&e.CancelledBy, &e.CreatedAtMs, &e.TerminalAtMs, &e.DeadlineAtMs, &e.DelayUntilMs,
		&e.StartedAtMs, &e.Payload, &e.Result, &policy, &raw, &e.LeaseReclaimCount,
		&aIdx, &a.WorkerID, &a.WorkerInstanceID, &a.LeaseID, &aEpoch,
		&a.LeaseExpiresAtMs, &a.StartedAtMs, &a.TerminalAtMs, &a.Outcome)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("execution %s: %w", id, ff.ErrNotFound)
	}
	if err != nil {
		return nil, dbutil.MapErr(err, "get "+id.String())
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
