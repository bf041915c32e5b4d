package scanners

import (
	"context"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/jobs"
	"github.com/ffriver/ffriver/workers"
	"github.com/riverqueue/river"
)

// DelayedPromoterScanner makes delayed executions eligible when their
// delay_until_ms comes: the delayed_promoter action
// (the PromoteDelayed transition) on every runnable,
// not_eligible_until_time execution that is due. Item job:
// ff.promote_delayed {id}.
type DelayedPromoterScanner struct{}

// Name implements Scanner.
func (DelayedPromoterScanner) Name() string { return DelayedPromoter }

// Defaults implements Scanner.
func (DelayedPromoterScanner) Defaults() workers.Settings {
	return workers.Settings{Interval: time.Second, Batch: DefaultBatch, Sweep: DefaultSweep}
}

// Due implements Scanner: the delayed executions Scan returns, counted
// with its predicate and filter (a delay come due on an execution that is
// blocked by its dependencies is not due: it waits for its flow), at most
// req.Cap per partition in due order (ff_exec_core_delay_idx), after a
// gate on the oldest (ff_exec_core_delay_due_idx).
func (DelayedPromoterScanner) Due(ctx context.Context, q workers.Querier, req workers.DueRequest) ([]workers.Due, error) {
	return dueExec(ctx, q, req, delayedPromoterDue, req.NowMs)
}

// delayTimer is what DelayedPromoterScanner acts on: delays come due of
// runnable executions not eligible until then.
var delayTimer = timer{from: "FROM {S}ff_exec_core c", part: "c.partition_key", id: "c.execution_id", due: "c.delay_until_ms", attempt: "0",
	state: "c.lifecycle_phase = 'runnable' AND c.eligibility_state = 'not_eligible_until_time'"}

var delayedPromoterDue = delayTimer.dueShape()

// NextDueSQL implements workers.NextDueScanner: the earliest delay after
// afterMs of a delayed execution (ff_exec_core_delay_due_idx).
func (DelayedPromoterScanner) NextDueSQL(req workers.DueRequest, afterMs int64) (string, []any) {
	return delayTimer.nextDueSQL(req, afterMs)
}

// Unprocessable implements Auditor: delays come due in partitions outside
// the schema's count, or on executions whose lifecycle_phase, or (runnable
// ones) eligibility_state, is not in ffriver's alphabet; and non-terminal
// executions not eligible until a time that is in neither delay_until_ms
// nor where upstream writes one (migration 0010 reads those): no scan can
// tell when they are due.
func (DelayedPromoterScanner) Unprocessable(ctx context.Context, q workers.Querier, req workers.DueRequest) ([]workers.Unprocessable, error) {
	return audit(ctx, q, req, req.NowMs, "c.partition_key, c.execution_id, c.delay_until_ms, c.lifecycle_phase, c.eligibility_state",
		`FROM {S}ff_exec_core c WHERE ((c.delay_until_ms IS NOT NULL AND c.delay_until_ms <= {AT})
  OR (c.eligibility_state = 'not_eligible_until_time' AND c.delay_until_ms IS NULL AND c.lifecycle_phase NOT IN ('terminal', 'cancelled')))`, "c",
		[]auditCase{
			outOfRange(req, "c.partition_key"),
			{reason: "not eligible until a time it does not record", pred: "c.delay_until_ms IS NULL"},
			{reason: "unknown lifecycle_phase", pred: "c.lifecycle_phase NOT IN " + knownPhases},
			{reason: "runnable with an unknown eligibility_state", pred: "c.lifecycle_phase = 'runnable' AND c.eligibility_state NOT IN " + knownEligibility},
		})
}

// delayScanSQL is the statement of DelayedPromoterScanner's Scan (workers.ExecutionsScanQuery).
var delayScanSQL = delayTimer.scanSQL()

// promoteDelayedItem is the item of one candidate of delayScanSQL.
func promoteDelayedItem(id ff.ExecutionID, _ int32) river.JobArgs {
	return jobs.PromoteDelayedArgs{ID: id}
}

// Scan implements Scanner.
func (DelayedPromoterScanner) Scan(ctx context.Context, q workers.Querier, req workers.ScanRequest) (workers.ScanResult, error) {
	return workers.ScanExecutions(ctx, q, req, delayScanSQL, promoteDelayedItem)
}

// ScanQuery implements workers.BatchScanner.
func (DelayedPromoterScanner) ScanQuery(req workers.ScanRequest) (workers.ScanQuery, error) {
	return workers.ExecutionsScanQuery(req, delayScanSQL, promoteDelayedItem)
}

// delayRangeSQL is the statement of DelayedPromoterScanner's DueRangeQuery
// (workers.ExecutionsRangeQuery): the delays that came due in a range, in
// ff_exec_core_delay_due_idx's order.
var delayRangeSQL = delayTimer.rangeSQL()

// DueRangeQuery implements workers.RangeScanner.
func (DelayedPromoterScanner) DueRangeQuery(req workers.DueRequest, limit int) (workers.ScanQuery, error) {
	return workers.ExecutionsRangeQuery(req, limit, delayRangeSQL, promoteDelayedItem), nil
}
