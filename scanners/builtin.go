package scanners

import (
	"time"

	"github.com/ffriver/ffriver/workers"
)

// Names of the built-in scanners.
const (
	AttemptTimeout       = "attempt_timeout"
	DelayedPromoter      = "delayed_promoter"
	ExecutionDeadline    = "execution_deadline"
	EdgeCancelDispatcher = "edge_cancel_dispatcher"
	EdgeCancelReconciler = "edge_cancel_reconciler"
	OutboxRetention      = "outbox_retention"
	Dependency           = "dependency"
	ExecutionRetention   = "execution_retention"
)

// DefaultBatch is the batch size of the built-in scanners but the
// edge-cancel ones (50 groups, each a transaction cancelling its members).
const DefaultBatch = 1000

// DefaultSweep is the sweep period (Settings.Sweep) of the built-in
// scanners that ticks every second: attempt_timeout, delayed_promoter and
// execution_deadline. Their scans read on from where the last one left off,
// and start from the beginning every 30 s. Long enough that a backlog
// drains between two sweeps (ffctl bench expire drains 20,000 leases in
// well under 30 s on two cores), so a sweep rarely re-reads items still
// queued; short enough that an item whose job was lost waits less than a
// minute.
const DefaultSweep = 30 * time.Second

// BuiltinOptions are the built-in scanners' settings that are not
// Settings (schedule, batch): their retention periods. The zero value is
// every default.
type BuiltinOptions struct {
	// OutboxRetention: outbox events older than this are deleted
	// (outbox_retention). 0 means DefaultOutboxRetention.
	OutboxRetention time.Duration
	// ExecutionRetention: terminal executions older than this are removed
	// (execution_retention). 0 means DefaultExecutionRetention;
	// KeepExecutions keeps them forever.
	ExecutionRetention time.Duration
}

// Builtins returns the built-in plug-ins, each built-in scanner with its
// item kinds (items.go), in the order they are registered: attempt_timeout,
// delayed_promoter and execution_deadline (every second, batch 1,000),
// edge_cancel_dispatcher (every second, batch 50), edge_cancel_reconciler
// (every 10 s, batch 50), outbox_retention (every minute, batch 1,000,
// events older than o.OutboxRetention), dependency (every 5 s, batch 1,000,
// flow hops uncounted DefaultDependencyStale after their upstream became
// terminal) and execution_retention (every minute, batch 1,000, terminal
// executions older than o.ExecutionRetention).
func Builtins(o BuiltinOptions) []workers.Plugin {
	return []workers.Plugin{
		{Scanner: AttemptTimeoutScanner{}, Items: []workers.Item{workers.GroupItemOf(expireAttempt, expireAttemptMany)}},
		{Scanner: DelayedPromoterScanner{}, Items: []workers.Item{workers.GroupItemOf(promoteDelayed, promoteDelayedMany)}},
		{Scanner: ExecutionDeadlineScanner{}, Items: []workers.Item{workers.GroupItemOf(expireDeadline, expireDeadlineMany)}},
		{Scanner: EdgeCancelDispatcherScanner{}, Items: []workers.Item{workers.ItemOf(dispatchCancelGroup)}},
		{Scanner: EdgeCancelReconcilerScanner{}, Items: []workers.Item{workers.ItemOf(reconcileCancelGroup)}},
		{Scanner: NewOutboxRetentionScanner(o.OutboxRetention), Items: []workers.Item{workers.ItemOf(trimOutbox)}},
		{Scanner: NewDependencyScanner(0), Items: []workers.Item{workers.ItemOf(dispatchCompletion)}},
		{Scanner: NewExecutionRetentionScanner(o.ExecutionRetention), Items: []workers.Item{workers.ItemOf(removeExecutions)}},
	}
}
