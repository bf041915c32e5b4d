package scanners

import (
	"context"
	"time"

	"github.com/ffriver/ffriver/jobs"
	"github.com/ffriver/ffriver/workers"
	"github.com/riverqueue/river"
)

// EdgeCancelDispatcherScanner drains flagged sibling-cancel groups: for each
// ff_pending_cancel_groups row whose ff_edge_group has its cancel flag set
// (or is missing: an orphan), the DispatchCancelGroup transition
// cancels the listed siblings (fenced, with their outbox events), clears the
// flag and deletes the pending row, in one transaction per group.
//
// It is partitioned like the execution scanners (a flow's groups and
// executions share the flow's partition). The scanner filter applies to the
// group's downstream execution; with a filter set, orphan rows whose
// downstream execution is gone are left to an unfiltered deployment. Item
// job: ff.cancel_group {partition, flow_id, downstream_eid}.
type EdgeCancelDispatcherScanner struct{}

// Name implements Scanner.
func (EdgeCancelDispatcherScanner) Name() string { return EdgeCancelDispatcher }

// Defaults implements Scanner.
func (EdgeCancelDispatcherScanner) Defaults() workers.Settings {
	return workers.Settings{Interval: time.Second, Batch: 50}
}

// Due implements Scanner: the flagged (or orphan) pending groups Scan
// returns, with its filter; groups whose flag is cleared are the
// reconciler's.
func (EdgeCancelDispatcherScanner) Due(ctx context.Context, q workers.Querier, req workers.DueRequest) ([]workers.Due, error) {
	return dueGroups(ctx, q, req, true)
}

// Unprocessable implements Auditor: pending groups in partitions outside
// the schema's count.
func (EdgeCancelDispatcherScanner) Unprocessable(ctx context.Context, q workers.Querier, req workers.DueRequest) ([]workers.Unprocessable, error) {
	return auditGroups(ctx, q, req)
}

// Scan implements Scanner.
func (EdgeCancelDispatcherScanner) Scan(ctx context.Context, q workers.Querier, req workers.ScanRequest) (workers.ScanResult, error) {
	return scanGroups(ctx, q, req, true, func(k jobs.GroupKey) river.JobArgs { return jobs.CancelGroupArgs{GroupKey: k} })
}
