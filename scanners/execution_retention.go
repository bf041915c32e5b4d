package scanners

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/actions"
	"github.com/ffriver/ffriver/internal/settings"
	"github.com/ffriver/ffriver/jobs"
	"github.com/ffriver/ffriver/workers"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
)

// DefaultExecutionRetention is how long terminal executions are kept by
// default: as long as outbox events (DefaultOutboxRetention, 7 days), so
// that a consumer that reads a completion event can still read its
// execution (its result, its attempts) for as long as the event exists,
// and an operator looking into last week's failures finds them. Shorter
// keeps the store smaller; longer costs only disk.
const DefaultExecutionRetention = DefaultOutboxRetention

// KeepExecutions as the execution retention (ExecutionRetentionOptions,
// ffriver.Config.ExecutionRetention) keeps terminal executions forever: the
// execution_retention scanner is registered disabled (no ticks; jobs
// already queued are still worked).
const KeepExecutions time.Duration = -1

// ExecutionRetentionScanner removes terminal executions older than its
// retention, per partition: its scan inserts one ff.remove_executions job
// for a partition with executions past retention (or tombstones to
// expire), and each job runs the RemoveExecutions transition on at most
// a batch and, when it filled its batch, re-enqueues itself from its
// position in the same transaction, so a backlog drains without waiting for
// the next tick.
//
// What goes: a solo execution terminal (lifecycle_phase 'terminal', or a
// legacy 'cancelled') for longer than the retention, with its attempts;
// a flow only when every member is, then whole (members, attempts, edges,
// edge groups, pending cancel groups, the flow row). A flow with a member
// still running or recently terminal stays whole, however old its other
// members. A terminal row without terminal_at_ms (written by hand) is never
// removed, and is reported as unprocessable. Each removed execution leaves a
// tombstone (ff_exec_removed) so that reading it says "removed by
// retention" (ff.RemovedError); tombstones are expired by the same jobs one
// retention period after the removal. Outbox events are not removed with
// their execution: outbox retention is separate, so an execution's lease
// and completion events may outlive it (never the other way round with the
// defaults, which are equal).
//
// The filter applies to the execution's namespace and instance tag (in
// raw_fields), as the other execution scanners' does; a flow is removed by
// a filtered deployment only when every member is inside its filter.
//
// Nothing is carried only by the job: a lost or cancelled job delays the
// removal to the next tick, which finds the same rows again.
type ExecutionRetentionScanner struct {
	retention time.Duration
}

// NewExecutionRetentionScanner returns the scanner keeping terminal
// executions for retention: 0 means DefaultExecutionRetention,
// KeepExecutions keeps them forever (the scanner's Defaults say Disabled).
// Any other negative value is taken as KeepExecutions here; ffriver.New
// rejects it.
func NewExecutionRetentionScanner(retention time.Duration) *ExecutionRetentionScanner {
	if retention == 0 {
		retention = DefaultExecutionRetention
	}
	if retention < 0 {
		retention = KeepExecutions
	}
	return &ExecutionRetentionScanner{retention: retention}
}

// Name implements Scanner.
func (*ExecutionRetentionScanner) Name() string { return ExecutionRetention }

// Defaults implements Scanner: every minute, batch 1,000; disabled when
// executions are kept forever.
func (s *ExecutionRetentionScanner) Defaults() workers.Settings {
	return workers.Settings{Interval: time.Minute, Batch: DefaultBatch, Disabled: s.retention == KeepExecutions}
}

// retentionParams are the execution_retention scanner's params: the
// retention in milliseconds, or Keep.
type retentionParams struct {
	AgeMs int64 `json:"age_ms"`
	Keep  bool  `json:"keep,omitempty"`
}

// Params implements ParamsProvider: the retention travels in the job args,
// so scans worked elsewhere use the scheduler's.
func (s *ExecutionRetentionScanner) Params() (json.RawMessage, error) {
	if s.retention == KeepExecutions {
		return json.Marshal(retentionParams{Keep: true})
	}
	return json.Marshal(retentionParams{AgeMs: s.retention.Milliseconds()})
}

// Retention returns the retention a tick's params carry (the scheduler's),
// else the scanner's own; KeepExecutions when executions are kept.
func (s *ExecutionRetentionScanner) Retention(params json.RawMessage) (time.Duration, error) {
	cutoff, keep, err := s.cutoff(params, 0)
	if keep {
		return KeepExecutions, err
	}
	return time.Duration(-cutoff) * time.Millisecond, err
}

// StoredSetting implements workers.StoredParamsProvider: the retention
// stored in the schema (ffctl config set execution_retention) wins over
// the one the tick was inserted with. Stored "forever" makes the ticks do
// nothing; a scheduler started with "forever" has no ticks of this scanner
// until it restarts with the stored value.
func (*ExecutionRetentionScanner) StoredSetting() string { return ExecutionRetention }

// StoredParams implements workers.StoredParamsProvider.
func (*ExecutionRetentionScanner) StoredParams(value string) (json.RawMessage, error) {
	d, err := settings.ParseDuration(ExecutionRetention, value, settings.MinRetention, settings.MaxRetention, true)
	if err != nil {
		return nil, err
	}
	return NewExecutionRetentionScanner(d).Params()
}

// cutoff returns now minus the retention in params (the scanner's own when
// params are empty), or keep when executions are kept forever.
func (s *ExecutionRetentionScanner) cutoff(params json.RawMessage, now int64) (int64, bool, error) {
	p := retentionParams{AgeMs: s.retention.Milliseconds(), Keep: s.retention == KeepExecutions}
	if len(params) > 0 {
		p = retentionParams{}
		if err := json.Unmarshal(params, &p); err != nil {
			return 0, false, ff.Validationf("params", "%s: %v", ExecutionRetention, err)
		}
		if p.AgeMs < 0 {
			return 0, false, ff.Validationf("params", "%s: negative age_ms %d", ExecutionRetention, p.AgeMs)
		}
	}
	if p.Keep {
		return 0, true, nil
	}
	if p.AgeMs <= 0 {
		p.AgeMs = DefaultExecutionRetention.Milliseconds()
	}
	return now - p.AgeMs, false, nil
}

// Due implements Scanner: per partition, the executions
// RemoveExecutions would remove (solo ones and members of flows entirely
// past retention, counted with its predicate and filter) plus the
// tombstones it would expire. Each partition reads at most req.Cap+1
// executions past retention, oldest first (ff_exec_core_terminal_idx), and
// as many tombstones (ff_exec_removed_expiry_idx), and looks at the
// members of each flow among them. A partition whose candidates are capped
// is due (Capped) even when none of those read can go, as when they all
// belong to flows that stay: its removal job examines them in batches and
// goes on past them, as RemoveExecutions does. Its Count is then the
// removable ones among those read, and the oldest theirs.
func (s *ExecutionRetentionScanner) Due(ctx context.Context, q workers.Querier, req workers.DueRequest) ([]workers.Due, error) {
	cutoff, keep, err := s.cutoff(req.Params, req.NowMs)
	if err != nil || keep {
		return nil, err
	}
	ns, tk, tv := actions.FilterParams(req.Filter)
	var out []workers.Due
	err = dueRead(ctx, q, req.SQL(retentionDueSQL()), []any{cutoff, ns, tk, tv, int(req.Store.Partitions()), dueLimit(req.Cap)}, func(rows pgx.Rows) error {
		for rows.Next() {
			var d workers.Due
			var removable, read, tombstones int64
			var oldest *int64
			if err := rows.Scan(&d.Partition, &removable, &read, &oldest, &tombstones); err != nil {
				return err
			}
			if c := int64(req.Cap); c > 0 {
				d.Capped = read > c || tombstones > c
				removable, tombstones = min(removable, c), min(tombstones, c)
			}
			d.Count = removable + tombstones
			if d.Count == 0 && !d.Capped {
				continue // every candidate belongs to a flow that stays
			}
			if oldest != nil {
				// An execution is due once it has been terminal for the retention.
				d.OldestMs = *oldest + req.NowMs - cutoff
			}
			out = append(out, d)
		}
		return nil
	})
	return out, err
}

// retentionDueSQL is execution_retention's Due statement: per partition,
// (partition, removable executions, candidates read, oldest removable's
// terminal_at_ms, tombstones), at most $6 candidates and $6 tombstones
// (NULL: all).
func retentionDueSQL() string {
	return `SELECT part.k::smallint, x.n, x.read, x.oldest, y.n
FROM generate_series(0, $5::int - 1) part(k)
CROSS JOIN LATERAL (
  SELECT COALESCE(sum(g.n) FILTER (WHERE g.removable), 0)::bigint AS n, COALESCE(sum(g.n), 0)::bigint AS read,
         min(g.oldest) FILTER (WHERE g.removable) AS oldest
  FROM (
    SELECT f.n, f.oldest, (f.flow_id IS NULL OR NOT ` + actions.FlowBlockedSQL("part.k", "f.flow_id", 1, 2, 3, 4) + `) AS removable
    FROM (
      SELECT c.flow_id, count(*) AS n, min(c.terminal_at_ms) AS oldest FROM (
        SELECT c.flow_id, c.terminal_at_ms FROM {S}ff_exec_core c
        WHERE c.partition_key = part.k AND ` + actions.RetentionSQL("c", 1, 2, 3, 4) + `
        ORDER BY c.terminal_at_ms, c.execution_id LIMIT $6) c
      GROUP BY c.flow_id) f) g) x
CROSS JOIN LATERAL (
  SELECT count(*) AS n FROM (SELECT 1 FROM {S}ff_exec_removed r
    WHERE r.partition_key = part.k AND r.removed_at_ms < $1 AND ` + actions.TombstoneFilterSQL(2, 3, 4) + ` LIMIT $6) t) y
WHERE x.read + y.n > 0`
}

// Unprocessable implements Auditor: terminal executions without
// terminal_at_ms (written by hand): retention cannot tell their age and
// keeps them.
func (s *ExecutionRetentionScanner) Unprocessable(ctx context.Context, q workers.Querier, req workers.DueRequest) ([]workers.Unprocessable, error) {
	if _, keep, err := s.cutoff(req.Params, req.NowMs); err != nil || keep {
		return nil, err
	}
	return audit(ctx, q, req, 0, "c.partition_key, c.execution_id, c.flow_id, c.public_state, c.lifecycle_phase",
		fmt.Sprintf(`FROM {S}ff_exec_core c
  WHERE c.partition_key = ANY(ARRAY(SELECT generate_series(0, %d)::smallint))
    AND c.lifecycle_phase IN ('terminal', 'cancelled') AND c.terminal_at_ms IS NULL`, int(req.Store.Partitions())-1), "c",
		[]auditCase{{reason: "terminal without terminal_at_ms: its age is unknown, retention keeps it", pred: "c.terminal_at_ms IS NULL"}})
}

// Scan implements Scanner: one removal job for the partition, which works
// through it in batches of req.Limit.
func (s *ExecutionRetentionScanner) Scan(ctx context.Context, q workers.Querier, req workers.ScanRequest) (workers.ScanResult, error) {
	cutoff, keep, err := s.cutoff(req.Params, req.NowMs)
	if err != nil || keep {
		return workers.ScanResult{}, err
	}
	return workers.ScanResult{Items: []river.JobArgs{jobs.RemoveExecutionsArgs{Partition: req.Partition, CutoffMs: cutoff, Limit: req.Limit,
		Filter: jobs.FilterOf(req.Filter)}}}, nil
}
