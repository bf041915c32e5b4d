package scanners

import (
	"context"
	"encoding/json"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/jobs"
	"github.com/jackc/pgx/v5"
)

// DefaultDependencyStale is how old an undispatched completion event must be
// before the dependency scanner dispatches it: ffriver's own terminal
// transitions dispatch theirs at once, so the scanner only picks up events
// of producers outside ffriver (and of stores without a Cascader).
const DefaultDependencyStale = 15 * time.Second

// DependencyScanner dispatches completion events of flow members that
// nobody dispatched: events written by producers outside ffriver (plain
// SQL), or by a store without a Cascader, once older than the staleness
// threshold. Each is dispatched once (executions.Store.DispatchCompletionTx
// marks it; the River path never leaves one undispatched), by enqueueing
// its hops. Item job: ff.dispatch_completion {event_id}. The scanner filter
// applies to the event's namespace and instance_tag columns.
type DependencyScanner struct {
	stale time.Duration
}

// NewDependencyScanner returns the dependency scanner with a staleness
// threshold (0 means DefaultDependencyStale).
func NewDependencyScanner(stale time.Duration) *DependencyScanner {
	if stale <= 0 {
		stale = DefaultDependencyStale
	}
	return &DependencyScanner{stale: stale}
}

// Name implements Scanner.
func (*DependencyScanner) Name() string { return Dependency }

// Defaults implements Scanner: every 5 s, batch 1,000.
func (*DependencyScanner) Defaults() Settings {
	return Settings{Interval: 5 * time.Second, Batch: DefaultBatch}
}

// Params implements ParamsProvider: the staleness threshold travels with
// the tick, so scans worked elsewhere use the scheduler's.
func (s *DependencyScanner) Params() (json.RawMessage, error) { return ageParamsOf(s.stale) }

func (s *DependencyScanner) cutoff(params json.RawMessage, now int64) (int64, error) {
	return ageCutoff(Dependency, s.stale, params, now)
}

// The undispatched-event predicate (index ff_completion_event_pending_dispatch_idx).
const undispatchedSQL = `dispatched_at_ms IS NULL AND flow_id IS NOT NULL AND committed_at_ms < $1`

// Due implements Scanner.
func (s *DependencyScanner) Due(ctx context.Context, q Querier, req DueRequest) ([]Due, error) {
	ns, tag, ok := eventFilter(req.Filter)
	if !ok {
		return nil, nil
	}
	cutoff, err := s.cutoff(req.Params, req.NowMs)
	if err != nil {
		return nil, err
	}
	due, err := DueByPartition(ctx, q, req.SQL(`SELECT partition_key, count(*), min(committed_at_ms) FROM {S}ff_completion_event
		WHERE `+undispatchedSQL+eventFilterSQL+` GROUP BY partition_key`), cutoff, ns, tag)
	for i := range due {
		// An event is due once it has been undispatched for the threshold.
		due[i].OldestMs += req.NowMs - cutoff
	}
	return due, err
}

// Scan implements Scanner: undispatched events of one partition in event_id
// order after the previous scan's last one.
func (s *DependencyScanner) Scan(ctx context.Context, q Querier, req ScanRequest) (ScanResult, error) {
	ns, tag, ok := eventFilter(req.Filter)
	if !ok {
		return ScanResult{}, nil
	}
	cutoff, err := s.cutoff(req.Params, req.NowMs)
	if err != nil {
		return ScanResult{}, err
	}
	var after int64
	if len(req.After) > 0 {
		if err := json.Unmarshal(req.After, &after); err != nil {
			return ScanResult{}, ff.Validationf("after", "not a dependency scan cursor: %v", err)
		}
	}
	rows, err := q.Query(ctx, req.SQL(`SELECT event_id FROM {S}ff_completion_event
		WHERE `+undispatchedSQL+eventFilterSQL+` AND partition_key = $4 AND event_id > $5
		ORDER BY event_id LIMIT $6`), cutoff, ns, tag, req.Partition, after, req.Limit)
	if err != nil {
		return ScanResult{}, dbutil.MapErr(err, "scanning undispatched completions")
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return ScanResult{}, dbutil.MapErr(err, "scanning undispatched completions")
	}
	res := ScanResult{Candidates: len(ids)}
	for _, id := range ids {
		res.Items = append(res.Items, jobs.DispatchCompletionArgs{EventID: id})
	}
	if len(ids) > 0 {
		res.Next, _ = json.Marshal(ids[len(ids)-1])
	}
	return res, nil
}
