package upstream

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// CreateFlow writes a flow row as upstream's create_flow does.
func CreateFlow(ctx context.Context, pool *pgxpool.Pool, part int16, flow uuid.UUID, nowMs int64) error {
	_, err := pool.Exec(ctx, `INSERT INTO ff_flow_core (partition_key, flow_id, graph_revision, public_flow_state, created_at_ms, raw_fields)
		VALUES ($1, $2, 0, 'open', $3, '{}') ON CONFLICT (partition_key, flow_id) DO NOTHING`, part, flow, nowMs)
	if err != nil {
		return fmt.Errorf("upstream create flow: %w", err)
	}
	return nil
}

// Depend stages and applies the edges upstreams → down as upstream's flow
// staging does: the group's policy first (JSON as upstream encodes it:
// {"kind": …, "k": …, "on_satisfied": …}, k_target left 0), then per edge
// an ff_edge row marked applied and running_count+1 on the group. The
// downstream is left as upstream leaves it: nothing blocks it (upstream's
// own tests then set it blocked by hand, as blockDownstream does here).
func Depend(ctx context.Context, pool *pgxpool.Pool, part int16, flow uuid.UUID, down uuid.UUID, ups []uuid.UUID, policy []byte, nowMs int64) error {
	return tx(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO ff_edge_group (partition_key, flow_id, downstream_eid, policy) VALUES ($1, $2, $3, $4)
			ON CONFLICT (partition_key, flow_id, downstream_eid) DO UPDATE SET policy = EXCLUDED.policy`, part, flow, down, policy); err != nil {
			return fmt.Errorf("upstream edge group policy: %w", err)
		}
		for _, up := range ups {
			var rev int64
			if err := tx.QueryRow(ctx, `UPDATE ff_flow_core SET graph_revision = graph_revision + 1
				WHERE partition_key = $1 AND flow_id = $2 RETURNING graph_revision`, part, flow).Scan(&rev); err != nil {
				return fmt.Errorf("upstream stage edge: %w", err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO ff_edge (partition_key, flow_id, edge_id, upstream_eid, downstream_eid, policy, policy_version)
				VALUES ($1, $2, $3, $4, $5, jsonb_build_object('edge_state', 'applied', 'applied_at_ms', $6::bigint), $7)`,
				part, flow, uuid.New(), up, down, nowMs, rev); err != nil {
				return fmt.Errorf("upstream stage edge: %w", err)
			}
			if _, err := tx.Exec(ctx, `UPDATE ff_edge_group SET running_count = running_count + 1
				WHERE partition_key = $1 AND flow_id = $2 AND downstream_eid = $3`, part, flow, down); err != nil {
				return fmt.Errorf("upstream apply edge: %w", err)
			}
		}
		// Upstream's tests block the downstream by hand; this is the state
		// ffriver gives a downstream waiting for its group.
		_, err := tx.Exec(ctx, `UPDATE ff_exec_core SET eligibility_state = 'blocked_by_dependencies', public_state = 'waiting_children',
			blocking_reason = 'waiting_for_children' WHERE partition_key = $1 AND execution_id = $2`, part, down)
		return err
	})
}

// Dispatch is upstream's dispatch_completion of one completion event: it
// claims the event (dispatched_at_ms, committed on its own), then advances
// each downstream edge group of the event's execution in a transaction of
// its own (advanceGroup). It returns how many groups it advanced; an event
// already dispatched advances none.
func Dispatch(ctx context.Context, pool *pgxpool.Pool, eventID, nowMs int64) (int, error) {
	var part int16
	var exec uuid.UUID
	var flow *uuid.UUID
	var outcome string
	err := pool.QueryRow(ctx, `UPDATE ff_completion_event SET dispatched_at_ms = $2 WHERE event_id = $1 AND dispatched_at_ms IS NULL
		RETURNING partition_key, execution_id, flow_id, outcome`, eventID, nowMs).Scan(&part, &exec, &flow, &outcome)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil || flow == nil {
		return 0, err
	}
	rows, err := pool.Query(ctx, `SELECT downstream_eid FROM ff_edge WHERE partition_key = $1 AND flow_id = $2 AND upstream_eid = $3`, part, *flow, exec)
	if err != nil {
		return 0, err
	}
	downs, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return 0, err
	}
	for _, d := range downs {
		if err := advanceGroup(ctx, pool, part, *flow, d, exec, outcome, nowMs); err != nil {
			return 0, err
		}
	}
	return len(downs), nil
}

// advanceGroup counts one outcome in a group as upstream's
// advance_edge_group does (no one-shot resolution: every call evaluates),
// and acts on satisfied (downstream eligible; with cancel_remaining the
// other non-terminal upstreams flagged) and impossible (downstream skipped
// with a completion "skipped").
func advanceGroup(ctx context.Context, pool *pgxpool.Pool, part int16, flow, down, winner uuid.UUID, outcome string, nowMs int64) error {
	return tx(ctx, pool, func(tx pgx.Tx) error {
		var kind, on string
		var k, success, fail, skip, running int
		var flagged bool
		err := tx.QueryRow(ctx, `SELECT COALESCE(policy->>'kind', 'all_of'), COALESCE(policy->>'on_satisfied', 'cancel_remaining'),
			COALESCE((policy->>'k')::int, 0), success_count, fail_count, skip_count, running_count, cancel_siblings_pending_flag
			FROM ff_edge_group WHERE partition_key = $1 AND flow_id = $2 AND downstream_eid = $3 FOR UPDATE`, part, flow, down).
			Scan(&kind, &on, &k, &success, &fail, &skip, &running, &flagged)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		if running > 0 {
			running--
		}
		switch outcome {
		case "success":
			success++
		case "skipped":
			skip++
		default:
			fail++
		}
		if _, err := tx.Exec(ctx, `UPDATE ff_edge_group SET success_count = $4, fail_count = $5, skip_count = $6, running_count = $7
			WHERE partition_key = $1 AND flow_id = $2 AND downstream_eid = $3`, part, flow, down, success, fail, skip, running); err != nil {
			return err
		}
		total := success + fail + skip + running
		satisfied, impossible := false, false
		switch kind {
		case "any_of":
			satisfied, impossible = success >= 1, total > 0 && fail+skip >= total
		case "quorum":
			satisfied, impossible = success >= k, total-(fail+skip) < k
		default:
			satisfied, impossible = total > 0 && success == total, fail+skip > 0
		}
		switch {
		case satisfied:
			if _, err := tx.Exec(ctx, `UPDATE ff_exec_core SET eligibility_state = 'eligible_now'
				WHERE partition_key = $1 AND execution_id = $2 AND lifecycle_phase NOT IN ('terminal', 'cancelled')`, part, down); err != nil {
				return err
			}
			if kind == "all_of" || on != "cancel_remaining" || flagged {
				return nil
			}
			rows, err := tx.Query(ctx, `SELECT c.execution_id::text FROM ff_edge e JOIN ff_exec_core c
				ON c.partition_key = e.partition_key AND c.execution_id = e.upstream_eid
				WHERE e.partition_key = $1 AND e.flow_id = $2 AND e.downstream_eid = $3 AND e.upstream_eid <> $4
				  AND c.lifecycle_phase NOT IN ('terminal', 'cancelled') AND c.public_state <> 'skipped'`, part, flow, down, winner)
			if err != nil {
				return err
			}
			members, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO ff_pending_cancel_groups (partition_key, flow_id, downstream_eid, enqueued_at_ms)
				VALUES ($1, $2, $3, (extract(epoch FROM clock_timestamp()) * 1000)::bigint) ON CONFLICT DO NOTHING`, part, flow, down); err != nil {
				return err
			}
			_, err = tx.Exec(ctx, `UPDATE ff_edge_group SET cancel_siblings_pending_flag = true, cancel_siblings_pending_members = $4
				WHERE partition_key = $1 AND flow_id = $2 AND downstream_eid = $3`, part, flow, down, members)
			return err
		case impossible:
			tag, err := tx.Exec(ctx, `UPDATE ff_exec_core SET lifecycle_phase = 'terminal', eligibility_state = 'not_applicable',
				public_state = 'skipped', attempt_state = 'attempt_terminal',
				terminal_at_ms = COALESCE(terminal_at_ms, (extract(epoch FROM clock_timestamp()) * 1000)::bigint)
				WHERE partition_key = $1 AND execution_id = $2 AND lifecycle_phase NOT IN ('terminal', 'cancelled')`, part, down)
			if err != nil || tag.RowsAffected() == 0 {
				return err
			}
			return completion(ctx, tx, ID{Partition: part, UUID: down}, "skipped", nowMs)
		}
		return nil
	})
}
