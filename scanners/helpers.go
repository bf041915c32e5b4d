package scanners

import (
	"context"
	"encoding/json"

	"github.com/google/uuid"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/jobs"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
)

// execCursor is the keyset position of the execution scanners: the due time
// and the execution id of the last candidate.
type execCursor struct {
	Ms int64     `json:"ms"`
	ID uuid.UUID `json:"id"`
}

func decodeExecCursor(b json.RawMessage) (ms *int64, id *uuid.UUID, err error) {
	if len(b) == 0 {
		return nil, nil, nil
	}
	var c execCursor
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, nil, ff.Validationf("after", "not a scan cursor: %v", err)
	}
	return &c.Ms, &c.ID, nil
}

// DueByPartition runs a Due query whose rows are (partition, count, oldest
// due time or NULL), such as "SELECT partition_key, count(*), min(due time)
// … GROUP BY partition_key", and returns them as Due.
func DueByPartition(ctx context.Context, q Querier, sql string, args ...any) ([]Due, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, dbutil.MapErr(err, "due partitions")
	}
	out, err := collectDue(rows)
	return out, dbutil.MapErr(err, "due partitions")
}

// collectDue reads DueByPartition's rows.
func collectDue(rows pgx.Rows) ([]Due, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Due, error) {
		var d Due
		var oldest *int64
		err := r.Scan(&d.Partition, &d.Count, &oldest)
		if oldest != nil {
			d.OldestMs = *oldest
		}
		return d, err
	})
}

// scanExecutions runs a candidate query returning (execution_id, due_ms,
// extra int) rows and builds items with mk.
func ScanExecutions(ctx context.Context, q Querier, req ScanRequest, sql string, mk func(id ff.ExecutionID, extra int32) river.JobArgs) (ScanResult, error) {
	afterMs, afterID, err := decodeExecCursor(req.After)
	if err != nil {
		return ScanResult{}, err
	}
	ns, tk, tv := req.FilterArgs()
	rows, err := q.Query(ctx, req.SQL(sql), req.Partition, req.NowMs, ns, tk, tv, afterMs, afterID, req.Limit)
	if err != nil {
		return ScanResult{}, dbutil.MapErr(err, "scanning")
	}
	defer rows.Close()
	var res ScanResult
	var last execCursor
	for rows.Next() {
		var u uuid.UUID
		var ms int64
		var extra int32
		if err := rows.Scan(&u, &ms, &extra); err != nil {
			return ScanResult{}, dbutil.MapErr(err, "scanning")
		}
		res.Candidates++
		res.Items = append(res.Items, mk(ff.ExecutionID{Partition: req.Partition, UUID: u}, extra))
		last = execCursor{Ms: ms, ID: u}
	}
	if err := rows.Err(); err != nil {
		return ScanResult{}, dbutil.MapErr(err, "scanning")
	}
	if res.Candidates > 0 {
		res.Next, _ = json.Marshal(last)
	}
	return res, nil
}

// ExecFilterSQL is the filter predicate of ScanExecutions' queries: $3
// namespace, $4/$5 tag key/value, on ff_exec_core aliased c.
const ExecFilterSQL = `
  AND ($3::text IS NULL OR c.raw_fields->>'namespace' = $3::text)
  AND ($4::text IS NULL OR c.raw_fields->'tags'->>$4::text = $5::text)`

// groupCursor is the keyset position of the edge-cancel scanners.
type groupCursor struct {
	Ms   int64     `json:"ms"`
	Flow uuid.UUID `json:"flow"`
	EID  uuid.UUID `json:"eid"`
}

// scanGroups selects pending cancel groups of one partition. With onlyFlagged
// it skips groups whose flag is already cleared (the reconciler's). The
// filter applies to the group's downstream execution.
func scanGroups(ctx context.Context, q Querier, req ScanRequest, onlyFlagged bool, mk func(jobs.GroupKey) river.JobArgs) (ScanResult, error) {
	var afterMs *int64
	var afterFlow, afterEID *uuid.UUID
	if len(req.After) > 0 {
		var c groupCursor
		if err := json.Unmarshal(req.After, &c); err != nil {
			return ScanResult{}, ff.Validationf("after", "not a group cursor: %v", err)
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
        WHERE c.partition_key = p.partition_key AND c.execution_id = p.downstream_eid`+ExecFilterSQL+`))
  AND ($6::bigint IS NULL OR (p.enqueued_at_ms, p.flow_id, p.downstream_eid) > ($6::bigint, $7::uuid, $9::uuid))
ORDER BY p.enqueued_at_ms, p.flow_id, p.downstream_eid
LIMIT $8`), req.Partition, onlyFlagged, ns, tk, tv, afterMs, afterFlow, req.Limit, afterEID)
	if err != nil {
		return ScanResult{}, dbutil.MapErr(err, "scanning pending cancel groups")
	}
	defer rows.Close()
	var res ScanResult
	var last groupCursor
	for rows.Next() {
		var c groupCursor
		if err := rows.Scan(&c.Flow, &c.EID, &c.Ms); err != nil {
			return ScanResult{}, dbutil.MapErr(err, "scanning pending cancel groups")
		}
		res.Candidates++
		res.Items = append(res.Items, mk(jobs.GroupKey{Partition: req.Partition, FlowID: c.Flow, DownstreamEID: c.EID}))
		last = c
	}
	if err := rows.Err(); err != nil {
		return ScanResult{}, dbutil.MapErr(err, "scanning pending cancel groups")
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
func dueGroups(ctx context.Context, q Querier, req DueRequest, onlyFlagged bool) ([]Due, error) {
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
func auditGroups(ctx context.Context, q Querier, req DueRequest) ([]Unprocessable, error) {
	return audit(ctx, q, req, 0, "p.partition_key, p.flow_id, p.downstream_eid, p.enqueued_at_ms",
		`FROM {S}ff_pending_cancel_groups p
  LEFT JOIN {S}ff_exec_core c ON c.partition_key = p.partition_key AND c.execution_id = p.downstream_eid WHERE true`, "c",
		[]auditCase{outOfRange(req, "p.partition_key")})
}
