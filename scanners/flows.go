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
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

// Dependency is the name of the built-in dependency scanner.
const Dependency = "dependency"

// DefaultDependencyStale is how old an undispatched completion event must be
// before the dependency scanner dispatches it: ffriver's own terminal
// transitions dispatch theirs at once, so the scanner only picks up events
// of producers outside ffriver (and of stores without a Cascader).
const DefaultDependencyStale = 15 * time.Second

// Cascader is the River implementation of executions.Cascader: it inserts
// one ff.advance job per hop, in the transaction of the terminal transition
// that caused it, into the apply queue of its filter. It uses an insert-only
// River client, so any Store can have one, inside or outside a River worker.
type Cascader struct {
	client *river.Client[pgx.Tx]
	opts   *river.InsertOpts
}

// NewCascader returns a Cascader inserting into the River tables of
// riverSchema ("" = the search_path) and the apply queue of filter (the
// queue the deployment's workers with that filter work).
func NewCascader(riverSchema string, filter ff.Filter) (*Cascader, error) {
	if _, err := dbutil.ParseSchema(riverSchema); err != nil {
		return nil, err
	}
	client, err := river.NewClient(riverpgxv5.New(nil), &river.Config{Schema: riverSchema})
	if err != nil {
		return nil, fmt.Errorf("ffriver: cascade insert client: %w", err)
	}
	return &Cascader{client: client, opts: ItemInsertOpts(filter)}, nil
}

// EnqueueHopsTx implements executions.Cascader.
func (c *Cascader) EnqueueHopsTx(ctx context.Context, tx pgx.Tx, hops []executions.Hop) error {
	params := make([]river.InsertManyParams, len(hops))
	for i, h := range hops {
		params[i] = river.InsertManyParams{Args: jobs.AdvanceArgs{Upstream: h.Upstream, FlowID: h.FlowID, Downstream: h.Downstream, Outcome: h.Outcome}, InsertOpts: c.opts}
	}
	if _, err := c.client.InsertManyTx(ctx, tx, params); err != nil {
		return dbutil.MapErr(err, "inserting cascade hops")
	}
	return nil
}

// addAdvanceWorker registers the ff.advance worker: one hop in one
// transaction with its job's completion (executions.Store.AdvanceTx).
func addAdvanceWorker(workers *river.Workers, env *Env) error {
	return river.AddWorkerSafely(workers, NewItemWorker(env, func(ctx context.Context, tx pgx.Tx, a jobs.AdvanceArgs) (Output, error) {
		out, err := env.Store.AdvanceTx(ctx, tx, executions.Hop{Upstream: a.Upstream, FlowID: a.FlowID, Downstream: a.Downstream, Outcome: a.Outcome})
		return Output{Outcome: out}, err
	}))
}

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
	due, err := dueByPartition(ctx, q, req.Env.SQL(`SELECT partition_key, count(*), min(committed_at_ms) FROM {S}ff_completion_event
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
	rows, err := q.Query(ctx, req.Env.SQL(`SELECT event_id FROM {S}ff_completion_event
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

// AddWorkers implements Scanner.
func (*DependencyScanner) AddWorkers(workers *river.Workers, env *Env) error {
	return river.AddWorkerSafely(workers, NewItemWorker(env, func(ctx context.Context, tx pgx.Tx, a jobs.DispatchCompletionArgs) (Output, error) {
		out, err := env.Store.DispatchCompletionTx(ctx, tx, a.EventID)
		return Output{Outcome: out}, err
	}))
}
