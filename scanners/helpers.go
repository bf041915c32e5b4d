package scanners

import (
	"context"
	"encoding/json"

	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/workers"
	"github.com/google/uuid"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/jobs"
	"github.com/riverqueue/river"
)

// groupCursor is the keyset position of the edge-cancel scanners.
type groupCursor struct {
	Ms   int64     `json:"ms"`
	Flow uuid.UUID `json:"flow"`
	EID  uuid.UUID `json:"eid"`
}

// scanGroups selects pending cancel groups of one partition. With onlyFlagged
// it skips groups whose flag is already cleared (the reconciler's). The
// filter applies to the group's downstream execution.
func scanGroups(ctx context.Context, q workers.Querier, req workers.ScanRequest, onlyFlagged bool, mk func(jobs.GroupKey) river.JobArgs) (workers.ScanResult, error) {
	var afterMs *int64
	var afterFlow, afterEID *uuid.UUID
	if len(req.After) > 0 {
		var c groupCursor
		if err := json.Unmarshal(req.After, &c); err != nil {
			return workers.ScanResult{}, ff.Validationf("after", "not a group cursor: %v", err)
		}
		afterMs, afterFlow, afterEID = &c.Ms, &c.Flow, &c.EID
	}
	ns, tk, tv := req.FilterArgs()
	rows, err := q.Query(ctx, req.SQL(`
SELECT p.flow_id, p.downstream_eid, p.enqueued_at_ms
FROM {S}ff_pending_cancel_groups p
LEFT JOIN {S}ff_edge_group g
  ON g.partition_key = p.partition_key AND g.flow_id = p.flow_id AND g.downstream_eid = p.downstream_eid
WHERE p.partition_key = $1
  AND (NOT $2::bool OR g.downstream_eid IS NULL OR g.cancel_siblings_pending_flag)
  AND (($3::text IS NULL AND $4::text IS NULL) OR EXISTS (
        SELECT 1 FROM {S}ff_exec_core c
        WHERE c.partition_key = p.partition_key AND c.execution_id = p.downstream_eid`+workers.ExecFilterSQL+`))
  AND ($6::bigint IS NULL OR (p.enqueued_at_ms, p.flow_id, p.downstream_eid) > ($6::bigint, $7::uuid, $9::uuid))
ORDER BY p.enqueued_at_ms, p.flow_id, p.downstream_eid
LIMIT $8`), req.Partition, onlyFlagged, ns, tk, tv, afterMs, afterFlow, req.Limit, afterEID)
	if err != nil {
		return workers.ScanResult{}, dbutil.MapErr(err, "scanning pending cancel groups")
	}
	defer rows.Close()
	var res workers.ScanResult
	var last groupCursor
	for rows.Next() {
		var c groupCursor
		if err := rows.Scan(&c.Flow, &c.EID, &c.Ms); err != nil {
			return workers.ScanResult{}, dbutil.MapErr(err, "scanning pending cancel groups")
		}
		res.Candidates++
		res.Items = append(res.Items, mk(jobs.GroupKey{Partition: req.Partition, FlowID: c.Flow, DownstreamEID: c.EID}))
		last = c
	}
	if err := rows.Err(); err != nil {
		return workers.ScanResult{}, dbutil.MapErr(err, "scanning pending cancel groups")
	}
	if res.Candidates > 0 {
		res.Next, _ = json.Marshal(last)
	}
	return res, nil
}

// dueGroups counts the pending cancel groups scanGroups returns, with its
// predicate and filter: at most req.Cap per partition (its primary key, in
// no particular order), after a gate on the oldest group
// (ff_pending_cancel_groups_enqueued_idx). The oldest each partition
// reports is exact unless its count is capped; the oldest of all is exact
// (the gate's, which LEAST puts on its partition).
func dueGroups(ctx context.Context, q workers.Querier, req workers.DueRequest, onlyFlagged bool) ([]workers.Due, error) {
	return dueExec(ctx, q, req, groupsDue, onlyFlagged)
}

// groupsDue is the due pending cancel groups for boundedDueSQL ($1: only
// flagged ones), scanGroups' predicate and filter. The filter reads the
// downstream execution through a join on its primary key: as an EXISTS
// under an OR, the planner hashed every execution of the namespace (a
// sequential scan of ff_exec_core) for a filtered tick.
var groupsDue = dueShape{part: "p.partition_key", due: "p.enqueued_at_ms", gateOrder: "p.enqueued_at_ms",
	rows: `FROM {S}ff_pending_cancel_groups p
LEFT JOIN {S}ff_edge_group g
  ON g.partition_key = p.partition_key AND g.flow_id = p.flow_id AND g.downstream_eid = p.downstream_eid
LEFT JOIN {S}ff_exec_core c ON c.partition_key = p.partition_key AND c.execution_id = p.downstream_eid
WHERE (NOT $1::bool OR g.downstream_eid IS NULL OR g.cancel_siblings_pending_flag){PART}
  AND (($2::text IS NULL AND $3::text IS NULL) OR (c.execution_id IS NOT NULL` + dueExecFilterSQL + `))`}

// auditGroups counts pending cancel groups in partitions outside the
// schema's count; a filter applies to the group's downstream execution, as
// in the edge-cancel scanners' Due and Scan.
func auditGroups(ctx context.Context, q workers.Querier, req workers.DueRequest) ([]workers.Unprocessable, error) {
	return audit(ctx, q, req, 0, "p.partition_key, p.flow_id, p.downstream_eid, p.enqueued_at_ms",
		`FROM {S}ff_pending_cancel_groups p
  LEFT JOIN {S}ff_exec_core c ON c.partition_key = p.partition_key AND c.execution_id = p.downstream_eid WHERE true`, "c",
		[]auditCase{outOfRange(req, "p.partition_key")})
}
