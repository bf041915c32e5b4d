package scanners

import (
	"context"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/jobs"
	"github.com/ffriver/ffriver/workers"
	"github.com/riverqueue/river"
)

// ExecutionDeadlineScanner expires non-terminal executions whose
// deadline_at_ms is now or earlier (a deadline has passed at that instant,
// the rule by which the store stops granting and honouring their leases):
// the execution_deadline action (the ExpireDeadline transition). Item job:
// ff.expire_deadline {id}.
type ExecutionDeadlineScanner struct{}

// Name implements Scanner.
func (ExecutionDeadlineScanner) Name() string { return ExecutionDeadline }

// Defaults implements Scanner.
func (ExecutionDeadlineScanner) Defaults() workers.Settings {
	return workers.Settings{Interval: time.Second, Batch: DefaultBatch, Sweep: DefaultSweep}
}

// Due implements Scanner, with Scan's predicate and filter, at most
// req.Cap per partition in deadline order (ff_exec_core_deadline_idx),
// after a gate on the oldest (ff_exec_core_deadline_due_idx). An execution
// in an unknown lifecycle_phase is due and processed: it expires like any
// non-terminal one.
func (ExecutionDeadlineScanner) Due(ctx context.Context, q workers.Querier, req workers.DueRequest) ([]workers.Due, error) {
	return dueExec(ctx, q, req, executionDeadlineDue, req.NowMs)
}

// deadlineTimer is what ExecutionDeadlineScanner acts on: passed deadlines
// of non-terminal executions.
var deadlineTimer = timer{from: "FROM {S}ff_exec_core c", part: "c.partition_key", id: "c.execution_id", due: "c.deadline_at_ms", attempt: "0",
	state: "c.lifecycle_phase NOT IN ('terminal', 'cancelled')"}

var executionDeadlineDue = deadlineTimer.dueShape()

// NextDueSQL implements workers.NextDueScanner: the earliest deadline after
// afterMs of a non-terminal execution (ff_exec_core_deadline_due_idx).
func (ExecutionDeadlineScanner) NextDueSQL(req workers.DueRequest, afterMs int64) (string, []any) {
	return deadlineTimer.nextDueSQL(req, afterMs)
}

// Unprocessable implements Auditor: passed deadlines in partitions outside
// the schema's count.
func (ExecutionDeadlineScanner) Unprocessable(ctx context.Context, q workers.Querier, req workers.DueRequest) ([]workers.Unprocessable, error) {
	return audit(ctx, q, req, req.NowMs, "c.partition_key, c.execution_id, c.deadline_at_ms, c.lifecycle_phase",
		deadlineTimer.auditRows(), "c",
		[]auditCase{outOfRange(req, "c.partition_key")})
}

// deadlineScanSQL is the statement of ExecutionDeadlineScanner's Scan (workers.ExecutionsScanQuery).
var deadlineScanSQL = deadlineTimer.scanSQL()

// expireDeadlineItem is the item of one candidate of deadlineScanSQL.
func expireDeadlineItem(id ff.ExecutionID, _ int32) river.JobArgs {
	return jobs.ExpireDeadlineArgs{ID: id}
}

// Scan implements Scanner.
func (ExecutionDeadlineScanner) Scan(ctx context.Context, q workers.Querier, req workers.ScanRequest) (workers.ScanResult, error) {
	return workers.ScanExecutions(ctx, q, req, deadlineScanSQL, expireDeadlineItem)
}

// ScanQuery implements workers.BatchScanner.
func (ExecutionDeadlineScanner) ScanQuery(req workers.ScanRequest) (workers.ScanQuery, error) {
	return workers.ExecutionsScanQuery(req, deadlineScanSQL, expireDeadlineItem)
}

// deadlineRangeSQL is the statement of ExecutionDeadlineScanner's
// DueRangeQuery (workers.ExecutionsRangeQuery): the deadlines that passed
// in a range, in ff_exec_core_deadline_due_idx's order.
var deadlineRangeSQL = deadlineTimer.rangeSQL()

// DueRangeQuery implements workers.RangeScanner.
func (ExecutionDeadlineScanner) DueRangeQuery(req workers.DueRequest, limit int) (workers.ScanQuery, error) {
	return workers.ExecutionsRangeQuery(req, limit, deadlineRangeSQL, expireDeadlineItem), nil
}
