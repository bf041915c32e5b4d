package scanners

import (
	"context"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/actions"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/internal/outboxretention"
	"github.com/ffriver/ffriver/jobs"
	"github.com/ffriver/ffriver/workers"
	"github.com/jackc/pgx/v5"
)

// The built-in item kinds, each wired to its executions transition (through
// Store.Pipeline): the one place where a job kind meets the transaction it
// runs. Builtins (builtin.go) pairs each with its scanner.

// expireAttempt is ff.expire_attempt's action for one job.
func expireAttempt(ctx context.Context, tx pgx.Tx, env *workers.Env, a jobs.ExpireAttemptArgs) (workers.Output, error) {
	out, err := actions.Of(env.Store.Pipeline()).ExpireAttempt(ctx, tx, a.ID, a.AttemptIndex)
	return workers.Output{Outcome: out}, err
}

// expireAttemptMany is ff.expire_attempt's action for a group.
func expireAttemptMany(ctx context.Context, tx pgx.Tx, env *workers.Env, as []jobs.ExpireAttemptArgs) ([]workers.Output, error) {
	refs := make([]actions.AttemptRef, len(as))
	for i, a := range as {
		refs[i] = actions.AttemptRef{ID: a.ID, AttemptIndex: a.AttemptIndex}
	}
	return outputs(actions.Of(env.Store.Pipeline()).ExpireAttemptMany(ctx, tx, refs))
}

// promoteDelayed is ff.promote_delayed's action for one job.
func promoteDelayed(ctx context.Context, tx pgx.Tx, env *workers.Env, a jobs.PromoteDelayedArgs) (workers.Output, error) {
	out, err := actions.Of(env.Store.Pipeline()).PromoteDelayed(ctx, tx, a.ID)
	return workers.Output{Outcome: out}, err
}

// promoteDelayedMany is ff.promote_delayed's action for a group.
func promoteDelayedMany(ctx context.Context, tx pgx.Tx, env *workers.Env, as []jobs.PromoteDelayedArgs) ([]workers.Output, error) {
	return outputs(actions.Of(env.Store.Pipeline()).PromoteDelayedMany(ctx, tx, argIDs(as, func(a jobs.PromoteDelayedArgs) ff.ExecutionID { return a.ID })))
}

// expireDeadline is ff.expire_deadline's action for one job.
func expireDeadline(ctx context.Context, tx pgx.Tx, env *workers.Env, a jobs.ExpireDeadlineArgs) (workers.Output, error) {
	out, err := actions.Of(env.Store.Pipeline()).ExpireDeadline(ctx, tx, a.ID)
	return workers.Output{Outcome: out}, err
}

// expireDeadlineMany is ff.expire_deadline's action for a group.
func expireDeadlineMany(ctx context.Context, tx pgx.Tx, env *workers.Env, as []jobs.ExpireDeadlineArgs) ([]workers.Output, error) {
	return outputs(actions.Of(env.Store.Pipeline()).ExpireDeadlineMany(ctx, tx, argIDs(as, func(a jobs.ExpireDeadlineArgs) ff.ExecutionID { return a.ID })))
}

// dispatchCancelGroup is ff.cancel_group's action.
func dispatchCancelGroup(ctx context.Context, tx pgx.Tx, env *workers.Env, a jobs.CancelGroupArgs) (workers.Output, error) {
	r, err := actions.Of(env.Store.Pipeline()).DispatchCancelGroup(ctx, tx, groupKey(a.GroupKey))
	return workers.Output{Outcome: r.Outcome, Detail: r}, err
}

// reconcileCancelGroup is ff.reconcile_group's action.
func reconcileCancelGroup(ctx context.Context, tx pgx.Tx, env *workers.Env, a jobs.ReconcileGroupArgs) (workers.Output, error) {
	r, err := actions.Of(env.Store.Pipeline()).ReconcileCancelGroup(ctx, tx, groupKey(a.GroupKey))
	return workers.Output{Outcome: r.Outcome, Detail: r}, err
}

// dispatchCompletion is ff.dispatch_completion's action, kept for jobs
// queued by earlier versions: the dependency scanner's scans produce
// ff.advance jobs, which every pipeline registers (workers' flow item).
func dispatchCompletion(ctx context.Context, tx pgx.Tx, env *workers.Env, a jobs.DispatchCompletionArgs) (workers.Output, error) {
	out, err := actions.Of(env.Store.Pipeline()).DispatchCompletion(ctx, tx, a.EventID)
	return workers.Output{Outcome: out}, err
}

// trimOutbox is one retention pass over an outbox table: it deletes at
// most a batch of old events from the table's DEFAULT partition
// (outboxretention.Trim), then, when the job says so, maintains
// the table's time partitions (outboxretention.MaintainPartitions: last, since a
// drop holds the table's lock until the commit that follows). When it
// deleted a full batch, it continues with the same job after its
// completion. A partition maintenance that gave up on a lock another
// session holds is no failure: the output lists what it left
// (partitions.locked, partitions.create_locked) and who held the table
// (partitions.lock_holders), an info log line says so, the wait is
// recorded for ffctl status and the metrics (outboxretention.Waits), and
// the next pass tries again.
func trimOutbox(ctx context.Context, tx pgx.Tx, env *workers.Env, a jobs.TrimOutboxArgs) (workers.Output, error) {
	table, err := jobs.OutboxTable(a.Table)
	if err != nil {
		return workers.Output{}, err
	}
	schema := dbutil.Schema(env.Schema())
	n, err := outboxretention.Trim(ctx, tx, schema, outboxretention.TrimParams{Table: table, CutoffMs: a.CutoffMs, NowMs: env.NowMs(),
		Namespace: a.Namespace, InstanceTag: a.InstanceTag, Limit: a.Limit})
	if err != nil {
		return workers.Output{}, err
	}
	d := trimOutput{Deleted: n, Continued: n >= int64(a.Limit)}
	if a.PartitionMs > 0 {
		d.Partitions, err = outboxretention.MaintainPartitions(ctx, tx, schema, outboxretention.Maintenance{
			Table: table, Width: time.Duration(a.PartitionMs) * time.Millisecond,
			CutoffMs: a.CutoffMs, NowMs: env.NowMs(),
		})
		if err != nil {
			return workers.Output{}, err
		}
		if d.Partitions.Deferred() {
			// Not a failure: another session holds the table (an idle
			// transaction, a pg_dump), and waiting for it would make every
			// reader and writer of the outbox wait too. The next pass tries
			// again; the partitions reach far enough ahead for that.
			holders := make([]string, len(d.Partitions.LockHolders))
			for i, h := range d.Partitions.LockHolders {
				holders[i] = h.String()
			}
			env.Logger.InfoContext(ctx, "ffriver: outbox partition maintenance waits for a lock another session holds; the next pass tries again",
				"table", table, "drops_left", len(d.Partitions.Locked), "creates_left", len(d.Partitions.CreateLocked), "lock_holders", holders)
		}
	}
	out := workers.Output{Outcome: workers.Processed, Detail: d}
	if n == 0 && len(d.Partitions.Created) == 0 && len(d.Partitions.Dropped) == 0 {
		out.Outcome = workers.NoOp
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
func removeExecutions(ctx context.Context, tx pgx.Tx, env *workers.Env, a jobs.RemoveExecutionsArgs) (workers.Output, error) {
	p := actions.RemoveParams{Partition: a.Partition, CutoffMs: a.CutoffMs, Filter: a.Filter.FF(), Limit: a.Limit}
	if a.AfterMs != nil && a.AfterID != nil {
		p.After = &actions.RemoveKey{TerminalAtMs: *a.AfterMs, ID: *a.AfterID}
	}
	r, err := actions.Of(env.Store.Pipeline()).RemoveExecutions(ctx, tx, p)
	if err != nil {
		return workers.Output{}, err
	}
	d := removeOutput{RemoveResult: r, Continued: r.Full(a.Limit)}
	out := workers.Output{Outcome: workers.Processed, Detail: d}
	if r.Executions == 0 && r.TombstonesExpired == 0 {
		out.Outcome = workers.NoOp
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
func outputs(outs []workers.Outcome, err error) ([]workers.Output, error) {
	if err != nil {
		return nil, err
	}
	res := make([]workers.Output, len(outs))
	for i, o := range outs {
		res[i] = workers.Output{Outcome: o}
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

// removeOutput is the River job output detail of an execution removal
// (ff.remove_executions): what it removed, and whether it continues with a
// successor from its position.
type removeOutput struct {
	actions.RemoveResult
	Continued bool `json:"continued"`
}

// trimOutput is the River job output detail of an outbox trim.
type trimOutput struct {
	// Deleted events of the DEFAULT partition, row by row.
	Deleted   int64 `json:"deleted"`
	Continued bool  `json:"continued"`
	// Partitions the pass created, dropped, kept for a consumer or left
	// locked (outboxretention.MaintainPartitions).
	Partitions outboxretention.MaintainResult `json:"partitions"`
}
