package executions

import (
	"context"
	"fmt"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/jackc/pgx/v5"
)

// CancelParams describe a cancellation.
type CancelParams struct {
	// Reason is stored as cancellation_reason (default "cancelled").
	Reason string
	// By is stored as cancelled_by (default "operator").
	By string
}

// Cancel makes a non-terminal execution terminal cancelled. A lease it holds
// is fenced (cleared, epoch+1) so its worker can no longer renew or complete.
// It writes a completion "cancelled" event, and a lease "revoked" event if
// the execution was leased. Cancelling a terminal execution fails with
// ff.ErrNotActive.
func (s *Store) Cancel(ctx context.Context, id ff.ExecutionID, p CancelParams) error {
	return s.inTx(ctx, "cancel", func(tx pgx.Tx) error { return s.CancelTx(ctx, tx, id, p) })
}

// CancelTx is Cancel inside the caller's transaction.
func (s *Store) CancelTx(ctx context.Context, tx pgx.Tx, id ff.ExecutionID, p CancelParams) error {
	if err := ff.CheckText("reason", p.Reason, false, ff.MaxReason); err != nil {
		return err
	}
	if err := ff.CheckText("by", p.By, false, ff.MaxName); err != nil {
		return err
	}
	l, err := s.lock(ctx, tx, id)
	if err != nil {
		return err
	}
	if ff.IsTerminalPhase(l.phase) {
		return fmt.Errorf("cancel %s: already terminal: %w", id, ff.ErrNotActive)
	}
	if p.Reason == "" {
		p.Reason = "cancelled"
	}
	if p.By == "" {
		p.By = "operator"
	}
	return s.cancelLocked(ctx, tx, l, p, s.clock.NowMs())
}

// terminal describes how a non-terminal execution ends without running to
// completion: cancelled, or skipped because its dependencies cannot be met.
type terminal struct {
	public, outcome string
	// reason and by are stored as cancellation_reason and cancelled_by.
	reason, by string
}

// cancelLocked cancels a locked, non-terminal execution.
func (s *Store) cancelLocked(ctx context.Context, tx pgx.Tx, l *locked, p CancelParams, now int64) error {
	return s.terminateLocked(ctx, tx, l, terminal{public: ff.PublicCancelled, outcome: ff.OutcomeCancelled, reason: p.Reason, by: p.By}, now)
}

// terminateLocked ends a locked, non-terminal execution: a lease it holds is
// fenced (cleared, epoch+1) with a "revoked" event, and the completion event
// (and cascade) is written.
func (s *Store) terminateLocked(ctx context.Context, tx pgx.Tx, l *locked, t terminal, now int64) error {
	leased := l.leased()
	b := &pgx.Batch{}
	if leased {
		s.queueCloseAttempt(b, l, t.outcome, true, now)
	}
	s.queueGuarded(b, l, t.public, ff.ErrStaleLease, `UPDATE {S}ff_exec_core
		SET lifecycle_phase = 'terminal', ownership_state = 'unowned', eligibility_state = 'not_applicable',
		    attempt_state = 'attempt_terminal', public_state = $6, blocking_reason = NULL,
		    delay_until_ms = NULL, terminal_at_ms = $3,
		    cancellation_reason = $4, cancelled_by = $5
		WHERE partition_key = $1 AND execution_id = $2`+coreGuard(7),
		l.id.Partition, dbutil.UUID(l.id.UUID), now, t.reason, t.by, t.public, l.phase, l.attemptIndex)
	if err := s.queueTerminalEvents(ctx, tx, b, l, t.outcome, ff.LeaseRevoked, leased, now); err != nil {
		return err
	}
	return sendBatch(ctx, tx, b, t.public+" "+l.id.String())
}

// Revoke takes the lease away from a leased execution (an operator action):
// the attempt's lease is cleared and its epoch bumped, the execution goes
// back to runnable and eligible, and a lease "revoked" event is written.
// Revoke does not consume a retry. An execution holding no live lease fails
// with ff.ErrNotActive.
func (s *Store) Revoke(ctx context.Context, id ff.ExecutionID, reason string) error {
	return s.inTx(ctx, "revoke", func(tx pgx.Tx) error { return s.RevokeTx(ctx, tx, id, reason) })
}

// RevokeTx is Revoke inside the caller's transaction.
func (s *Store) RevokeTx(ctx context.Context, tx pgx.Tx, id ff.ExecutionID, reason string) error {
	if err := ff.CheckText("reason", reason, false, ff.MaxReason); err != nil {
		return err
	}
	l, err := s.lock(ctx, tx, id)
	if err != nil {
		return err
	}
	if !l.leased() {
		return fmt.Errorf("revoke %s: execution is %s and holds no lease: %w", id, l.phase, ff.ErrNotActive)
	}
	now := s.clock.NowMs()
	b := &pgx.Batch{}
	s.queueCloseAttempt(b, l, "revoked", true, now)
	s.queueGuarded(b, l, "revoke", ff.ErrStaleLease, `UPDATE {S}ff_exec_core
		SET lifecycle_phase = 'runnable', ownership_state = 'unowned', eligibility_state = 'eligible_now',
		    public_state = 'waiting', attempt_state = 'attempt_interrupted', blocking_reason = NULL,
		    raw_fields = CASE WHEN $3::text = '' THEN raw_fields
		                      ELSE raw_fields || jsonb_build_object('revoke_reason', $3::text) END
		WHERE partition_key = $1 AND execution_id = $2`+coreGuard(4), id.Partition, dbutil.UUID(id.UUID), reason,
		l.phase, l.attemptIndex)
	if err := s.out.QueueLease(b, lockedLeaseEvent(l, ff.LeaseRevoked, now)); err != nil {
		return err
	}
	return sendBatch(ctx, tx, b, "revoke "+id.String())
}
