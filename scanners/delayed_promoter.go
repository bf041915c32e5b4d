package scanners

import (
	"context"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/jobs"
	"github.com/riverqueue/river"
)

// DelayedPromoterScanner makes delayed executions eligible when their
// delay_until_ms comes: the delayed_promoter action
// (executions.Store.PromoteDelayedTx) on every runnable,
// not_eligible_until_time execution that is due. Item job:
// ff.promote_delayed {id}.
type DelayedPromoterScanner struct{}

// Name implements Scanner.
func (DelayedPromoterScanner) Name() string { return DelayedPromoter }

// Defaults implements Scanner.
func (DelayedPromoterScanner) Defaults() Settings {
	return Settings{Interval: time.Second, Batch: DefaultBatch, Sweep: DefaultSweep}
}

// Due implements Scanner (index ff_exec_core_delay_due_idx).
func (DelayedPromoterScanner) Due(ctx context.Context, q Querier, req DueRequest) ([]Due, error) {
	return DueByPartition(ctx, q, req.SQL(`SELECT partition_key, count(*), min(delay_until_ms) FROM {S}ff_exec_core
		WHERE delay_until_ms IS NOT NULL AND delay_until_ms <= $1 GROUP BY partition_key`), req.NowMs)
}

// Scan implements Scanner.
func (DelayedPromoterScanner) Scan(ctx context.Context, q Querier, req ScanRequest) (ScanResult, error) {
	return ScanExecutions(ctx, q, req, `
SELECT c.execution_id, c.delay_until_ms, 0
FROM {S}ff_exec_core c
WHERE c.partition_key = $1 AND c.delay_until_ms IS NOT NULL AND c.delay_until_ms <= $2
  AND c.lifecycle_phase = 'runnable' AND c.eligibility_state = 'not_eligible_until_time'`+ExecFilterSQL+`
  AND ($6::bigint IS NULL OR (c.delay_until_ms, c.execution_id) > ($6::bigint, $7::uuid))
ORDER BY c.delay_until_ms, c.execution_id
LIMIT $8`, func(id ff.ExecutionID, _ int32) river.JobArgs {
		return jobs.PromoteDelayedArgs{ID: id}
	})
}
