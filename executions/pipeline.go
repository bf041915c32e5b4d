package executions

import (
	"context"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/actions"
	"github.com/jackc/pgx/v5"
)

// Pipeline returns an opaque handle on the transitions ffriver's own item
// jobs apply to s's executions (the built-in items of package scanners, run
// by package workers). An application has no use for it: the handle has no
// methods it can call, and the transitions carry no compatibility promise
// (their contract lives in an internal package).
func (s *Store) Pipeline() PipelineHandle { return transitions{s} }

// PipelineHandle is the opaque type of Store.Pipeline.
type PipelineHandle interface{ pipelineHandle() }

type transitions struct{ s *Store }

func (transitions) pipelineHandle() {}

var _ actions.Transitions = transitions{}

func (t transitions) ExpireAttempt(ctx context.Context, tx pgx.Tx, id ff.ExecutionID, attemptIndex int32) (actions.Outcome, error) {
	return t.s.expireAttempt(ctx, tx, id, attemptIndex)
}

func (t transitions) ExpireAttemptMany(ctx context.Context, tx pgx.Tx, refs []actions.AttemptRef) ([]actions.Outcome, error) {
	return t.s.expireAttemptMany(ctx, tx, refs)
}

func (t transitions) PromoteDelayed(ctx context.Context, tx pgx.Tx, id ff.ExecutionID) (actions.Outcome, error) {
	return t.s.promoteDelayed(ctx, tx, id)
}

func (t transitions) PromoteDelayedMany(ctx context.Context, tx pgx.Tx, ids []ff.ExecutionID) ([]actions.Outcome, error) {
	return t.s.promoteDelayedMany(ctx, tx, ids)
}

func (t transitions) ExpireDeadline(ctx context.Context, tx pgx.Tx, id ff.ExecutionID) (actions.Outcome, error) {
	return t.s.expireDeadline(ctx, tx, id)
}

func (t transitions) ExpireDeadlineMany(ctx context.Context, tx pgx.Tx, ids []ff.ExecutionID) ([]actions.Outcome, error) {
	return t.s.expireDeadlineMany(ctx, tx, ids)
}

func (t transitions) DispatchCancelGroup(ctx context.Context, tx pgx.Tx, g actions.GroupKey) (actions.GroupResult, error) {
	return t.s.dispatchCancelGroup(ctx, tx, g)
}

func (t transitions) ReconcileCancelGroup(ctx context.Context, tx pgx.Tx, g actions.GroupKey) (actions.GroupResult, error) {
	return t.s.reconcileCancelGroup(ctx, tx, g)
}

func (t transitions) Advance(ctx context.Context, tx pgx.Tx, h actions.Hop) (actions.Outcome, error) {
	return t.s.advance(ctx, tx, h)
}

func (t transitions) DispatchCompletion(ctx context.Context, tx pgx.Tx, eventID int64) (actions.Outcome, error) {
	return t.s.dispatchCompletion(ctx, tx, eventID)
}

func (t transitions) RemoveExecutions(ctx context.Context, tx pgx.Tx, p actions.RemoveParams) (actions.RemoveResult, error) {
	return t.s.removeExecutions(ctx, tx, p)
}
