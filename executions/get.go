package executions

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Execution is an execution's stored state. Its five state columns are
// the values of package ff's constants: LifecyclePhase ff.Phase*,
// OwnershipState ff.Ownership*, EligibilityState ff.Eligible*,
// PublicState ff.Public* (PublicStates), AttemptState ff.Attempt*. What
// a user watches is PublicState: a delayed execution is "delayed" until
// it comes due, then "waiting" (claimable); a claimed one "active"; an
// ended one "completed", "failed", "cancelled" or "expired" (a lease that
// ran out with no retry left, or a passed deadline), with LifecyclePhase
// "terminal".
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

// getSQL reads one execution ($1 partition, $2 UUID) by primary key.
func getSQL() string {
	return `SELECT ` + execColumns(true) + ` FROM ` + execFrom + `
		WHERE e.partition_key = $1 AND e.execution_id = $2`
}

// Get reads an execution and its current attempt. An execution that
// execution retention removed is a *ff.RemovedError (which matches
// ff.ErrNotFound) while its tombstone is kept; an unknown one is
// ff.ErrNotFound.
func (s *Store) Get(ctx context.Context, id ff.ExecutionID) (*Execution, error) {
	if err := s.checkID(id); err != nil {
		return nil, err
	}
	e, err := scanExecution(s.pool.QueryRow(ctx, s.sql(getSQL()), id.Partition, id.UUID))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, s.removed(ctx, id)
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
	// ID: an execution id ({fp:N}:<uuid>) or a prefix of one, parsed with
	// ParseIDPrefix; the zero IDPrefix matches everything.
	ID IDPrefix
	// After, when set, lists the executions after this one in List's
	// order: the next page of a keyset-paginated list (ListCursorOf the
	// last execution of the previous page).
	After *ListCursor
	// Limit on the executions returned, newest first, 1..MaxListLimit. 0
	// means DefaultListLimit (a page of none means nothing); negative is an
	// error.
	Limit int
}

// List returns the executions matching p, newest first (created_at_ms,
// then partition and id, all descending), each with its current attempt;
// payloads and results are not read (Get reads them).
//
// Every filter is served by an index, and the order with it, so a page of
// a list over millions of executions reads about a page of rows (migration
// 0006_list_indexes; the filters combine, the most selective index leads):
//
//   - no filter: ff_exec_core_created_idx (created_at_ms, partition_key,
//     execution_id), read backwards;
//   - Namespace: ff_exec_core_namespace_idx ((raw_fields->>'namespace'),
//     created_at_ms, …);
//   - Lane: ff_exec_core_lane_idx (lane_id, created_at_ms, …);
//   - State: ff_exec_core_state_idx (public_state, created_at_ms, …);
//   - FlowID: ff_exec_core_flow_idx (partition_key, flow_id) in the flow's
//     one partition, then a sort of the flow's members;
//   - ID: the primary key (partition_key, execution_id), a range of ids in
//     the given partition or in each partition (ParseIDPrefix bounds how
//     short a prefix may be).
//
// The keyset position (After) continues in the same index. The four
// indexes cost the hot path nothing measurable here: 4,000 creates, then
// 4,000 claims and completes, 8 clients, three rounds each way, ran at
// 4,700-5,200 and 1,200-1,800 per second without them and 4,900-5,300
// and 1,600-1,700 with them (the spread is the shared machine's noise).
func (s *Store) List(ctx context.Context, p ListParams) ([]*Execution, error) {
	q, args, err := s.listSQL(p)
	if err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, q, args...)
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

// listSQL is List's statement for p, schema-qualified, and its arguments.
func (s *Store) listSQL(p ListParams) (string, []any, error) {
	if p.State != "" && !slices.Contains(publicStates, p.State) {
		return "", nil, ff.Validationf("state", "%s is not a state: want one of %s", ff.Excerpt(p.State), strings.Join(publicStates, ", "))
	}
	if err := ff.CheckText("namespace", p.Namespace, false, ff.MaxName); err != nil {
		return "", nil, err
	}
	if err := ff.CheckText("lane", p.Lane, false, ff.MaxName); err != nil {
		return "", nil, err
	}
	switch {
	case p.Limit < 0 || p.Limit > MaxListLimit:
		return "", nil, ff.Validationf("limit", "%d is not in 1..%d", p.Limit, MaxListLimit)
	case p.Limit == 0:
		p.Limit = DefaultListLimit
	}
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if p.Namespace != "" {
		where = append(where, "e.raw_fields->>'namespace' = "+arg(p.Namespace))
	}
	if p.Lane != "" {
		where = append(where, "e.lane_id = "+arg(p.Lane))
	}
	if p.State != "" {
		where = append(where, "e.public_state = "+arg(p.State))
	}
	if p.FlowID != uuid.Nil {
		where = append(where, "e.partition_key = "+arg(s.parts.ForFlow(p.FlowID))+" AND e.flow_id = "+arg(p.FlowID))
	}
	if !p.ID.IsZero() {
		if p.ID.Partition != nil {
			if !s.parts.Contains(*p.ID.Partition) {
				return "", nil, ff.Validationf("execution_id", "partition %d is outside this schema's 0..%d", *p.ID.Partition, int(s.parts)-1)
			}
			where = append(where, "e.partition_key = "+arg(*p.ID.Partition))
		} else {
			// Every partition, spelt out so that the primary key serves
			// the id range in each.
			all := make([]int16, int(s.parts))
			for i := range all {
				all[i] = int16(i)
			}
			where = append(where, "e.partition_key = ANY("+arg(all)+"::smallint[])")
		}
		where = append(where, "e.execution_id BETWEEN "+arg(p.ID.Low)+" AND "+arg(p.ID.High))
	}
	if c := p.After; c != nil {
		where = append(where, "(e.created_at_ms, e.partition_key, e.execution_id) < ("+arg(c.CreatedAtMs)+", "+arg(c.Partition)+", "+arg(c.UUID)+")")
	}
	q := `SELECT ` + execColumns(false) + ` FROM ` + execFrom
	if len(where) > 0 {
		q += "\n\t\tWHERE " + strings.Join(where, "\n\t\t  AND ")
	}
	q += "\n\t\tORDER BY e.created_at_ms DESC, e.partition_key DESC, e.execution_id DESC\n\t\tLIMIT " + arg(p.Limit)
	return s.sql(q), args, nil
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

// historySQL reads an execution's newest outbox events ($1 partition, $2
// UUID, $3 limit), oldest first: each outbox through its index by execution
// (ff_lease_event_lookup_idx, ff_completion_event_lookup_idx), so it reads
// the execution's own events only, however large the outbox.
const historySQL = `SELECT * FROM (
		SELECT 'lease' AS stream, event_id, event_type, occurred_at_ms, attempt_index, lease_epoch, lease_id,
		       worker_instance_id, NULL::bigint AS dispatched_at_ms
		FROM {S}ff_lease_event WHERE partition_key = $1 AND execution_id = $2::uuid::text
		UNION ALL
		SELECT 'completion', event_id, outcome, occurred_at_ms, NULL, NULL, NULL, NULL, dispatched_at_ms
		FROM {S}ff_completion_event WHERE partition_key = $1 AND execution_id = $2
		ORDER BY occurred_at_ms DESC, stream, event_id DESC
		LIMIT $3) h ORDER BY occurred_at_ms, stream DESC, event_id`

// History returns the execution's newest outbox events, lease and
// completion, oldest first: at most limit of them (0: DefaultHistoryLimit).
// Events retention deleted are gone. Both outboxes are read through their
// index by execution (historySQL): the execution's own events, not a range
// of the outbox. An unknown execution has no history (no error).
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
	rows, err := s.pool.Query(ctx, s.sql(historySQL), id.Partition, id.UUID, limit)
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
