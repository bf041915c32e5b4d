package scanners

import (
	"context"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/jobs"
	"github.com/riverqueue/river"
)

// AttemptTimeoutScanner expires attempts whose lease has passed: the
// attempt_timeout action (executions.Store.ExpireAttemptTx) on every
// active execution whose current attempt's lease_expires_at_ms is in the
// past. Item job: ff.expire_attempt {id, attempt_index}.
type AttemptTimeoutScanner struct{}

// Name implements Scanner.
func (AttemptTimeoutScanner) Name() string { return AttemptTimeout }

// Defaults implements Scanner.
func (AttemptTimeoutScanner) Defaults() Settings {
	return Settings{Interval: time.Second, Batch: DefaultBatch, Sweep: DefaultSweep}
}

// Due implements Scanner (index ff_attempt_lease_due_idx).
func (AttemptTimeoutScanner) Due(ctx context.Context, q Querier, req DueRequest) ([]Due, error) {
	return DueByPartition(ctx, q, req.SQL(`SELECT partition_key, count(*), min(lease_expires_at_ms) FROM {S}ff_attempt
		WHERE lease_expires_at_ms IS NOT NULL AND lease_expires_at_ms < $1 GROUP BY partition_key`), req.NowMs)
}

// Scan implements Scanner.
func (AttemptTimeoutScanner) Scan(ctx context.Context, q Querier, req ScanRequest) (ScanResult, error) {
	return ScanExecutions(ctx, q, req, `
SELECT a.execution_id, a.lease_expires_at_ms, a.attempt_index
FROM {S}ff_attempt a
JOIN {S}ff_exec_core c ON c.partition_key = a.partition_key AND c.execution_id = a.execution_id
WHERE a.partition_key = $1 AND a.lease_expires_at_ms IS NOT NULL AND a.lease_expires_at_ms < $2
  AND c.lifecycle_phase = 'active' AND c.attempt_index = a.attempt_index`+ExecFilterSQL+`
  AND ($6::bigint IS NULL OR (a.lease_expires_at_ms, a.execution_id) > ($6::bigint, $7::uuid))
ORDER BY a.lease_expires_at_ms, a.execution_id
LIMIT $8`, func(id ff.ExecutionID, attempt int32) river.JobArgs {
		return jobs.ExpireAttemptArgs{ID: id, AttemptIndex: attempt}
	})
}
