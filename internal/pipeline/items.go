package pipeline

import (
	"context"

	"github.com/ffriver/ffriver/internal/actions"
	"github.com/ffriver/ffriver/internal/apply"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/jobs"
	"github.com/ffriver/ffriver/workers"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
)

// flowItem is ff.advance, one hop of a flow's cascade
// (the Advance transition). Terminal transitions of flow members
// enqueue it (Cascader), and the dependency scanner enqueues it again for
// hops left uncounted, so every pipeline registers it. A hop that waited for
// a lock until Advance's lock_timeout snoozes (river.JobSnooze, which
// spends no attempt) for apply.LockedRetryAfter, as an item whose row is locked
// does: waiting is never what discards it.
func flowItem() workers.Item {
	return workers.ItemOf(func(ctx context.Context, tx pgx.Tx, env *workers.Env, a jobs.AdvanceArgs) (workers.Output, error) {
		out, err := actions.Of(env.Store.Pipeline()).Advance(ctx, tx, actions.Hop{Upstream: a.Upstream, FlowID: a.FlowID, Downstream: a.Downstream, Outcome: a.Outcome})
		if dbutil.IsLockTimeout(err) {
			env.Logger.DebugContext(ctx, "ffriver: flow hop waits for a lock; snoozing", "upstream", a.Upstream, "downstream", a.Downstream, "error", err)
			return workers.Output{}, river.JobSnooze(apply.LockedRetryAfter)
		}
		return workers.Output{Outcome: out}, err
	})
}
