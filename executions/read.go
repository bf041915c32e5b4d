package executions

import (
	"context"
	"errors"
	"fmt"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// attemptsSQL reads an execution's attempts ($1 partition, $2 UUID) by
// primary key.
const attemptsSQL = `SELECT attempt_index, worker_id, worker_instance_id, lease_id, lease_epoch,
		       lease_expires_at_ms, started_at_ms, terminal_at_ms, outcome
		FROM {S}ff_attempt WHERE partition_key = $1 AND execution_id = $2 ORDER BY attempt_index`

// Attempts returns every ff_attempt row of an execution, oldest first. An
// execution never claimed has none; an unknown one has none either (Get
// tells the two apart).
func (s *Store) Attempts(ctx context.Context, id ff.ExecutionID) ([]Attempt, error) {
	if err := s.checkID(id); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, s.sql(attemptsSQL), id.Partition, id.UUID)
	if err != nil {
		return nil, dbutil.MapErr(err, "attempts of "+id.String())
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Attempt, error) {
		var a Attempt
		err := r.Scan(&a.Index, &a.WorkerID, &a.WorkerInstanceID, &a.LeaseID, &a.Epoch,
			&a.LeaseExpiresAtMs, &a.StartedAtMs, &a.TerminalAtMs, &a.Outcome)
		return a, err
	})
	if err != nil {
		return nil, dbutil.MapErr(err, "attempts of "+id.String())
	}
	return out, nil
}

// Flow is a flow's stored state: its row, members, edges and edge groups.
type Flow struct {
	ID        uuid.UUID
	Partition int16
	// State is ff_flow_core.public_flow_state.
	State        string
	Revision     int64
	CreatedAtMs  int64
	TerminalAtMs *int64
	// Members are the flow's executions, newest first (List's order), at
	// most MaxListLimit of them; Truncated says there were more.
	Members   []*Execution
	Truncated bool
	Edges     []Edge
	// Groups are the edge groups, one per downstream with dependencies.
	Groups []EdgeGroup
}

// Edge is one dependency upstream → downstream of a flow.
type Edge struct {
	Upstream, Downstream uuid.UUID
	// UpstreamOutcome is the upstream's terminal outcome once the edge
	// counted it (success, failed, expired, cancelled, skipped).
	UpstreamOutcome *string
	ResolvedAtMs    *int64
}

// EdgeGroup is how a downstream's upstream edges combine, and how far.
type EdgeGroup struct {
	Downstream uuid.UUID
	Policy     EdgePolicy
	// Success, Fail, Skip and Running count the upstreams by outcome
	// (Running: not yet terminal).
	Success, Fail, Skip, Running int
	// State is GroupPending, GroupSatisfied or GroupImpossible.
	State        string
	ResolvedAtMs *int64
	// CancelPending is set while the group's still-running siblings wait
	// for the edge-cancel dispatcher; CancelMembers are they.
	CancelPending bool
	CancelMembers []string
}

// GetFlow reads a flow: its row, its members (through List), its edges
// and its edge groups. Everything is in the flow's one partition, read
// through its primary key and the flow indexes. An unknown flow is
// ff.ErrNotFound.
func (s *Store) GetFlow(ctx context.Context, id uuid.UUID) (*Flow, error) {
	f := &Flow{ID: id, Partition: s.parts.ForFlow(id)}
	err := s.pool.QueryRow(ctx, s.sql(`SELECT public_flow_state, graph_revision, created_at_ms, terminal_at_ms
		FROM {S}ff_flow_core WHERE partition_key = $1 AND flow_id = $2`), f.Partition, id).
		Scan(&f.State, &f.Revision, &f.CreatedAtMs, &f.TerminalAtMs)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("flow %s: %w", id, ff.ErrNotFound)
	}
	if err != nil {
		return nil, dbutil.MapErr(err, "get flow "+id.String())
	}
	members, err := s.List(ctx, ListParams{FlowID: id, Limit: MaxListLimit})
	if err != nil {
		return nil, err
	}
	f.Members, f.Truncated = members, len(members) == MaxListLimit
	rows, err := s.pool.Query(ctx, s.sql(`SELECT upstream_eid, downstream_eid, upstream_outcome, resolved_at_ms
		FROM {S}ff_edge WHERE partition_key = $1 AND flow_id = $2 ORDER BY downstream_eid, upstream_eid`), f.Partition, id)
	if err != nil {
		return nil, dbutil.MapErr(err, "edges of flow "+id.String())
	}
	if f.Edges, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Edge, error) {
		var e Edge
		err := r.Scan(&e.Upstream, &e.Downstream, &e.UpstreamOutcome, &e.ResolvedAtMs)
		return e, err
	}); err != nil {
		return nil, dbutil.MapErr(err, "edges of flow "+id.String())
	}
	rows, err = s.pool.Query(ctx, s.sql(`SELECT downstream_eid, policy, success_count, fail_count, skip_count, running_count,
		       group_state, resolved_at_ms, cancel_siblings_pending_flag, cancel_siblings_pending_members
		FROM {S}ff_edge_group WHERE partition_key = $1 AND flow_id = $2 ORDER BY downstream_eid`), f.Partition, id)
	if err != nil {
		return nil, dbutil.MapErr(err, "edge groups of flow "+id.String())
	}
	if f.Groups, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (EdgeGroup, error) {
		var g EdgeGroup
		var policy []byte
		var success, fail, skip, running int32
		err := r.Scan(&g.Downstream, &policy, &success, &fail, &skip, &running, &g.State, &g.ResolvedAtMs,
			&g.CancelPending, &g.CancelMembers)
		g.Policy = decodeEdgePolicy(policy)
		g.Success, g.Fail, g.Skip, g.Running = int(success), int(fail), int(skip), int(running)
		return g, err
	}); err != nil {
		return nil, dbutil.MapErr(err, "edge groups of flow "+id.String())
	}
	return f, nil
}
