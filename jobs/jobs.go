// Package jobs holds the River job arguments of every job kind ffriver
// inserts, their kinds and the names of its queues: what an application that
// embeds ffriver refers to in its own River queries, River UI filters and
// alerts (for example, ffriver's ticks are jobs of kind KindTick in queue
// ScanQueue(filter); its item jobs are in ApplyQueue(filter)). ffriver
// inserts and works every one of them; an application never needs to.
//
// The pipeline has three levels (see package scanners):
//
//	ff.tick {scanner}                   periodic, leader only   queue ff_scan
//	ff.scan {scanner, partition}        one per due partition   queue ff_scan
//	ff.expire_attempt, ff.promote_delayed, ff.expire_deadline,
//	ff.cancel_group, ff.reconcile_group, ff.trim_outbox,
//	ff.remove_executions,
//	ff.dispatch_completion              one per item            queue ff_apply
//	ff.advance                          one per flow hop        queue ff_apply
//
// No job is the only record of its work: each item is found again from the
// data while it is due, so a lost, cancelled, discarded or deleted job
// delays its work until a scan re-creates it, never loses it.
//
// Ticks and scans carry the scanner's batch size, its parameters and the
// scanner filter chosen by the process that schedules them, so every process
// that works a scan scans exactly as the scheduler was configured.
//
// Kinds match River's kind pattern; queue names match River's queue pattern.
// Nothing in this package talks to a database.
package jobs

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/outbox"
	"github.com/google/uuid"
)

// Queues of an unfiltered deployment. River's "default" queue is never used,
// so ffriver can share a River schema with an application's own jobs.
const (
	// QueueScan carries ticks and partition scans: cheap, read-mostly jobs.
	QueueScan = "ff_scan"
	// QueueApply carries the per-item actions (one River job per item).
	QueueApply = "ff_apply"
)

// Job kinds.
const (
	KindTick           = "ff.tick"
	KindRescue         = "ff.rescue"
	KindScan           = "ff.scan"
	KindExpireAttempt  = "ff.expire_attempt"
	KindPromoteDelayed = "ff.promote_delayed"
	KindExpireDeadline = "ff.expire_deadline"
	KindCancelGroup    = "ff.cancel_group"
	KindReconcileGroup = "ff.reconcile_group"
	KindTrimOutbox     = "ff.trim_outbox"
	// KindRemoveExecutions removes terminal executions past retention in
	// one partition (the execution_retention scanner's item).
	KindRemoveExecutions = "ff.remove_executions"
	// KindAdvance advances one downstream edge group of a flow by one
	// upstream's terminal outcome (a hop of the completion cascade).
	KindAdvance = "ff.advance"
	// KindDispatchCompletion dispatches one completion event that was
	// written without its cascade (the dependency scanner's item before
	// it found hops from the edges; still worked for queued jobs).
	KindDispatchCompletion = "ff.dispatch_completion"
)

// Filter is a scanner filter as carried in job arguments.
type Filter struct {
	Namespace string `json:"namespace,omitempty"`
	TagKey    string `json:"tag_key,omitempty"`
	TagValue  string `json:"tag_value,omitempty"`
	// HasTag distinguishes a tag filter with an empty value from none.
	HasTag bool `json:"has_tag,omitempty"`
}

// FilterOf returns f in job-argument form, nil for the zero filter.
func FilterOf(f ff.Filter) *Filter {
	if f.IsZero() {
		return nil
	}
	out := &Filter{Namespace: f.Namespace}
	if f.InstanceTag != nil {
		out.TagKey, out.TagValue, out.HasTag = f.InstanceTag.Key, f.InstanceTag.Value, true
	}
	return out
}

// FF returns the filter as an ff.Filter; a nil *Filter is the zero filter.
func (f *Filter) FF() ff.Filter {
	if f == nil {
		return ff.Filter{}
	}
	out := ff.Filter{Namespace: f.Namespace}
	if f.HasTag {
		out.InstanceTag = &ff.Tag{Key: f.TagKey, Value: f.TagValue}
	}
	return out
}

// filterSuffix is "" for the zero filter, else "_" and 12 hex digits of a
// hash of the filter: filter values may hold anything, queue names may not.
func filterSuffix(f ff.Filter) string {
	if f.IsZero() {
		return ""
	}
	b, _ := json.Marshal(FilterOf(f))
	sum := sha256.Sum256(b)
	return "_" + hex.EncodeToString(sum[:6])
}

// ScanQueue is the queue of the ticks and scans of a deployment with filter
// f: QueueScan for the zero filter, else QueueScan plus a hash of the filter.
// A worker started with a filter works only its filter's queues, so its
// filter takes effect even though the scheduler inserts the jobs.
func ScanQueue(f ff.Filter) string { return QueueScan + filterSuffix(f) }

// ApplyQueue is the queue of the per-item jobs of a deployment with filter f.
func ApplyQueue(f ff.Filter) string { return QueueApply + filterSuffix(f) }

// TickArgs is the periodic job of one scanner.
type TickArgs struct {
	Scanner string `json:"scanner"`
	// Batch is the most candidates one scan selects.
	Batch int `json:"batch"`
	// Params are the scanner's own settings (see workers.ParamsProvider).
	Params json.RawMessage `json:"params,omitempty"`
	Filter *Filter         `json:"filter,omitempty"`
	// SweepMs is the scanner's sweep period (workers.Settings.Sweep) in
	// milliseconds; 0: no scan cursor, every scan starts from the beginning.
	SweepMs int64 `json:"sweep_ms,omitempty"`
	// Schema is the schema of the ffriver tables the tick is for: how a
	// process finds the River its ticks go to, whatever River schema it was
	// configured with (ffriver.New, CheckTicks). The tick's worker does not
	// read it.
	Schema string `json:"schema,omitempty"`
	// Wake marks the ticks of the leader's wake loop (ffriver.Service.Wake):
	// their own args, so that River's tick uniqueness makes wake ticks one
	// while in flight but never swallows a periodic tick, which counts
	// everything due, also what a lost wake tick left.
	Wake bool `json:"wake,omitempty"`
}

// Kind implements river.JobArgs.
func (TickArgs) Kind() string { return KindTick }

// RescueArgs re-queues ffriver's jobs left running by a process that died
// (the workers package's rescue worker): jobs of Queues running for longer than AfterMs.
type RescueArgs struct {
	Queues  []string `json:"queues"`
	AfterMs int64    `json:"after_ms"`
}

// Kind implements river.JobArgs.
func (RescueArgs) Kind() string { return KindRescue }

// ScanArgs scans one partition for one scanner, or a few: a tick groups
// partitions with few due items into one scan (Partitions), so that a tick
// finding a little due work in each of 256 partitions inserts one or two
// scans instead of 256.
type ScanArgs struct {
	Scanner   string          `json:"scanner"`
	Partition int16           `json:"partition"`
	Batch     int             `json:"batch"`
	Params    json.RawMessage `json:"params,omitempty"`
	Filter    *Filter         `json:"filter,omitempty"`
	// After is the scanner's keyset cursor: a scan from the beginning that
	// filled its batch re-enqueues itself with the position of its last
	// candidate, so a backlog drains without waiting for the next tick.
	// Only a scan of one partition has one.
	After json.RawMessage `json:"after,omitempty"`
	// Partitions are further partitions this scan covers after Partition,
	// each scanned with the whole batch as its limit.
	Partitions []int16 `json:"partitions,omitempty"`
	// SweepMs is the tick's (TickArgs.SweepMs): with it, a scan without
	// After starts from the partition's scan cursor, or from the beginning
	// once a sweep period has passed.
	SweepMs int64 `json:"sweep_ms,omitempty"`
	// CatchUp are the partitions of this scan (Partition, Partitions)
	// whose oldest due item had been due for a tenth of the sweep period
	// or longer when the tick looked: a scan of one of them sweeps (reads
	// from the beginning) once a tenth of the sweep period has passed
	// since its last sweep, to find a due time written behind the cursor
	// (a writer whose clock is behind the scanner's, a slow commit) before
	// the next full period.
	CatchUp []int16 `json:"catch_up,omitempty"`
	// Round numbers the continuations of a scan that read from its cursor
	// and filled its batch (each reads on from the cursor the previous one
	// advanced); it keeps a continuation distinct from the job that
	// inserts it.
	Round int `json:"round,omitempty"`
	// Behind marks a scan a tick inserted behind a running scan of the
	// same partitions: River's uniqueness skipped the tick's scan as that
	// one's duplicate, but the running scan may have read its candidates
	// before the items the tick found came due, and the tick's count
	// starts after them (a wake tick's). The mark makes it a job of its
	// own, unique among the scans behind. Its scan is the same.
	Behind bool `json:"behind,omitempty"`
}

// Kind implements river.JobArgs.
func (ScanArgs) Kind() string { return KindScan }

// ExpireAttemptArgs is the attempt_timeout action for one attempt.
type ExpireAttemptArgs struct {
	ID           ff.ExecutionID `json:"id"`
	AttemptIndex int32          `json:"attempt_index"`
}

// Kind implements river.JobArgs.
func (ExpireAttemptArgs) Kind() string { return KindExpireAttempt }

// PromoteDelayedArgs is the delayed_promoter action for one execution.
type PromoteDelayedArgs struct {
	ID ff.ExecutionID `json:"id"`
}

// Kind implements river.JobArgs.
func (PromoteDelayedArgs) Kind() string { return KindPromoteDelayed }

// ExpireDeadlineArgs is the execution_deadline action for one execution.
type ExpireDeadlineArgs struct {
	ID ff.ExecutionID `json:"id"`
}

// Kind implements river.JobArgs.
func (ExpireDeadlineArgs) Kind() string { return KindExpireDeadline }

// GroupKey names one ff_edge_group (and its ff_pending_cancel_groups row).
type GroupKey struct {
	Partition     int16     `json:"partition"`
	FlowID        uuid.UUID `json:"flow_id"`
	DownstreamEID uuid.UUID `json:"downstream_eid"`
}

// CancelGroupArgs is the edge_cancel_dispatcher action for one group.
type CancelGroupArgs struct {
	GroupKey
}

// Kind implements river.JobArgs.
func (CancelGroupArgs) Kind() string { return KindCancelGroup }

// ReconcileGroupArgs is the edge_cancel_reconciler action for one group.
type ReconcileGroupArgs struct {
	GroupKey
}

// Kind implements river.JobArgs.
func (ReconcileGroupArgs) Kind() string { return KindReconcileGroup }

// Outbox tables TrimOutboxArgs.Table may name.
const (
	OutboxLease      = "lease"
	OutboxCompletion = "completion"
)

// OutboxTable returns the table (outbox.LeaseTable or
// outbox.CompletionTable) of the outbox a trim job names (OutboxLease or
// OutboxCompletion).
func OutboxTable(name string) (string, error) {
	switch name {
	case OutboxLease:
		return outbox.LeaseTable, nil
	case OutboxCompletion:
		return outbox.CompletionTable, nil
	}
	return "", ff.Validationf("table", "%q: want %q or %q", name, OutboxLease, OutboxCompletion)
}

// TrimOutboxArgs is one retention pass over one outbox table: with
// PartitionMs set, it first maintains the table's time partitions (creates
// them ahead, drops those older than CutoffMs: outboxretention.MaintainPartitions),
// then deletes up to Limit events older than CutoffMs from the table's
// DEFAULT partition. Only Table and the filter fields make it unique: one
// trim per table (and filter) in flight.
//
// Namespace and InstanceTag, when set, restrict the row trim to events
// whose namespace and instance_tag columns equal them (a filtered
// deployment trims only its own events, and never maintains partitions:
// they hold every tenant's events).
type TrimOutboxArgs struct {
	Table    string `json:"table" river:"unique"`
	CutoffMs int64  `json:"cutoff_ms"`
	Limit    int    `json:"limit"`
	// PartitionMs is the width of the time partitions to create, in
	// milliseconds; 0 leaves the partitions alone.
	PartitionMs int64   `json:"partition_ms,omitempty"`
	Namespace   *string `json:"namespace,omitempty" river:"unique"`
	InstanceTag *string `json:"instance_tag,omitempty" river:"unique"`
}

// Kind implements river.JobArgs.
func (TrimOutboxArgs) Kind() string { return KindTrimOutbox }

// RemoveExecutionsArgs removes, in one partition, at most Limit candidate
// terminal executions older than CutoffMs (solo ones, and flows whose every
// member is), and expires tombstones written before CutoffMs
// (the RemoveExecutions transition). Only Partition and Filter make it
// unique: one removal per partition (and filter) in flight. AfterMs and
// AfterID are the position a continuation reads on from (nil: the
// beginning).
type RemoveExecutionsArgs struct {
	Partition int16      `json:"partition" river:"unique"`
	CutoffMs  int64      `json:"cutoff_ms"`
	Limit     int        `json:"limit"`
	Filter    *Filter    `json:"filter,omitempty" river:"unique"`
	AfterMs   *int64     `json:"after_ms,omitempty"`
	AfterID   *uuid.UUID `json:"after_id,omitempty"`
}

// Kind implements river.JobArgs.
func (RemoveExecutionsArgs) Kind() string { return KindRemoveExecutions }

// AdvanceArgs is one hop of a flow's completion cascade: the downstream edge
// group of Downstream counts Upstream's terminal Outcome. Terminal
// transitions of flow members insert it in their own transaction.
type AdvanceArgs struct {
	Upstream   ff.ExecutionID `json:"upstream"`
	FlowID     uuid.UUID      `json:"flow_id"`
	Downstream uuid.UUID      `json:"downstream"`
	Outcome    string         `json:"outcome"`
}

// Kind implements river.JobArgs.
func (AdvanceArgs) Kind() string { return KindAdvance }

// DispatchCompletionArgs dispatches one undispatched completion event.
type DispatchCompletionArgs struct {
	EventID int64 `json:"event_id"`
}

// Kind implements river.JobArgs.
func (DispatchCompletionArgs) Kind() string { return KindDispatchCompletion }
