package scanners

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/jobs"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
)

// Names of the built-in scanners.
const (
	AttemptTimeout       = "attempt_timeout"
	DelayedPromoter      = "delayed_promoter"
	ExecutionDeadline    = "execution_deadline"
	EdgeCancelDispatcher = "edge_cancel_dispatcher"
	EdgeCancelReconciler = "edge_cancel_reconciler"
	OutboxRetention      = "outbox_retention"
)

// DefaultBatch is the batch size of the built-in scanners but the
// edge-cancel ones (50 groups, each a transaction cancelling its members).
const DefaultBatch = 1000

// Builtins returns the built-in scanners with their defaults, in the order
// they are registered: attempt_timeout, delayed_promoter and
// execution_deadline (every second, batch 1,000), edge_cancel_dispatcher
// (every second, batch 50), edge_cancel_reconciler (every 10 s, batch 50)
// outbox_retention (every minute, batch 1,000, events older than
// retention; 0 means DefaultRetention) and dependency (every 5 s, batch
// 1,000, completion events undispatched for DefaultDependencyStale).
func Builtins(retention time.Duration) []Scanner {
	return []Scanner{
		AttemptTimeoutScanner{},
		DelayedPromoterScanner{},
		ExecutionDeadlineScanner{},
		EdgeCancelDispatcherScanner{},
		EdgeCancelReconcilerScanner{},
		NewOutboxRetentionScanner(retention),
		NewDependencyScanner(0),
	}
}

// RegisterBuiltins registers Builtins(retention) in r.
func RegisterBuiltins(r *Registry, retention time.Duration) error {
	for _, s := range Builtins(retention) {
		if err := r.Register(s); err != nil {
			return err
		}
	}
	return nil
}

// execCursor is the keyset position of the execution scanners: the due time
// and the execution id of the last candidate.
type execCursor struct {
	Ms int64     `json:"ms"`
	ID uuid.UUID `json:"id"`
}

func decodeExecCursor(b json.RawMessage) (ms *int64, id *uuid.UUID, err error) {
	if len(b) == 0 {
		return nil, nil, nil
	}
	var c execCursor
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, nil, ff.Validationf("after", "not a scan cursor: %v", err)
	}
	return &c.Ms, &c.ID, nil
}

// dueByPartition runs a "SELECT partition_key, count(*), min(due time) …
// GROUP BY partition_key" query.
func dueByPartition(ctx context.Context, q Querier, sql string, args ...any) ([]Due, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, dbutil.MapErr(err, "due partitions")
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Due, error) {
		var d Due
		var oldest *int64
		err := r.Scan(&d.Partition, &d.Count, &oldest)
		if oldest != nil {
			d.OldestMs = *oldest
		}
		return d, err
	})
	return out, dbutil.MapErr(err, "due partitions")
}

// scanExecutions runs a candidate query returning (execution_id, due_ms,
// extra int) rows and builds items with mk.
func scanExecutions(ctx context.Context, q Querier, req ScanRequest, sql string, mk func(id ff.ExecutionID, extra int32) river.JobArgs) (ScanResult, error) {
	afterMs, afterID, err := decodeExecCursor(req.After)
	if err != nil {
		return ScanResult{}, err
	}
	ns, tk, tv := req.FilterArgs()
	rows, err := q.Query(ctx, req.Env.SQL(sql), req.Partition, req.NowMs, ns, tk, tv, afterMs, afterID, req.Limit)
	if err != nil {
		return ScanResult{}, dbutil.MapErr(err, "scanning")
	}
	defer rows.Close()
	var res ScanResult
	var last execCursor
	for rows.Next() {
		var u uuid.UUID
		var ms int64
		var extra int32
		if err := rows.Scan(&u, &ms, &extra); err != nil {
			return ScanResult{}, dbutil.MapErr(err, "scanning")
		}
		res.Candidates++
		res.Items = append(res.Items, mk(ff.ExecutionID{Partition: req.Partition, UUID: u}, extra))
		last = execCursor{Ms: ms, ID: u}
	}
	if err := rows.Err(); err != nil {
		return ScanResult{}, dbutil.MapErr(err, "scanning")
	}
	if res.Candidates > 0 {
		res.Next, _ = json.Marshal(last)
	}
	return res, nil
}

// The filter and cursor predicates every execution scan shares: $3 namespace,
// $4/$5 tag key/value, $6/$7 cursor, $8 limit.
const execFilterSQL = `
  AND ($3::text IS NULL OR c.raw_fields->>'namespace' = $3::text)
  AND ($4::text IS NULL OR c.raw_fields->'tags'->>$4::text = $5::text)`

// AttemptTimeoutScanner expires attempts whose lease has passed: the
// attempt_timeout action (executions.Store.ExpireAttemptTx) on every
// active execution whose current attempt's lease_expires_at_ms is in the
// past. Item job: ff.expire_attempt {id, attempt_index}.
type AttemptTimeoutScanner struct{}

// Name implements Scanner.
func (AttemptTimeoutScanner) Name() string { return AttemptTimeout }

// Defaults implements Scanner.
func (AttemptTimeoutScanner) Defaults() Settings {
	return Settings{Interval: time.Second, Batch: DefaultBatch}
}

// Due implements Scanner (index ff_attempt_lease_due_idx).
func (AttemptTimeoutScanner) Due(ctx context.Context, q Querier, req DueRequest) ([]Due, error) {
	return dueByPartition(ctx, q, req.Env.SQL(`SELECT partition_key, count(*), min(lease_expires_at_ms) FROM {S}ff_attempt
		WHERE lease_expires_at_ms IS NOT NULL AND lease_expires_at_ms < $1 GROUP BY partition_key`), req.NowMs)
}

// Scan implements Scanner.
func (AttemptTimeoutScanner) Scan(ctx context.Context, q Querier, req ScanRequest) (ScanResult, error) {
	return scanExecutions(ctx, q, req, `
SELECT a.execution_id, a.lease_expires_at_ms, a.attempt_index
FROM {S}ff_attempt a
JOIN {S}ff_exec_core c ON c.partition_key = a.partition_key AND c.execution_id = a.execution_id
WHERE a.partition_key = $1 AND a.lease_expires_at_ms IS NOT NULL AND a.lease_expires_at_ms < $2
  AND c.lifecycle_phase = 'active' AND c.attempt_index = a.attempt_index`+execFilterSQL+`
  AND ($6::bigint IS NULL OR (a.lease_expires_at_ms, a.execution_id) > ($6::bigint, $7::uuid))
ORDER BY a.lease_expires_at_ms, a.execution_id
LIMIT $8`, func(id ff.ExecutionID, attempt int32) river.JobArgs {
		return jobs.ExpireAttemptArgs{ID: id, AttemptIndex: attempt}
	})
}

// AddWorkers implements Scanner.
func (AttemptTimeoutScanner) AddWorkers(workers *river.Workers, env *Env) error {
	return river.AddWorkerSafely(workers, NewItemWorker(env, func(ctx context.Context, tx pgx.Tx, a jobs.ExpireAttemptArgs) (Output, error) {
		out, err := env.Store.ExpireAttemptTx(ctx, tx, a.ID, a.AttemptIndex)
		return Output{Outcome: out}, err
	}))
}

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
	return Settings{Interval: time.Second, Batch: DefaultBatch}
}

// Due implements Scanner (index ff_exec_core_delay_due_idx).
func (DelayedPromoterScanner) Due(ctx context.Context, q Querier, req DueRequest) ([]Due, error) {
	return dueByPartition(ctx, q, req.Env.SQL(`SELECT partition_key, count(*), min(delay_until_ms) FROM {S}ff_exec_core
		WHERE delay_until_ms IS NOT NULL AND delay_until_ms <= $1 GROUP BY partition_key`), req.NowMs)
}

// Scan implements Scanner.
func (DelayedPromoterScanner) Scan(ctx context.Context, q Querier, req ScanRequest) (ScanResult, error) {
	return scanExecutions(ctx, q, req, `
SELECT c.execution_id, c.delay_until_ms, 0
FROM {S}ff_exec_core c
WHERE c.partition_key = $1 AND c.delay_until_ms IS NOT NULL AND c.delay_until_ms <= $2
  AND c.lifecycle_phase = 'runnable' AND c.eligibility_state = 'not_eligible_until_time'`+execFilterSQL+`
  AND ($6::bigint IS NULL OR (c.delay_until_ms, c.execution_id) > ($6::bigint, $7::uuid))
ORDER BY c.delay_until_ms, c.execution_id
LIMIT $8`, func(id ff.ExecutionID, _ int32) river.JobArgs {
		return jobs.PromoteDelayedArgs{ID: id}
	})
}

// AddWorkers implements Scanner.
func (DelayedPromoterScanner) AddWorkers(workers *river.Workers, env *Env) error {
	return river.AddWorkerSafely(workers, NewItemWorker(env, func(ctx context.Context, tx pgx.Tx, a jobs.PromoteDelayedArgs) (Output, error) {
		out, err := env.Store.PromoteDelayedTx(ctx, tx, a.ID)
		return Output{Outcome: out}, err
	}))
}

// ExecutionDeadlineScanner expires non-terminal executions past their
// deadline_at_ms: the execution_deadline action
// (executions.Store.ExpireDeadlineTx). Item job: ff.expire_deadline {id}.
type ExecutionDeadlineScanner struct{}

// Name implements Scanner.
func (ExecutionDeadlineScanner) Name() string { return ExecutionDeadline }

// Defaults implements Scanner.
func (ExecutionDeadlineScanner) Defaults() Settings {
	return Settings{Interval: time.Second, Batch: DefaultBatch}
}

// Due implements Scanner (index ff_exec_core_deadline_due_idx).
func (ExecutionDeadlineScanner) Due(ctx context.Context, q Querier, req DueRequest) ([]Due, error) {
	return dueByPartition(ctx, q, req.Env.SQL(`SELECT partition_key, count(*), min(deadline_at_ms) FROM {S}ff_exec_core
		WHERE deadline_at_ms IS NOT NULL AND lifecycle_phase NOT IN ('terminal', 'cancelled') AND deadline_at_ms < $1
		GROUP BY partition_key`), req.NowMs)
}

// Scan implements Scanner.
func (ExecutionDeadlineScanner) Scan(ctx context.Context, q Querier, req ScanRequest) (ScanResult, error) {
	return scanExecutions(ctx, q, req, `
SELECT c.execution_id, c.deadline_at_ms, 0
FROM {S}ff_exec_core c
WHERE c.partition_key = $1 AND c.deadline_at_ms IS NOT NULL AND c.deadline_at_ms < $2
  AND c.lifecycle_phase NOT IN ('terminal', 'cancelled')`+execFilterSQL+`
  AND ($6::bigint IS NULL OR (c.deadline_at_ms, c.execution_id) > ($6::bigint, $7::uuid))
ORDER BY c.deadline_at_ms, c.execution_id
LIMIT $8`, func(id ff.ExecutionID, _ int32) river.JobArgs {
		return jobs.ExpireDeadlineArgs{ID: id}
	})
}

// AddWorkers implements Scanner.
func (ExecutionDeadlineScanner) AddWorkers(workers *river.Workers, env *Env) error {
	return river.AddWorkerSafely(workers, NewItemWorker(env, func(ctx context.Context, tx pgx.Tx, a jobs.ExpireDeadlineArgs) (Output, error) {
		out, err := env.Store.ExpireDeadlineTx(ctx, tx, a.ID)
		return Output{Outcome: out}, err
	}))
}

// groupCursor is the keyset position of the edge-cancel scanners.
type groupCursor struct {
	Ms   int64     `json:"ms"`
	Flow uuid.UUID `json:"flow"`
	EID  uuid.UUID `json:"eid"`
}

// scanGroups selects pending cancel groups of one partition. With onlyFlagged
// it skips groups whose flag is already cleared (the reconciler's). The
// filter applies to the group's downstream execution.
func scanGroups(ctx context.Context, q Querier, req ScanRequest, onlyFlagged bool, mk func(jobs.GroupKey) river.JobArgs) (ScanResult, error) {
	var afterMs *int64
	var afterFlow, afterEID *uuid.UUID
	if len(req.After) > 0 {
		var c groupCursor
		if err := json.Unmarshal(req.After, &c); err != nil {
			return ScanResult{}, ff.Validationf("after", "not a group cursor: %v", err)
		}
		afterMs, afterFlow, afterEID = &c.Ms, &c.Flow, &c.EID
	}
	ns, tk, tv := req.FilterArgs()
	rows, err := q.Query(ctx, req.Env.SQL(`
SELECT p.flow_id, p.downstream_eid, p.enqueued_at_ms
FROM {S}ff_pending_cancel_groups p
LEFT JOIN {S}ff_edge_group g
  ON g.partition_key = p.partition_key AND g.flow_id = p.flow_id AND g.downstream_eid = p.downstream_eid
WHERE p.partition_key = $1
  AND (NOT $2::bool OR g.downstream_eid IS NULL OR g.cancel_siblings_pending_flag)
  AND (($3::text IS NULL AND $4::text IS NULL) OR EXISTS (
        SELECT 1 FROM {S}ff_exec_core c
        WHERE c.partition_key = p.partition_key AND c.execution_id = p.downstream_eid`+execFilterSQL+`))
  AND ($6::bigint IS NULL OR (p.enqueued_at_ms, p.flow_id, p.downstream_eid) > ($6::bigint, $7::uuid, $9::uuid))
ORDER BY p.enqueued_at_ms, p.flow_id, p.downstream_eid
LIMIT $8`), req.Partition, onlyFlagged, ns, tk, tv, afterMs, afterFlow, req.Limit, afterEID)
	if err != nil {
		return ScanResult{}, dbutil.MapErr(err, "scanning pending cancel groups")
	}
	defer rows.Close()
	var res ScanResult
	var last groupCursor
	for rows.Next() {
		var c groupCursor
		if err := rows.Scan(&c.Flow, &c.EID, &c.Ms); err != nil {
			return ScanResult{}, dbutil.MapErr(err, "scanning pending cancel groups")
		}
		res.Candidates++
		res.Items = append(res.Items, mk(jobs.GroupKey{Partition: req.Partition, FlowID: c.Flow, DownstreamEID: c.EID}))
		last = c
	}
	if err := rows.Err(); err != nil {
		return ScanResult{}, dbutil.MapErr(err, "scanning pending cancel groups")
	}
	if res.Candidates > 0 {
		res.Next, _ = json.Marshal(last)
	}
	return res, nil
}

const pendingGroupsDueSQL = `SELECT partition_key, count(*), min(enqueued_at_ms) FROM {S}ff_pending_cancel_groups GROUP BY partition_key`

func groupKey(k jobs.GroupKey) executions.GroupKey {
	return executions.GroupKey{Partition: k.Partition, FlowID: k.FlowID, DownstreamEID: k.DownstreamEID}
}

func groupOutput(r executions.GroupResult) Output {
	return Output{Outcome: r.Outcome, Detail: r}
}

// EdgeCancelDispatcherScanner drains flagged sibling-cancel groups: for each
// ff_pending_cancel_groups row whose ff_edge_group has its cancel flag set
// (or is missing: an orphan), executions.Store.DispatchCancelGroupTx
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
func (EdgeCancelDispatcherScanner) Defaults() Settings {
	return Settings{Interval: time.Second, Batch: 50}
}

// Due implements Scanner (the pending table's primary key).
func (EdgeCancelDispatcherScanner) Due(ctx context.Context, q Querier, req DueRequest) ([]Due, error) {
	return dueByPartition(ctx, q, req.Env.SQL(pendingGroupsDueSQL))
}

// Scan implements Scanner.
func (EdgeCancelDispatcherScanner) Scan(ctx context.Context, q Querier, req ScanRequest) (ScanResult, error) {
	return scanGroups(ctx, q, req, true, func(k jobs.GroupKey) river.JobArgs { return jobs.CancelGroupArgs{GroupKey: k} })
}

// AddWorkers implements Scanner.
func (EdgeCancelDispatcherScanner) AddWorkers(workers *river.Workers, env *Env) error {
	return river.AddWorkerSafely(workers, NewItemWorker(env, func(ctx context.Context, tx pgx.Tx, a jobs.CancelGroupArgs) (Output, error) {
		r, err := env.Store.DispatchCancelGroupTx(ctx, tx, groupKey(a.GroupKey))
		return groupOutput(r), err
	}))
}

// EdgeCancelReconcilerScanner is the safety net of the dispatcher: for each
// pending cancel group, executions.Store.ReconcileCancelGroupTx deletes
// stale rows (group gone or flag cleared: sremmed_stale), drains groups
// whose members are all terminal (completed_drain), and leaves groups with
// running members to the dispatcher (no_op). Partitioned and filtered like
// the dispatcher. Item job: ff.reconcile_group {partition, flow_id,
// downstream_eid}.
type EdgeCancelReconcilerScanner struct{}

// Name implements Scanner.
func (EdgeCancelReconcilerScanner) Name() string { return EdgeCancelReconciler }

// Defaults implements Scanner.
func (EdgeCancelReconcilerScanner) Defaults() Settings {
	return Settings{Interval: 10 * time.Second, Batch: 50}
}

// Due implements Scanner.
func (EdgeCancelReconcilerScanner) Due(ctx context.Context, q Querier, req DueRequest) ([]Due, error) {
	return dueByPartition(ctx, q, req.Env.SQL(pendingGroupsDueSQL))
}

// Scan implements Scanner.
func (EdgeCancelReconcilerScanner) Scan(ctx context.Context, q Querier, req ScanRequest) (ScanResult, error) {
	return scanGroups(ctx, q, req, false, func(k jobs.GroupKey) river.JobArgs { return jobs.ReconcileGroupArgs{GroupKey: k} })
}

// AddWorkers implements Scanner.
func (EdgeCancelReconcilerScanner) AddWorkers(workers *river.Workers, env *Env) error {
	return river.AddWorkerSafely(workers, NewItemWorker(env, func(ctx context.Context, tx pgx.Tx, a jobs.ReconcileGroupArgs) (Output, error) {
		r, err := env.Store.ReconcileCancelGroupTx(ctx, tx, groupKey(a.GroupKey))
		return groupOutput(r), err
	}))
}

// DefaultRetention is how long outbox events are kept by default.
const DefaultRetention = 7 * 24 * time.Hour

// OutboxRetentionScanner deletes lease and completion events older than its
// retention, in bounded batches: its scan inserts one ff.trim_outbox job per
// outbox table that has old events; each deletes at most a batch in one
// transaction and, when it deleted a full batch, re-enqueues itself in the
// same transaction, so a backlog drains without waiting for the next tick.
//
// It is global (partition 0 stands for the whole table). The filter applies
// to the columns copied onto each event: the namespace, and the instance
// tag value when the filter's tag key is "cairn.instance_id"; a filter on
// another tag key cannot be matched against events, so such a deployment
// deletes no events (leave retention to an unfiltered one).
type OutboxRetentionScanner struct {
	retention time.Duration
}

// NewOutboxRetentionScanner returns the retention scanner keeping events for
// retention (0: DefaultRetention).
func NewOutboxRetentionScanner(retention time.Duration) *OutboxRetentionScanner {
	if retention <= 0 {
		retention = DefaultRetention
	}
	return &OutboxRetentionScanner{retention: retention}
}

// ageParams is the params of the scanners whose items are due once older
// than an age (retention, dependency staleness): the age travels in the tick
// and scan args, so scans worked elsewhere use the scheduler's.
type ageParams struct {
	AgeMs int64 `json:"age_ms"`
}

func ageParamsOf(age time.Duration) (json.RawMessage, error) {
	return json.Marshal(ageParams{AgeMs: age.Milliseconds()})
}

// ageCutoff returns now minus the age in params (def when params are
// empty or carry none): items older than the cutoff are due.
func ageCutoff(scanner string, def time.Duration, params json.RawMessage, now int64) (int64, error) {
	age := def.Milliseconds()
	if len(params) > 0 {
		var p ageParams
		if err := json.Unmarshal(params, &p); err != nil {
			return 0, ff.Validationf("params", "%s: %v", scanner, err)
		}
		if p.AgeMs < 0 {
			return 0, ff.Validationf("params", "%s: negative age_ms %d", scanner, p.AgeMs)
		}
		if p.AgeMs > 0 {
			age = p.AgeMs
		}
	}
	return now - age, nil
}

// Name implements Scanner.
func (*OutboxRetentionScanner) Name() string { return OutboxRetention }

// Defaults implements Scanner.
func (*OutboxRetentionScanner) Defaults() Settings {
	return Settings{Interval: time.Minute, Batch: DefaultBatch}
}

// Params implements ParamsProvider: the retention travels in the job args.
func (s *OutboxRetentionScanner) Params() (json.RawMessage, error) { return ageParamsOf(s.retention) }

func (s *OutboxRetentionScanner) cutoff(params json.RawMessage, now int64) (int64, error) {
	return ageCutoff(OutboxRetention, s.retention, params, now)
}

// eventFilter returns the event-column filter parameters, and ok=false when
// the filter cannot be applied to events.
func eventFilter(f ff.Filter) (namespace, instanceTag *string, ok bool) {
	if f.InstanceTag != nil && f.InstanceTag.Key != ff.InstanceTagKey {
		return nil, nil, false
	}
	if f.Namespace != "" {
		ns := f.Namespace
		namespace = &ns
	}
	if f.InstanceTag != nil {
		v := f.InstanceTag.Value
		instanceTag = &v
	}
	return namespace, instanceTag, true
}

const eventFilterSQL = ` AND ($2::text IS NULL OR namespace = $2::text) AND ($3::text IS NULL OR instance_tag = $3::text)`

func outboxTable(name string) (string, error) {
	switch name {
	case jobs.OutboxLease:
		return "{S}ff_lease_event", nil
	case jobs.OutboxCompletion:
		return "{S}ff_completion_event", nil
	}
	return "", ff.Validationf("table", "%q: want %q or %q", name, jobs.OutboxLease, jobs.OutboxCompletion)
}

func (s *OutboxRetentionScanner) oldTables(ctx context.Context, q Querier, env *Env, f ff.Filter, params json.RawMessage, now int64) (tables []string, cutoff int64, err error) {
	ns, tag, ok := eventFilter(f)
	if !ok {
		return nil, 0, nil
	}
	if cutoff, err = s.cutoff(params, now); err != nil {
		return nil, 0, err
	}
	for _, t := range []string{jobs.OutboxLease, jobs.OutboxCompletion} {
		table, _ := outboxTable(t)
		var any bool
		if err := q.QueryRow(ctx, env.SQL(`SELECT EXISTS (SELECT 1 FROM `+table+` WHERE occurred_at_ms < $1`+eventFilterSQL+`)`),
			cutoff, ns, tag).Scan(&any); err != nil {
			return nil, 0, dbutil.MapErr(err, "looking for old events")
		}
		if any {
			tables = append(tables, t)
		}
	}
	return tables, cutoff, nil
}

// Due implements Scanner: partition 0 when either table has old events
// (BRIN indexes on occurred_at_ms).
func (s *OutboxRetentionScanner) Due(ctx context.Context, q Querier, req DueRequest) ([]Due, error) {
	tables, _, err := s.oldTables(ctx, q, req.Env, req.Filter, req.Params, req.NowMs)
	if err != nil || len(tables) == 0 {
		return nil, err
	}
	return []Due{{Partition: 0, Count: int64(len(tables))}}, nil
}

// Scan implements Scanner: one trim job per table with old events.
func (s *OutboxRetentionScanner) Scan(ctx context.Context, q Querier, req ScanRequest) (ScanResult, error) {
	tables, cutoff, err := s.oldTables(ctx, q, req.Env, req.Filter, req.Params, req.NowMs)
	if err != nil {
		return ScanResult{}, err
	}
	ns, tag, _ := eventFilter(req.Filter)
	var res ScanResult
	for _, t := range tables {
		res.Items = append(res.Items, jobs.TrimOutboxArgs{Table: t, CutoffMs: cutoff, Limit: req.Limit, Namespace: ns, InstanceTag: tag})
	}
	return res, nil
}

// TrimOutput is the River job output detail of a trim.
type TrimOutput struct {
	Deleted   int64 `json:"deleted"`
	Continued bool  `json:"continued"`
}

// AddWorkers implements Scanner.
func (s *OutboxRetentionScanner) AddWorkers(workers *river.Workers, env *Env) error {
	return river.AddWorkerSafely(workers, &trimWorker{env: env})
}

type trimWorker struct {
	river.WorkerDefaults[jobs.TrimOutboxArgs]
	env *Env
}

func (w *trimWorker) Timeout(*river.Job[jobs.TrimOutboxArgs]) time.Duration { return w.env.JobTimeout }

func (w *trimWorker) NextRetry(job *river.Job[jobs.TrimOutboxArgs]) time.Time {
	return time.Now().Add(jobs.RetryDelay(job.Attempt))
}

func (w *trimWorker) Work(ctx context.Context, job *river.Job[jobs.TrimOutboxArgs]) error {
	a := job.Args
	table, err := outboxTable(a.Table)
	if err != nil {
		return river.JobCancel(err)
	}
	if a.Limit < 1 || a.Limit > 100_000 {
		return river.JobCancel(ff.Validationf("limit", "%d is outside 1..100000", a.Limit))
	}
	var out TrimOutput
	err = inTx(ctx, w.env, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, w.env.SQL(`DELETE FROM `+table+` e USING (
			SELECT event_id FROM `+table+` WHERE occurred_at_ms < $1`+eventFilterSQL+`
			LIMIT $4 FOR UPDATE SKIP LOCKED) d
			WHERE e.event_id = d.event_id`), a.CutoffMs, a.Namespace, a.InstanceTag, a.Limit)
		if err != nil {
			return dbutil.MapErr(err, fmt.Sprintf("trimming %s events", a.Table))
		}
		out = TrimOutput{Deleted: tag.RowsAffected(), Continued: tag.RowsAffected() >= int64(a.Limit)}
		outcome := executions.Processed
		if out.Deleted == 0 {
			outcome = executions.NoOp
		}
		// Complete this job before inserting its successor (same unique
		// arguments), so the two do not collide.
		if err := complete(ctx, tx, job, Output{Outcome: outcome, Detail: out}); err != nil {
			return err
		}
		if out.Continued {
			_, _, err := insertMany(ctx, tx, []river.InsertManyParams{{Args: a, InsertOpts: &river.InsertOpts{
				Queue: job.Queue, MaxAttempts: jobs.ItemMaxAttempts, UniqueOpts: jobs.UniqueInFlight()}}})
			return err
		}
		return nil
	})
	if err != nil {
		w.env.Logger.WarnContext(ctx, "ffriver: outbox trim failed; River retries it", "table", a.Table, "attempt", job.Attempt, "error", err)
	}
	return err
}
