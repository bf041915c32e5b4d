package scanners

import (
	"context"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/jobs"
	"github.com/riverqueue/river"
)

// ExecutionDeadlineScanner expires non-terminal executions past their
// deadline_at_ms: the execution_deadline action
// (executions.Store.ExpireDeadlineTx). Item job: ff.expire_deadline {id}.
type ExecutionDeadlineScanner struct{}

// Name implements Scanner.
func (ExecutionDeadlineScanner) Name() string { return ExecutionDeadline }

// Defaults implements Scanner.
func (ExecutionDeadlineScanner) Defaults() Settings {
	return Settings{Interval: time.Second, Batch: DefaultBatch, Sweep: DefaultSweep}
}

// Due implements Scanner (index ff_exec_core_deadline_due_idx).
func (ExecutionDeadlineScanner) Due(ctx context.Context, q Querier, req DueRequest) ([]Due, error) {
	return DueByPartition(ctx, q, req.SQL(`SELECT partition_key, count(*), min(deadline_at_ms) FROM {S}ff_exec_core
		WHERE deadline_at_ms IS NOT NULL AND lifecycle_phase NOT IN ('terminal', 'cancelled') AND deadline_at_ms < $1
		GROUP BY partition_key`), req.NowMs)
}

// Scan implements Scanner.
func (ExecutionDeadlineScanner) Scan(ctx context.Context, q Querier, req ScanRequest) (ScanResult, error) {
	return ScanExecutions(ctx, q, req, `
SELECT c.execution_id, c.deadline_at_ms, 0
FROM {S}ff_exec_core c
WHERE c.partition_key = $1 AND c.deadline_at_ms IS NOT NULL AND c.deadline_at_ms < $2
  AND c.lifecycle_phase NOT IN ('terminal', 'cancelled')`+ExecFilterSQL+`
  AND ($6::bigint IS NULL OR (c.deadline_at_ms, c.execution_id) > ($6::bigint, $7::uuid))
ORDER BY c.deadline_at_ms, c.execution_id
LIMIT $8`, func(id ff.ExecutionID, _ int32) river.JobArgs {
		return jobs.ExpireDeadlineArgs{ID: id}
	})
}
