package workers

import (
	"context"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/actions"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/jobs"
	"github.com/ffriver/ffriver/outbox"
	"github.com/ffriver/ffriver/scanners"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
)

// The built-in item kinds, each wired to its executions action: the one
// place where a job kind meets the transaction it runs.

// builtinItems maps each built-in scanner to the items its scans produce.
func builtinItems() map[string][]Item {
	return map[string][]Item{
		scanners.AttemptTimeout: {GroupItemOf(expireAttempt, expireAttempts)},
		scanners.DelayedPromoter: {GroupItemOf(func(ctx context.Context, tx pgx.Tx, env *Env, a jobs.PromoteDelayedArgs) (Output, error) {
			out, err := env.Store.Pipeline().PromoteDelayed(ctx, tx, a.ID)
			return Output{Outcome: out}, err
		}, func(ctx context.Context, tx pgx.Tx, env *Env, as []jobs.PromoteDelayedArgs) ([]Output, error) {
			return outputs(env.Store.Pipeline().PromoteDelayedMany(ctx, tx, argIDs(as, func(a jobs.PromoteDelayedArgs) ff.ExecutionID { return a.ID })))
		})},
		scanners.ExecutionDeadline: {GroupItemOf(func(ctx context.Context, tx pgx.Tx, env *Env, a jobs.ExpireDeadlineArgs) (Output, error) {
			out, err := env.Store.Pipeline().ExpireDeadline(ctx, tx, a.ID)
			return Output{Outcome: out}, err
		}, func(ctx context.Context, tx pgx.Tx, env *Env, as []jobs.ExpireDeadlineArgs) ([]Output, error) {
			return outputs(env.Store.Pipeline().ExpireDeadlineMany(ctx, tx, argIDs(as, func(a jobs.ExpireDeadlineArgs) ff.ExecutionID { return a.ID })))
		})},
		scanners.EdgeCancelDispatcher: {ItemOf(func(ctx context.Context, tx pgx.Tx, env *Env, a jobs.CancelGroupArgs) (Output, error) {
			r, err := env.Store.Pipeline().DispatchCancelGroup(ctx, tx, groupKey(a.GroupKey))
			return Output{Outcome: r.Outcome, Detail: r}, err
		})},
		scanners.EdgeCancelReconciler: {ItemOf(func(ctx context.Context, tx pgx.Tx, env *Env, a jobs.ReconcileGroupArgs) (Output, error) {
			r, err := env.Store.Pipeline().ReconcileCancelGroup(ctx, tx, groupKey(a.GroupKey))
			return Output{Outcome: r.Outcome, Detail: r}, err
		})},
		scanners.OutboxRetention:    {ItemOf(trimOutbox)},
		scanners.ExecutionRetention: {ItemOf(removeExecutions)},
		// The dependency scanner's scans produce ff.advance jobs (flowItem,
		// registered by every pipeline); ff.dispatch_completion is kept for
		// jobs queued by earlier versions.
		scanners.Dependency: {ItemOf(func(ctx context.Context, tx pgx.Tx, env *Env, a jobs.DispatchCompletionArgs) (Output, error) {
			out, err := env.Store.Pipeline().DispatchCompletion(ctx, tx, a.EventID)
			return Output{Outcome: out}, err
		})},
	}
}

// expireAttempt is ff.expire_attempt's action for one job.
func expireAttempt(ctx context.Context, tx pgx.Tx, env *Env, a jobs.ExpireAttemptArgs) (Output, error) {
	out, err := env.Store.Pipeline().ExpireAttempt(ctx, tx, a.ID, a.AttemptIndex)
	return Output{Outcome: out}, err
}

// expireAttempts is ff.expire_attempt's action for a group.
func expireAttempts(ctx context.Context, tx pgx.Tx, env *Env, as []jobs.ExpireAttemptArgs) ([]Output, error) {
	refs := make([]actions.AttemptRef, len(as))
	for i, a := range as {
		refs[i] = actions.AttemptRef{ID: a.ID, AttemptIndex: a.AttemptIndex}
	}
	return outputs(env.Store.Pipeline().ExpireAttemptMany(ctx, tx, refs))
}

// flowItem is ff.advance, one hop of a flow's cascade
// (the Advance transition). Terminal transitions of flow members
// enqueue it (Cascader), and the dependency scanner enqueues it again for
// hops left uncounted, so every pipeline registers it. A hop that waited for
// a lock until Advance's lock_timeout snoozes (river.JobSnooze, which
// spends no attempt) for lockedRetryAfter, as an item whose row is locked
// does: waiting is never what discards it.
func flowItem() Item {
	return ItemOf(func(ctx context.Context, tx pgx.Tx, env *Env, a jobs.AdvanceArgs) (Output, error) {
		out, err := env.Store.Pipeline().Advance(ctx, tx, actions.Hop{Upstream: a.Upstream, FlowID: a.FlowID, Downstream: a.Downstream, Outcome: a.Outcome})
		if dbutil.IsLockTimeout(err) {
			env.Logger.DebugContext(ctx, "ffriver: flow hop waits for a lock; snoozing", "upstream", a.Upstream, "downstream", a.Downstream, "error", err)
			return Output{}, river.JobSnooze(lockedRetryAfter)
		}
		return Output{Outcome: out}, err
	})
}

// trimOutbox is one retention pass over an outbox table: it deletes at
// most a batch of old events from the table's DEFAULT partition
// (outbox.Trim), then, when the job says so, maintains
// the table's time partitions (outbox.MaintainPartitions: last, since a
// drop holds the table's lock until the commit that follows). When it
// deleted a full batch, it continues with the same job after its
// completion.
func trimOutbox(ctx context.Context, tx pgx.Tx, env *Env, a jobs.TrimOutboxArgs) (Output, error) {
	table, err := jobs.OutboxTable(a.Table)
	if err != nil {
		return Output{}, err
	}
	schema := dbutil.Schema(env.Schema())
	n, err := outbox.Trim(ctx, tx, schema, outbox.TrimParams{Table: table, CutoffMs: a.CutoffMs, NowMs: env.NowMs(),
		Namespace: a.Namespace, InstanceTag: a.InstanceTag, Limit: a.Limit})
	if err != nil {
		return Output{}, err
	}
	d := TrimOutput{Deleted: n, Continued: n >= int64(a.Limit)}
	if a.PartitionMs > 0 {
		d.Partitions, err = outbox.MaintainPartitions(ctx, tx, schema, outbox.Maintenance{
			Table: table, Width: time.Duration(a.PartitionMs) * time.Millisecond,
			CutoffMs: a.CutoffMs, NowMs: env.NowMs(),
		})
		if err != nil {
			return Output{}, err
		}
	}
	out := Output{Outcome: Processed, Detail: d}
	if n == 0 && len(d.Partitions.Created) == 0 && len(d.Partitions.Dropped) == 0 {
		out.Outcome = NoOp
	}
	if d.Continued {
		out.Then = a
	}
	return out, nil
}

// removeExecutions removes at most a batch of terminal executions past
// retention (the RemoveExecutions transition) and, when it filled its
// batch, continues from its position with a successor after its
// completion.
func removeExecutions(ctx context.Context, tx pgx.Tx, env *Env, a jobs.RemoveExecutionsArgs) (Output, error) {
	p := actions.RemoveParams{Partition: a.Partition, CutoffMs: a.CutoffMs, Filter: a.Filter.FF(), Limit: a.Limit}
	if a.AfterMs != nil && a.AfterID != nil {
		p.After = &actions.RemoveKey{TerminalAtMs: *a.AfterMs, ID: *a.AfterID}
	}
	r, err := env.Store.Pipeline().RemoveExecutions(ctx, tx, p)
	if err != nil {
		return Output{}, err
	}
	d := RemoveOutput{RemoveResult: r, Continued: r.Full(a.Limit)}
	out := Output{Outcome: Processed, Detail: d}
	if r.Executions == 0 && r.TombstonesExpired == 0 {
		out.Outcome = NoOp
	}
	if d.Continued {
		next := a
		if r.Next != nil {
			next.AfterMs, next.AfterID = &r.Next.TerminalAtMs, &r.Next.ID
		}
		out.Then = next
	}
	return out, nil
}

// outputs turns a group action's outcomes into item outputs.
func outputs(outs []Outcome, err error) ([]Output, error) {
	if err != nil {
		return nil, err
	}
	res := make([]Output, len(outs))
	for i, o := range outs {
		res[i] = Output{Outcome: o}
	}
	return res, nil
}

// argIDs returns the execution id of each of as.
func argIDs[A any](as []A, id func(A) ff.ExecutionID) []ff.ExecutionID {
	ids := make([]ff.ExecutionID, len(as))
	for i, a := range as {
		ids[i] = id(a)
	}
	return ids
}

func groupKey(k jobs.GroupKey) actions.GroupKey {
	return actions.GroupKey{Partition: k.Partition, FlowID: k.FlowID, DownstreamEID: k.DownstreamEID}
}

// Builtins returns the built-in scanners (scanners.Builtins(o)) as
// plugins, each with its item kinds, in registration order.
func Builtins(o scanners.BuiltinOptions) []Plugin {
	items := builtinItems()
	var out []Plugin
	for _, s := range scanners.Builtins(o) {
		out = append(out, Plugin{Scanner: s, Items: items[s.Name()]})
	}
	return out
}
