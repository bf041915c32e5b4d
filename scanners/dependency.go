package scanners

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/actions"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/jobs"
	"github.com/ffriver/ffriver/workers"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// DefaultDependencyStale is how long a flow hop may wait for its ff.advance
// job before the dependency scanner enqueues it again: ffriver's own
// terminal transitions enqueue their hops at once, so the scanner only picks
// up hops whose job was lost (cancelled, discarded or deleted in River, or
// never inserted: executions made terminal by plain SQL, or by a store
// without a Cascader).
const DefaultDependencyStale = 15 * time.Second

// DependencyScanner finds the flow hops nobody counted from the data alone:
// every ff_edge whose upstream is terminal (upstream_terminal_at_ms, written
// by a trigger on ff_exec_core whoever makes the upstream terminal) while the
// edge has no recorded outcome yet (upstream_outcome IS NULL), once it has
// waited for the staleness threshold. Its item is the hop itself:
// ff.advance {upstream, flow_id, downstream, outcome}, the outcome read from
// the upstream's public_state (or, when that names none, its completion
// event: actions.TerminalOutcomeSQL), exactly as the Cascader inserts it (so a hop
// whose job is still in flight, or snoozed waiting on a lock, is not
// enqueued twice). Whatever happens to any River job, a hop stays due until
// the Advance transition has counted it. The scanner filter applies to
// the upstream execution.
type DependencyScanner struct {
	stale time.Duration
}

// NewDependencyScanner returns the dependency scanner with a staleness
// threshold (0 means DefaultDependencyStale).
func NewDependencyScanner(stale time.Duration) *DependencyScanner {
	if stale <= 0 {
		stale = DefaultDependencyStale
	}
	return &DependencyScanner{stale: stale}
}

// Name implements Scanner.
func (*DependencyScanner) Name() string { return Dependency }

// Defaults implements Scanner: every 5 s, batch 1,000.
func (*DependencyScanner) Defaults() workers.Settings {
	return workers.Settings{Interval: 5 * time.Second, Batch: DefaultBatch}
}

// Params implements ParamsProvider: the staleness threshold travels with
// the tick, so scans worked elsewhere use the scheduler's.
func (s *DependencyScanner) Params() (json.RawMessage, error) { return ageParamsOf(s.stale) }

func (s *DependencyScanner) cutoff(params json.RawMessage, now int64) (int64, error) {
	return ageCutoff(Dependency, s.stale, params, now)
}

// hopOutcomeSQL is the outcome of a hop's upstream c (NULL when nothing
// records it: see actions.TerminalOutcomeSQL).
func hopOutcomeSQL() string { return actions.TerminalOutcomeSQL("c") }

// hopDueSQL is the due-hop predicate on ff_edge e joined with its upstream
// ff_exec_core c (index ff_edge_hop_due_idx); $2 is the cutoff. A hop whose
// upstream's outcome is recorded nowhere is not due: it is unprocessable.
func hopDueSQL() string {
	return `e.upstream_outcome IS NULL AND e.upstream_terminal_at_ms IS NOT NULL AND e.upstream_terminal_at_ms < $2
  AND c.lifecycle_phase IN ('terminal', 'cancelled') AND (` + hopOutcomeSQL() + `) IS NOT NULL`
}

// hopsWaitingSQL is whether any hop not counted yet has waited past the
// cutoff $1, whatever its upstream: the first row of ff_edge_hop_due_idx
// (which holds only hops not counted yet) in its order, read with
// dbutil.PlannerSettings as the gate of boundedDueSQL is, so that finding
// none reads that small index and not ff_edge. Due and Unprocessable read
// nothing more when none has: their statements also read the upstream's
// completion event, and planning that over the completion outbox's time
// partitions cost ffctl status 10 ms on a new connection (3.5 ms warm)
// with 33 of them and not one hop in the schema.
const hopsWaitingSQL = `SELECT 1 FROM {S}ff_edge e
  WHERE e.upstream_outcome IS NULL AND e.upstream_terminal_at_ms IS NOT NULL AND e.upstream_terminal_at_ms < $1
  ORDER BY e.partition_key, e.upstream_terminal_at_ms LIMIT 1`

// hopsWaiting runs hopsWaitingSQL.
func hopsWaiting(ctx context.Context, q workers.Querier, req workers.DueRequest, cutoff int64) (bool, error) {
	var waiting bool
	err := dueRead(ctx, q, req.SQL(hopsWaitingSQL), []any{cutoff}, func(rows pgx.Rows) error {
		waiting = rows.Next()
		return nil
	})
	return waiting, err
}

// Due implements Scanner: the partitions with hops due, counted with the
// predicate and filter of Scan, at most req.Cap per partition in the order
// of ff_edge_hop_due_idx, after a gate that takes any due hop (the index
// holds only hops not counted yet); nothing when no hop waits at all
// (hopsWaitingSQL).
func (s *DependencyScanner) Due(ctx context.Context, q workers.Querier, req workers.DueRequest) ([]workers.Due, error) {
	cutoff, err := s.cutoff(req.Params, req.NowMs)
	if err != nil {
		return nil, err
	}
	if waiting, err := hopsWaiting(ctx, q, req, cutoff); err != nil || !waiting {
		return nil, err
	}
	due, err := dueExec(ctx, q, req, dependencyDue(), cutoff)
	for i := range due {
		// A hop is due once it has waited for the threshold.
		due[i].OldestMs += req.NowMs - cutoff
	}
	return due, err
}

// dependencyDue is the due hops for boundedDueSQL.
func dependencyDue() dueShape {
	return dueShape{part: "e.partition_key", due: "e.upstream_terminal_at_ms", partOrdered: true,
		// ff_edge_hop_due_idx's order: it holds only the hops not counted yet.
		gateOrder: "e.partition_key, e.upstream_terminal_at_ms",
		rows: `FROM {S}ff_edge e
		JOIN {S}ff_exec_core c ON c.partition_key = e.partition_key AND c.execution_id = e.upstream_eid
		WHERE ` + strings.Replace(strings.ReplaceAll(hopDueSQL(), "$2", "$1"), "\n", "{PART}\n", 1) + dueExecFilterSQL}
}

// Unprocessable implements Auditor: hops due in partitions outside the
// schema's count, hops whose upstream execution is gone, edges marked
// terminal whose upstream is not (written by hand), and hops of a terminal
// upstream whose outcome is recorded nowhere (its public_state names none
// and it has no completion event): counting one as a failure, or as
// anything, could resolve its group wrongly. Nothing when no hop waits at
// all (hopsWaitingSQL).
func (s *DependencyScanner) Unprocessable(ctx context.Context, q workers.Querier, req workers.DueRequest) ([]workers.Unprocessable, error) {
	cutoff, err := s.cutoff(req.Params, req.NowMs)
	if err != nil {
		return nil, err
	}
	if waiting, err := hopsWaiting(ctx, q, req, cutoff); err != nil || !waiting {
		return nil, err
	}
	return audit(ctx, q, req, cutoff, "e.partition_key, e.flow_id, e.upstream_eid, e.downstream_eid, e.upstream_terminal_at_ms, c.lifecycle_phase",
		`FROM {S}ff_edge e
  LEFT JOIN {S}ff_exec_core c ON c.partition_key = e.partition_key AND c.execution_id = e.upstream_eid
  WHERE e.upstream_outcome IS NULL AND e.upstream_terminal_at_ms IS NOT NULL AND e.upstream_terminal_at_ms < {AT}`, "c",
		[]auditCase{
			outOfRange(req, "e.partition_key"),
			{reason: "upstream execution gone", pred: "c.execution_id IS NULL"},
			{reason: "edge marked terminal, upstream not terminal", pred: "c.lifecycle_phase NOT IN ('terminal', 'cancelled')"},
			{reason: "terminal upstream whose outcome is recorded nowhere", pred: "(" + hopOutcomeSQL() + ") IS NULL"},
		})
}

// hopCursor is the keyset position of the dependency scanner.
type hopCursor struct {
	Ms   int64     `json:"ms"`
	Edge uuid.UUID `json:"edge"`
}

// Scan implements Scanner: due hops of one partition, oldest first.
func (s *DependencyScanner) Scan(ctx context.Context, q workers.Querier, req workers.ScanRequest) (workers.ScanResult, error) {
	cutoff, err := s.cutoff(req.Params, req.NowMs)
	if err != nil {
		return workers.ScanResult{}, err
	}
	var afterMs *int64
	var afterEdge *uuid.UUID
	if len(req.After) > 0 {
		var c hopCursor
		if err := json.Unmarshal(req.After, &c); err != nil {
			return workers.ScanResult{}, ff.Validationf("after", "not a dependency scan cursor: %v", err)
		}
		afterMs, afterEdge = &c.Ms, &c.Edge
	}
	ns, tk, tv := req.FilterArgs()
	rows, err := q.Query(ctx, req.SQL(`SELECT e.upstream_eid, e.flow_id, e.downstream_eid, `+hopOutcomeSQL()+`, e.upstream_terminal_at_ms, e.edge_id
		FROM {S}ff_edge e
		JOIN {S}ff_exec_core c ON c.partition_key = e.partition_key AND c.execution_id = e.upstream_eid
		WHERE e.partition_key = $1 AND `+hopDueSQL()+workers.ExecFilterSQL+`
		  AND ($6::bigint IS NULL OR (e.upstream_terminal_at_ms, e.edge_id) > ($6::bigint, $7::uuid))
		ORDER BY e.upstream_terminal_at_ms, e.edge_id
		LIMIT $8`), req.Partition, cutoff, ns, tk, tv, afterMs, afterEdge, req.Limit)
	if err != nil {
		return workers.ScanResult{}, dbutil.MapErr(err, "scanning due flow hops")
	}
	defer rows.Close()
	var res workers.ScanResult
	var last hopCursor
	for rows.Next() {
		var up, flow, down uuid.UUID
		var outcome string
		if err := rows.Scan(&up, &flow, &down, &outcome, &last.Ms, &last.Edge); err != nil {
			return workers.ScanResult{}, dbutil.MapErr(err, "scanning due flow hops")
		}
		res.Candidates++
		res.Items = append(res.Items, jobs.AdvanceArgs{Upstream: ff.ExecutionID{Partition: req.Partition, UUID: up},
			FlowID: flow, Downstream: down, Outcome: outcome})
	}
	if err := rows.Err(); err != nil {
		return workers.ScanResult{}, dbutil.MapErr(err, "scanning due flow hops")
	}
	if res.Candidates > 0 {
		res.Next, _ = json.Marshal(last)
	}
	return res, nil
}
