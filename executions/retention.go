package executions

import (
	"context"
	"errors"
	"fmt"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/actions"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Execution retention: the execution_retention scanner's action. See
// removeExecutions.

// removeExecutions is the execution_retention action: in the caller's
// transaction, it examines at most p.Limit terminal executions of
// p.Partition past the cutoff (RetentionSQL), oldest first from p.After,
// and deletes
//
//   - each solo execution (no flow) among them, with its attempts;
//   - each flow one of them belongs to whose every member is past the
//     cutoff (and inside the filter): all its members with their
//     attempts, its edges, edge groups, pending cancel groups and its
//     ff_flow_core row. A flow with any member not past retention stays
//     whole: retention never removes an execution from a flow that is
//     still running, or partly recent.
//
// It never waits for a lock: a row another transaction holds (the
// execution, or any row of its flow) keeps its execution or flow in place
// for a later run (SKIP LOCKED). Every removed execution leaves a tombstone
// (ff_exec_removed), so Get says it was removed by retention; tombstones
// written before the cutoff are expired, at most p.Limit per call. Events
// in the outboxes are not touched: outbox retention is separate, and an
// execution's events may outlive it.
//
// A flow is removed whole even when it has more members than the limit, so
// one call may remove more than p.Limit executions.
func (s *Store) removeExecutions(ctx context.Context, tx pgx.Tx, p actions.RemoveParams) (actions.RemoveResult, error) {
	var res actions.RemoveResult
	if p.Limit < 1 || p.Limit > actions.MaxRemoveLimit {
		return res, ff.Validationf("limit", "%d is outside 1..%d", p.Limit, actions.MaxRemoveLimit)
	}
	if !s.parts.Contains(p.Partition) {
		return res, ff.Validationf("partition", "%d is outside the schema's %s", p.Partition, s.parts)
	}
	ns, tk, tv := actions.FilterParams(p.Filter)
	var afterMs *int64
	var afterID *uuid.UUID
	if p.After != nil {
		afterMs, afterID = &p.After.TerminalAtMs, &p.After.ID
	}
	rows, err := tx.Query(ctx, s.sql(`SELECT c.execution_id, c.flow_id, c.terminal_at_ms FROM {S}ff_exec_core c
		WHERE c.partition_key = $1 AND `+actions.RetentionSQL("c", 2, 3, 4, 5)+`
		  AND ($6::bigint IS NULL OR (c.terminal_at_ms, c.execution_id) > ($6::bigint, $7::uuid))
		ORDER BY c.terminal_at_ms, c.execution_id
		LIMIT $8`), p.Partition, p.CutoffMs, ns, tk, tv, afterMs, afterID, p.Limit)
	if err != nil {
		return res, dbutil.MapErr(err, "reading executions past retention")
	}
	var solo []uuid.UUID
	var flows []uuid.UUID
	inFlow := map[uuid.UUID]int{}
	for rows.Next() {
		var k actions.RemoveKey
		var flow *uuid.UUID
		if err := rows.Scan(&k.ID, &flow, &k.TerminalAtMs); err != nil {
			rows.Close()
			return res, dbutil.MapErr(err, "reading executions past retention")
		}
		res.Candidates++
		res.Next = &k
		if flow == nil {
			solo = append(solo, k.ID)
			continue
		}
		if inFlow[*flow] == 0 {
			flows = append(flows, *flow)
		}
		inFlow[*flow]++
	}
	if err := rows.Err(); err != nil {
		return res, dbutil.MapErr(err, "reading executions past retention")
	}
	if solo, err = s.lockSolo(ctx, tx, p, solo); err != nil {
		return res, err
	}
	if flows, err = s.lockWholeFlows(ctx, tx, p, flows); err != nil {
		return res, err
	}
	candidatesRemoved := len(solo)
	for _, f := range flows {
		candidatesRemoved += inFlow[f]
	}
	res.Kept = res.Candidates - candidatesRemoved
	if len(solo) > 0 || len(flows) > 0 {
		if err := tx.QueryRow(ctx, s.sql(`WITH e AS (
			DELETE FROM {S}ff_exec_core c
			WHERE c.partition_key = $1 AND (c.execution_id = ANY($2) OR c.flow_id = ANY($3)) AND `+actions.RetentionSQL("c", 5, 6, 7, 8)+`
			RETURNING c.execution_id, c.flow_id, c.raw_fields, c.public_state, c.terminal_at_ms),
		a AS (DELETE FROM {S}ff_attempt a USING e WHERE a.partition_key = $1 AND a.execution_id = e.execution_id),
		ed AS (DELETE FROM {S}ff_edge WHERE partition_key = $1 AND flow_id = ANY($3)),
		g AS (DELETE FROM {S}ff_edge_group WHERE partition_key = $1 AND flow_id = ANY($3)),
		pc AS (DELETE FROM {S}ff_pending_cancel_groups WHERE partition_key = $1 AND flow_id = ANY($3)),
		f AS (DELETE FROM {S}ff_flow_core WHERE partition_key = $1 AND flow_id = ANY($3)),
		t AS (INSERT INTO {S}ff_exec_removed AS r
			(partition_key, execution_id, flow_id, namespace, tags, public_state, terminal_at_ms, removed_at_ms)
			SELECT $1, e.execution_id, e.flow_id, e.raw_fields->>'namespace', e.raw_fields->'tags', e.public_state, e.terminal_at_ms, $4
			FROM e
			ON CONFLICT (partition_key, execution_id) DO UPDATE SET flow_id = EXCLUDED.flow_id, namespace = EXCLUDED.namespace,
				tags = EXCLUDED.tags, public_state = EXCLUDED.public_state, terminal_at_ms = EXCLUDED.terminal_at_ms,
				removed_at_ms = EXCLUDED.removed_at_ms)
		SELECT (SELECT count(*) FROM e), (SELECT count(*) FROM e WHERE flow_id IS NOT NULL)`),
			p.Partition, solo, flows, s.clock.NowMs(), p.CutoffMs, ns, tk, tv).Scan(&res.Executions, &res.FlowMembers); err != nil {
			return res, dbutil.MapErr(err, "removing executions past retention")
		}
		res.Flows = int64(len(flows))
	}
	tag, err := tx.Exec(ctx, s.sql(`DELETE FROM {S}ff_exec_removed d USING (
			SELECT r.execution_id FROM {S}ff_exec_removed r
			WHERE r.partition_key = $1 AND r.removed_at_ms < $2 AND `+actions.TombstoneFilterSQL(3, 4, 5)+`
			ORDER BY r.removed_at_ms LIMIT $6 FOR UPDATE SKIP LOCKED) x
		WHERE d.partition_key = $1 AND d.execution_id = x.execution_id`), p.Partition, p.CutoffMs, ns, tk, tv, p.Limit)
	if err != nil {
		return res, dbutil.MapErr(err, "expiring retention tombstones")
	}
	res.TombstonesExpired = tag.RowsAffected()
	return res, nil
}

// lockSolo locks the solo executions of ids that are still past retention,
// skipping those another transaction holds, and returns them.
func (s *Store) lockSolo(ctx context.Context, tx pgx.Tx, p actions.RemoveParams, ids []uuid.UUID) ([]uuid.UUID, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	ns, tk, tv := actions.FilterParams(p.Filter)
	rows, err := tx.Query(ctx, s.sql(`SELECT c.execution_id FROM {S}ff_exec_core c
		WHERE c.partition_key = $1 AND c.execution_id = ANY($6) AND c.flow_id IS NULL AND `+actions.RetentionSQL("c", 2, 3, 4, 5)+`
		FOR UPDATE SKIP LOCKED`), p.Partition, p.CutoffMs, ns, tk, tv, ids)
	if err != nil {
		return nil, dbutil.MapErr(err, "locking executions past retention")
	}
	locked, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	return locked, dbutil.MapErr(err, "locking executions past retention")
}

// flowTables are the tables of a flow, in the order retention locks them:
// the flow row first, as AddDependencies does, then its members (with the
// retention predicate), then the rows of its graph.
var flowTables = []string{"ff_flow_core", "ff_exec_core", "ff_edge_group", "ff_pending_cancel_groups", "ff_edge"}

// lockWholeFlows returns the flows of flows that retention may remove:
// every row of each table of the flow locked by this transaction (none
// held by another), and every member past retention. The rows of the
// flows it returns stay locked until the transaction ends, so no member
// can join them meanwhile (CreateTx holds the flow row).
func (s *Store) lockWholeFlows(ctx context.Context, tx pgx.Tx, p actions.RemoveParams, flows []uuid.UUID) ([]uuid.UUID, error) {
	ns, tk, tv := actions.FilterParams(p.Filter)
	for _, table := range flowTables {
		if len(flows) == 0 {
			return nil, nil
		}
		cond, args := "", []any{p.Partition, flows}
		if table == "ff_exec_core" {
			cond = ` AND ` + actions.RetentionSQL("x", 3, 4, 5, 6)
			args = append(args, p.CutoffMs, ns, tk, tv)
		}
		// All of a flow's rows in the table are locked by this transaction
		// when as many rows pass the lock (and the predicate) as exist.
		rows, err := tx.Query(ctx, s.sql(`WITH l AS (
				SELECT x.flow_id FROM {S}`+table+` x WHERE x.partition_key = $1 AND x.flow_id = ANY($2)`+cond+`
				FOR UPDATE SKIP LOCKED),
			t AS (SELECT x.flow_id, count(*) AS n FROM {S}`+table+` x WHERE x.partition_key = $1 AND x.flow_id = ANY($2) GROUP BY x.flow_id),
			h AS (SELECT flow_id, count(*) AS n FROM l GROUP BY flow_id)
			SELECT f FROM unnest($2::uuid[]) f
			WHERE COALESCE((SELECT n FROM t WHERE t.flow_id = f), 0) = COALESCE((SELECT n FROM h WHERE h.flow_id = f), 0)`), args...)
		if err != nil {
			return nil, dbutil.MapErr(err, "locking flows past retention ("+table+")")
		}
		if flows, err = pgx.CollectRows(rows, pgx.RowTo[uuid.UUID]); err != nil {
			return nil, dbutil.MapErr(err, "locking flows past retention ("+table+")")
		}
	}
	return flows, nil
}

// removed returns the tombstone of id as a *ff.RemovedError, or
// ff.ErrNotFound when there is none.
func (s *Store) removed(ctx context.Context, id ff.ExecutionID) error {
	e := &ff.RemovedError{ID: id}
	err := s.pool.QueryRow(ctx, s.sql(`SELECT public_state, terminal_at_ms, removed_at_ms FROM {S}ff_exec_removed
		WHERE partition_key = $1 AND execution_id = $2`), id.Partition, id.UUID).Scan(&e.PublicState, &e.TerminalAtMs, &e.RemovedAtMs)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("execution %s: %w", id, ff.ErrNotFound)
	case err != nil:
		return dbutil.MapErr(err, "get "+id.String())
	}
	return e
}
