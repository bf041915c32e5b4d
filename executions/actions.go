package executions

import (
	"context"
	"errors"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/outbox"
	"github.com/jackc/pgx/v5"
)

// The actions of the built-in scanners' item jobs, each one transaction's
// worth of work run inside the item's transaction (workers/items.go wires
// each job kind to its action): ExpireAttemptTx (attempt_timeout),
// PromoteDelayedTx (delayed_promoter), ExpireDeadlineTx
// (execution_deadline), TrimOutboxTx (outbox_retention); RemoveExecutionsTx
// (execution_retention) is in retention.go. The cancel-group
// actions (edge_cancel_dispatcher, edge_cancel_reconciler) are in
// cancelgroups.go, the flow ones (dependency, ff.advance) in flow.go.

// Outcome is what a per-execution scanner action did; workers record it as
// River job output.
type Outcome string

// Outcomes of the scanner actions.
const (
	// Processed: the transition was applied.
	Processed Outcome = "processed"
	// NoOp: the execution no longer needs the action (already handled,
	// state changed, not yet due).
	NoOp Outcome = "no_op"
	// Orphaned: the row the action was for no longer exists.
	Orphaned Outcome = "orphaned"
	// SkippedLocked: another transaction holds the row; the next scan
	// picks it up again if it is still due.
	SkippedLocked Outcome = "skipped_locked"
)

// ExpireAttemptTx is the attempt_timeout action for one execution: if
// attemptIndex is still its current attempt, the execution is active and the
// lease has expired, the attempt is interrupted and fenced (lease cleared,
// epoch+1). The execution retries (next attempt, after the policy's backoff)
// while attempt_index < max_retries, else becomes terminal expired with a
// completion "expired" event. A lease "expired" event is written either way.
func (s *Store) ExpireAttemptTx(ctx context.Context, tx pgx.Tx, id ff.ExecutionID, attemptIndex int32) (Outcome, error) {
	return one(s.ExpireAttemptsTx(ctx, tx, []AttemptRef{{ID: id, AttemptIndex: attemptIndex}}))
}

// decideExpireAttempt is ExpireAttemptTx's decision on the locked row.
func (s *Store) decideExpireAttempt(ctx context.Context, tx pgx.Tx, b *pgx.Batch, l *locked, attemptIndex int32, now int64) (Outcome, error) {
	if l.phase != ff.PhaseActive || l.attemptIndex != attemptIndex || l.leaseExpiresMs == nil || *l.leaseExpiresMs >= now {
		return NoOp, nil
	}
	rp := l.retryPolicy()
	s.queueCloseAttempt(b, l, "interrupted", true, now)
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
	return Processed, nil
}

// PromoteDelayedTx is the delayed_promoter action: a runnable execution whose
// delay_until_ms has come becomes eligible now (public state waiting). It
// writes no event.
func (s *Store) PromoteDelayedTx(ctx context.Context, tx pgx.Tx, id ff.ExecutionID) (Outcome, error) {
	return one(s.PromoteDelayedManyTx(ctx, tx, []ff.ExecutionID{id}))
}

// decidePromote is PromoteDelayedTx's decision on the locked row.
func (s *Store) decidePromote(b *pgx.Batch, l *locked, now int64) Outcome {
	if l.phase != ff.PhaseRunnable || l.eligibility != ff.EligibleNotUntilTime || l.delayUntilMs == nil || *l.delayUntilMs > now {
		return NoOp
	}
	s.queueGuarded(b, l, "promote", ff.ErrStaleLease, `UPDATE {S}ff_exec_core
		SET eligibility_state = 'eligible_now', public_state = 'waiting', delay_until_ms = NULL, blocking_reason = NULL
		WHERE partition_key = $1 AND execution_id = $2 AND eligibility_state = 'not_eligible_until_time'`+coreGuard(3),
		l.id.Partition, dbutil.UUID(l.id.UUID), l.phase, l.attemptIndex)
	return Processed
}

// ExpireDeadlineTx is the execution_deadline action: a non-terminal
// execution past its deadline_at_ms becomes terminal expired, with its lease
// fenced if it held one; a completion "expired" event is written, and a lease
// "expired" event if it was leased.
func (s *Store) ExpireDeadlineTx(ctx context.Context, tx pgx.Tx, id ff.ExecutionID) (Outcome, error) {
	return one(s.ExpireDeadlinesTx(ctx, tx, []ff.ExecutionID{id}))
}

// decideExpireDeadline is ExpireDeadlineTx's decision on the locked row.
func (s *Store) decideExpireDeadline(ctx context.Context, tx pgx.Tx, b *pgx.Batch, l *locked, now int64) (Outcome, error) {
	if ff.IsTerminalPhase(l.phase) || l.deadlineAtMs == nil || *l.deadlineAtMs >= now {
		return NoOp, nil
	}
	leased := l.leased()
	if leased {
		s.queueCloseAttempt(b, l, "interrupted", true, now)
	}
	s.queueTerminal(b, l, ff.PublicExpired, "execution_deadline", now)
	if err := s.queueTerminalEvents(ctx, tx, b, l, ff.OutcomeExpired, ff.LeaseExpired, leased, now); err != nil {
		return "", err
	}
	return Processed, nil
}

// CancelSiblingTx cancels one sibling for the edge-cancel dispatcher: like
// CancelTx (lease fenced, completion "cancelled", lease "revoked" if leased)
// but an already-terminal or missing sibling is a no-op, and the row lock is
// waited for (the dispatcher already holds the group).
func (s *Store) CancelSiblingTx(ctx context.Context, tx pgx.Tx, id ff.ExecutionID, reason string) (Outcome, error) {
	l, err := s.lock(ctx, tx, id)
	if errors.Is(err, ff.ErrNotFound) {
		return Orphaned, nil
	}
	if err != nil {
		return "", err
	}
	if ff.IsTerminalPhase(l.phase) {
		return NoOp, nil
	}
	if err := s.cancelLocked(ctx, tx, l, CancelParams{Reason: reason, By: "engine"}, s.clock.NowMs()); err != nil {
		return "", err
	}
	return Processed, nil
}

// Outbox tables TrimOutboxTx trims, by the names the trim jobs carry.
const (
	OutboxLease      = "lease"
	OutboxCompletion = "completion"
)

// OutboxTable returns the table (outbox.LeaseTable or
// outbox.CompletionTable) of the outbox called name (OutboxLease or
// OutboxCompletion).
func OutboxTable(name string) (string, error) {
	switch name {
	case OutboxLease:
		return outbox.LeaseTable, nil
	case OutboxCompletion:
		return outbox.CompletionTable, nil
	}
	return "", ff.Validationf("table", "%q: want %q or %q", name, OutboxLease, OutboxCompletion)
}

// TrimOutboxTx is the outbox_retention action's row trim: it deletes at
// most limit events of the outbox called table (OutboxTable) that occurred
// before cutoffMs and match namespace and instanceTag (each nil: any),
// skipping rows another transaction holds, and returns how many it
// deleted. It trims the table's DEFAULT partition only (migration 0015):
// the rows no time partition covers. Time partitions are dropped whole
// (outbox.MaintainPartitions), never trimmed row by row.
//
// It never deletes an event a named stream consumer (ff_stream_consumer)
// has not acknowledged, unless that consumer's position is older than its
// maximum lag. It records what it deleted in ff_outbox_trim, one row per
// run of transaction ids that spans no transaction still running, so that
// a stream whose position is before a deleted event gets a gap error from a
// lookup instead of resuming past the hole in silence.
func (s *Store) TrimOutboxTx(ctx context.Context, tx pgx.Tx, table string, cutoffMs int64, namespace, instanceTag *string, limit int) (int64, error) {
	name, err := OutboxTable(table)
	if err != nil {
		return 0, err
	}
	if limit < 1 || limit > 100_000 {
		return 0, ff.Validationf("limit", "%d is outside 1..100000", limit)
	}
	t := "{S}" + outbox.DefaultPartition(name)
	var n int64
	err = tx.QueryRow(ctx, s.sql(`WITH d AS (
		DELETE FROM `+t+` e USING (
			SELECT event_id FROM `+t+` x WHERE occurred_at_ms < $1
			  AND ($2::text IS NULL OR namespace = $2::text) AND ($3::text IS NULL OR instance_tag = $3::text)
			  AND NOT EXISTS (SELECT 1 FROM {S}ff_stream_consumer c
			      WHERE c.stream = $5 AND c.position_at_ms >= $6 - c.max_lag_ms
			        AND `+outbox.UnackedSQL+`)
			LIMIT $4 FOR UPDATE SKIP LOCKED) d
		WHERE e.event_id = d.event_id
		RETURNING e.xact_id, e.event_id, e.occurred_at_ms),
	`+outbox.TrimRecordSQL("$5")+`
	SELECT coalesce(sum(events), 0)::bigint FROM runs`), cutoffMs, namespace, instanceTag, limit, name, s.clock.NowMs()).Scan(&n)
	if err != nil {
		return 0, dbutil.MapErr(err, "trimming "+table+" events")
	}
	return n, nil
}
