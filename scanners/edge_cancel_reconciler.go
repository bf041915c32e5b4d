package scanners

import (
	"context"
	"time"

	"github.com/ffriver/ffriver/jobs"
	"github.com/ffriver/ffriver/workers"
	"github.com/riverqueue/river"
)

// EdgeCancelReconcilerScanner is the safety net of the dispatcher: for each
// pending cancel group, the ReconcileCancelGroup transition deletes
// stale rows (group gone or flag cleared: sremmed_stale), drains groups
// whose members are all terminal (completed_drain), and leaves groups with
// running members to the dispatcher (no_op). Partitioned and filtered like
// the dispatcher. Item job: ff.reconcile_group {partition, flow_id,
// downstream_eid}.
type EdgeCancelReconcilerScanner struct{}

// Name implements Scanner.
func (EdgeCancelReconcilerScanner) Name() string { return EdgeCancelReconciler }

// Defaults implements Scanner.
func (EdgeCancelReconcilerScanner) Defaults() workers.Settings {
	return workers.Settings{Interval: 10 * time.Second, Batch: 50}
}

// Due implements Scanner: every pending group Scan returns, with its filter.
func (EdgeCancelReconcilerScanner) Due(ctx context.Context, q workers.Querier, req workers.DueRequest) ([]workers.Due, error) {
	return dueGroups(ctx, q, req, false)
}

// Unprocessable implements Auditor: pending groups in partitions outside
// the schema's count.
func (EdgeCancelReconcilerScanner) Unprocessable(ctx context.Context, q workers.Querier, req workers.DueRequest) ([]workers.Unprocessable, error) {
	return auditGroups(ctx, q, req)
}

// Scan implements Scanner.
func (EdgeCancelReconcilerScanner) Scan(ctx context.Context, q workers.Querier, req workers.ScanRequest) (workers.ScanResult, error) {
	return scanGroups(ctx, q, req, false, func(k jobs.GroupKey) river.JobArgs { return jobs.ReconcileGroupArgs{GroupKey: k} })
}
