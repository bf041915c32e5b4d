package executions

import (
	"context"
	"errors"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/actions"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/jackc/pgx/v5"
)

// The actions of the built-in scanners' item jobs, each one transaction's
// worth of work run inside the item's transaction (scanners/items.go wires
// each job kind to its transition, through Store.Pipeline): expireAttempt (attempt_timeout),
// promoteDelayed (delayed_promoter), expireDeadline
// (execution_deadline); removeExecutions
// (execution_retention) is in retention.go. The cancel-group
// actions (edge_cancel_dispatcher, edge_cancel_reconciler) are in
// cancelgroups.go, the flow ones (dependency, ff.advance) in flow.go.

// expireAttempt is the attempt_timeout action for one execution: if
// attemptIndex is still its current attempt, the execution is active and the
// lease has expired (its expiry is now or earlier: passed), the attempt is
// interrupted and fenced (lease cleared, epoch+1). The execution retries
// (next attempt, after the policy's backoff) while attempt_index <
// max_retries, else becomes terminal expired with a completion "expired"
// event. A lease "expired" event is written either way. An execution whose
// deadline has passed as well is not retried: it expires as the
// execution_deadline action expires it (the same events).
func (s *Store) expireAttempt(ctx context.Context, tx pgx.Tx, id ff.ExecutionID, attemptIndex int32) (actions.Outcome, error) {
	return one(s.expireAttemptMany(ctx, tx, []actions.AttemptRef{{ID: id, AttemptIndex: attemptIndex}}))
}

// decideExpireAttempt is expireAttempt's decision on the locked row.
func (s *Store) decideExpireAttempt(ctx context.Context, tx pgx.Tx, b *pgx.Batch, l *locked, attemptIndex int32, now int64) (actions.Outcome, error) {
	if l.phase != ff.PhaseActive || l.attemptIndex != attemptIndex || l.leaseExpiresMs == nil || !passed(*l.leaseExpiresMs, now) {
		return actions.NoOp, nil
	}
	if l.deadlinePassed(now) {
		// Its deadline has passed too (a lease ends at the deadline at the
		// latest): no retry could be claimed, so the execution expires as
		// execution_deadline expires it, whichever scanner comes first.
		return s.decideExpireDeadline(ctx, tx, b, l, now)
	}
	rp := l.retryPolicy()
	s.queueCloseExpiredAttempt(b, l, "interrupted", now)
	if int(l.attemptIndex) < rp.MaxRetries {
		s.queueRetry(b, l, rp, "attempt_timeout", now)
	} else {
		s.queueTerminal(b, l, ff.PublicExpired, "attempt_timeout", now)
		if err := s.queueCompletion(ctx, tx, b, l, ff.OutcomeExpired, now); err != nil {
			return "", err
		}
	}
	if err := s.out.QueueLease(b, lockedLeaseEvent(l, ff.LeaseExpired, now)); err != nil {
		return "", err
	}
	return actions.Processed, nil
}

// promoteDelayed is the delayed_promoter action: a runnable execution whose
// delay_until_ms has come becomes eligible now (public state waiting). It
// writes no event.
func (s *Store) promoteDelayed(ctx context.Context, tx pgx.Tx, id ff.ExecutionID) (actions.Outcome, error) {
	return one(s.promoteDelayedMany(ctx, tx, []ff.ExecutionID{id}))
}

// decidePromote is promoteDelayed's decision on the locked row.
func (s *Store) decidePromote(b *pgx.Batch, l *locked, now int64) actions.Outcome {
	if l.phase != ff.PhaseRunnable || l.eligibility != ff.EligibleNotUntilTime || l.delayUntilMs == nil || !passed(*l.delayUntilMs, now) {
		return actions.NoOp
	}
	s.queueGuarded(b, l, "promote", ff.ErrStaleLease, `UPDATE {S}ff_exec_core
		SET eligibility_state = 'eligible_now', public_state = 'waiting', delay_until_ms = NULL, blocking_reason = NULL
		WHERE partition_key = $1 AND execution_id = $2 AND eligibility_state = 'not_eligible_until_time'`+coreGuard(3),
		l.id.Partition, dbutil.UUID(l.id.UUID), l.phase, l.attemptIndex)
	return actions.Processed
}

// expireDeadline is the execution_deadline action: a non-terminal
// execution whose deadline_at_ms has passed (it is now or earlier) becomes
// terminal expired, with its lease fenced if it held one; a completion
// "expired" event is written, and a lease "expired" event if it was leased.
func (s *Store) expireDeadline(ctx context.Context, tx pgx.Tx, id ff.ExecutionID) (actions.Outcome, error) {
	return one(s.expireDeadlineMany(ctx, tx, []ff.ExecutionID{id}))
}

// decideExpireDeadline is expireDeadline's decision on the locked row.
func (s *Store) decideExpireDeadline(ctx context.Context, tx pgx.Tx, b *pgx.Batch, l *locked, now int64) (actions.Outcome, error) {
	if ff.IsTerminalPhase(l.phase) || !l.deadlinePassed(now) {
		return actions.NoOp, nil
	}
	leased := l.leased()
	if leased {
		s.queueCloseAttempt(b, l, "interrupted", true, now)
	}
	s.queueTerminal(b, l, ff.PublicExpired, "execution_deadline", now)
	if err := s.queueTerminalEvents(ctx, tx, b, l, ff.OutcomeExpired, ff.LeaseExpired, leased, now); err != nil {
		return "", err
	}
	return actions.Processed, nil
}

// cancelSibling cancels one sibling for the edge-cancel dispatcher: like
// CancelTx (lease fenced, completion "cancelled", lease "revoked" if leased)
// but an already-terminal or missing sibling is a no-op, and the row lock is
// waited for (the dispatcher already holds the group).
func (s *Store) cancelSibling(ctx context.Context, tx pgx.Tx, id ff.ExecutionID, reason string) (actions.Outcome, error) {
	l, err := s.lock(ctx, tx, id)
	if errors.Is(err, ff.ErrNotFound) {
		return actions.Orphaned, nil
	}
	if err != nil {
		return "", err
	}
	if ff.IsTerminalPhase(l.phase) {
		return actions.NoOp, nil
	}
	if err := s.cancelLocked(ctx, tx, l, CancelParams{Reason: reason, By: "engine"}, s.clock.NowMs()); err != nil {
		return "", err
	}
	return actions.Processed, nil
}
