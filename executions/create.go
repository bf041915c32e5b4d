package executions

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// CreateParams describe a new execution.
type CreateParams struct {
	// ID of the new execution; uuid.Nil picks a random one. Creating an id
	// that exists is a validation error.
	ID uuid.UUID
	// FlowID places the execution in a flow created by CreateFlow
	// (co-located in the flow's partition); uuid.Nil makes a solo
	// execution, partitioned by lane.
	FlowID uuid.UUID
	// Lane the execution waits in; workers claim by lane. Required.
	Lane      string
	Namespace string
	// Tags are free key/value pairs; the "cairn.instance_id" tag is copied
	// onto every outbox row of the execution.
	Tags     map[string]string
	Priority int32
	Payload  []byte
	// Capabilities a worker must offer to claim the execution.
	RequiredCapabilities []string
	RetryPolicy          RetryPolicy
	// DelayUntil, when set, parks the execution until then (delayed).
	DelayUntil time.Time
	// Deadline, when set, is when a non-terminal execution expires.
	Deadline time.Time
}

func (s *Store) validateCreate(p *CreateParams) error {
	if err := ff.CheckText("lane", p.Lane, true, ff.MaxName); err != nil {
		return err
	}
	if err := ff.CheckText("namespace", p.Namespace, false, ff.MaxName); err != nil {
		return err
	}
	for k, v := range p.Tags {
		if err := ff.CheckText("tag key", k, true, ff.MaxName); err != nil {
			return err
		}
		if err := ff.CheckText("tag "+k, v, false, ff.MaxTagValue); err != nil {
			return err
		}
	}
	for _, c := range p.RequiredCapabilities {
		if err := ff.CheckText("required_capabilities", c, true, ff.MaxName); err != nil {
			return err
		}
	}
	if err := p.RetryPolicy.Validate(); err != nil {
		return err
	}
	return nil
}

// PartitionFor returns the partition an execution with these params lives in.
func (s *Store) PartitionFor(flowID uuid.UUID, lane string) int16 {
	if flowID != uuid.Nil {
		return s.parts.ForFlow(flowID)
	}
	return s.parts.ForLane(lane)
}

// Create inserts a new execution: runnable and eligible now, or delayed
// until p.DelayUntil. Its lane is registered (a trigger registers the lane of
// every row inserted into ff_exec_core, by ffriver or by plain SQL).
func (s *Store) Create(ctx context.Context, p CreateParams) (ff.ExecutionID, error) {
	var id ff.ExecutionID
	err := s.inTx(ctx, "create execution", func(tx pgx.Tx) error {
		var err error
		id, err = s.CreateTx(ctx, tx, p)
		return err
	})
	return id, err
}

const createSQL = `
INSERT INTO {S}ff_exec_core
  (partition_key, execution_id, flow_id, lane_id, required_capabilities, attempt_index,
   lifecycle_phase, ownership_state, eligibility_state, public_state, attempt_state, blocking_reason,
   priority, created_at_ms, deadline_at_ms, delay_until_ms, payload, policy, raw_fields)
VALUES ($1, $2, $3, $4, $5, 0, 'runnable', 'unowned', $6, $7, 'pending_first_attempt', $8,
        $9, $10, $11, $12, $13, $14, $15)
ON CONFLICT (partition_key, execution_id) DO NOTHING`

// CreateTx is Create inside the caller's transaction.
func (s *Store) CreateTx(ctx context.Context, tx pgx.Tx, p CreateParams) (ff.ExecutionID, error) {
	if err := s.validateCreate(&p); err != nil {
		return ff.ExecutionID{}, err
	}
	now := s.clock.NowMs()
	u := p.ID
	if u == uuid.Nil {
		u = uuid.New()
	}
	id := ff.ExecutionID{Partition: s.PartitionFor(p.FlowID, p.Lane), UUID: u}
	var flowID *uuid.UUID
	if p.FlowID != uuid.Nil {
		f := p.FlowID
		flowID = &f
	}
	elig, public := ff.EligibleNow, ff.PublicWaiting
	var delayUntil, deadline *int64
	var blocking *string
	if !p.DelayUntil.IsZero() {
		d := p.DelayUntil.UnixMilli()
		delayUntil = &d
		elig, public = ff.EligibleNotUntilTime, ff.PublicDelayed
		r := "waiting_for_delay"
		blocking = &r
	}
	if !p.Deadline.IsZero() {
		d := p.Deadline.UnixMilli()
		deadline = &d
	}
	raw := map[string]any{"namespace": nilIfEmpty(p.Namespace), "tags": p.Tags}
	if p.Tags == nil {
		raw["tags"] = map[string]string{}
	}
	rawJSON, err := json.Marshal(raw)
	if err != nil {
		return ff.ExecutionID{}, fmt.Errorf("create: encoding fields: %w", err)
	}
	policyJSON, err := json.Marshal(Policy{RetryPolicy: p.RetryPolicy})
	if err != nil {
		return ff.ExecutionID{}, fmt.Errorf("create: encoding policy: %w", err)
	}
	caps := p.RequiredCapabilities
	if caps == nil {
		caps = []string{}
	}
	if flowID != nil {
		var ok bool
		if err := tx.QueryRow(ctx, s.sql(`SELECT EXISTS (SELECT 1 FROM {S}ff_flow_core WHERE partition_key = $1 AND flow_id = $2 FOR KEY SHARE)`),
			id.Partition, *flowID).Scan(&ok); err != nil {
			return ff.ExecutionID{}, dbutil.MapErr(err, "create: checking flow")
		}
		if !ok {
			return ff.ExecutionID{}, fmt.Errorf("create: flow %s: %w", *flowID, ff.ErrNotFound)
		}
	}
	tag, err := tx.Exec(ctx, s.sql(createSQL), id.Partition, id.UUID, flowID, p.Lane, caps, elig, public, blocking,
		p.Priority, now, deadline, delayUntil, p.Payload, policyJSON, rawJSON)
	if err != nil {
		return ff.ExecutionID{}, dbutil.MapErr(err, "create execution")
	}
	if tag.RowsAffected() == 0 {
		return ff.ExecutionID{}, ff.Validationf("id", "execution %s already exists", id)
	}
	return id, nil
}

// RegisterLane records a lane so Claim accepts it before any execution was
// created in it. Registering twice is fine.
func (s *Store) RegisterLane(ctx context.Context, lane, by string) error {
	if err := ff.CheckText("lane", lane, true, ff.MaxName); err != nil {
		return err
	}
	_, err := s.pool.Exec(ctx, s.sql(`INSERT INTO {S}ff_lane_registry (lane_id, registered_at_ms, registered_by)
		VALUES ($1, $2, $3) ON CONFLICT (lane_id) DO NOTHING`), lane, s.clock.NowMs(), by)
	return dbutil.MapErr(err, "registering lane "+lane)
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}
