package scanners

import (
	"context"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/jobs"
	"github.com/ffriver/ffriver/workers"
	"github.com/riverqueue/river"
)

// AttemptTimeoutScanner expires attempts whose lease has passed: the
// attempt_timeout action (the ExpireAttempt transition) on every
// active execution whose current attempt's lease_expires_at_ms is now or
// earlier: a lease holds while now < its expiry, and has ended at that
// instant, the rule of the store's fence (executions). Item job:
// ff.expire_attempt {id, attempt_index}.
type AttemptTimeoutScanner struct{}

// Name implements Scanner.
func (AttemptTimeoutScanner) Name() string { return AttemptTimeout }

// Defaults implements Scanner.
func (AttemptTimeoutScanner) Defaults() workers.Settings {
	return workers.Settings{Interval: time.Second, Batch: DefaultBatch, Sweep: DefaultSweep}
}

// Due implements Scanner: the expired leases Scan returns, counted with
// its predicate and filter (an expired lease of an attempt that is not its
// execution's running one is never scanned: see Unprocessable), at most
// req.Cap per partition in lease order (ff_attempt_lease_expiry_idx), after
// a gate on the oldest expired lease (ff_attempt_lease_due_idx).
func (AttemptTimeoutScanner) Due(ctx context.Context, q workers.Querier, req workers.DueRequest) ([]workers.Due, error) {
	return dueExec(ctx, q, req, attemptTimeoutDue, req.NowMs)
}

// attemptTimer is what AttemptTimeoutScanner acts on: expired leases of
// running attempts.
var attemptTimer = timer{from: `FROM {S}ff_attempt a
JOIN {S}ff_exec_core c ON c.partition_key = a.partition_key AND c.execution_id = a.execution_id`,
	part: "a.partition_key", id: "a.execution_id", due: "a.lease_expires_at_ms", attempt: "a.attempt_index",
	state: "c.lifecycle_phase = 'active' AND c.attempt_index = a.attempt_index"}

var attemptTimeoutDue = attemptTimer.dueShape()

// NextDueSQL implements workers.NextDueScanner: the earliest lease expiry
// after afterMs of a running attempt (ff_attempt_lease_due_idx).
func (AttemptTimeoutScanner) NextDueSQL(req workers.DueRequest, afterMs int64) (string, []any) {
	return attemptTimer.nextDueSQL(req, afterMs)
}

// Unprocessable implements Auditor: expired leases in partitions outside
// the schema's count, of attempts with no execution, of executions in an
// unknown lifecycle_phase, and leases left on attempts that are not their
// execution's running one (ffriver clears the lease of every attempt it
// ends).
func (AttemptTimeoutScanner) Unprocessable(ctx context.Context, q workers.Querier, req workers.DueRequest) ([]workers.Unprocessable, error) {
	return audit(ctx, q, req, req.NowMs, "a.partition_key, a.execution_id, a.attempt_index, a.lease_expires_at_ms, c.lifecycle_phase, c.attempt_index AS current_attempt_index",
		`FROM {S}ff_attempt a
  LEFT JOIN {S}ff_exec_core c ON c.partition_key = a.partition_key AND c.execution_id = a.execution_id
  WHERE a.lease_expires_at_ms IS NOT NULL AND a.lease_expires_at_ms <= {AT}`, "c",
		[]auditCase{
			outOfRange(req, "a.partition_key"),
			{reason: "attempt of no execution", pred: "c.execution_id IS NULL"},
			{reason: "execution in an unknown lifecycle_phase", pred: "c.lifecycle_phase NOT IN " + knownPhases},
			{reason: "lease left on an attempt that is not running", pred: "c.lifecycle_phase <> 'active' OR c.attempt_index <> a.attempt_index"},
		})
}

// attemptScanSQL is the statement of AttemptTimeoutScanner's Scan (workers.ExecutionsScanQuery).
var attemptScanSQL = attemptTimer.scanSQL()

// expireAttemptItem is the item of one candidate of attemptScanSQL.
func expireAttemptItem(id ff.ExecutionID, attempt int32) river.JobArgs {
	return jobs.ExpireAttemptArgs{ID: id, AttemptIndex: attempt}
}

// Scan implements Scanner.
func (AttemptTimeoutScanner) Scan(ctx context.Context, q workers.Querier, req workers.ScanRequest) (workers.ScanResult, error) {
	return workers.ScanExecutions(ctx, q, req, attemptScanSQL, expireAttemptItem)
}

// ScanQuery implements workers.BatchScanner.
func (AttemptTimeoutScanner) ScanQuery(req workers.ScanRequest) (workers.ScanQuery, error) {
	return workers.ExecutionsScanQuery(req, attemptScanSQL, expireAttemptItem)
}

// attemptRangeSQL is the statement of AttemptTimeoutScanner's
// DueRangeQuery (workers.ExecutionsRangeQuery): the leases of running
// attempts that expired in a range, in ff_attempt_lease_due_idx's order.
var attemptRangeSQL = attemptTimer.rangeSQL()

// DueRangeQuery implements workers.RangeScanner.
func (AttemptTimeoutScanner) DueRangeQuery(req workers.DueRequest, limit int) (workers.ScanQuery, error) {
	return workers.ExecutionsRangeQuery(req, limit, attemptRangeSQL, expireAttemptItem), nil
}
