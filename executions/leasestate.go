package executions

import (
	"context"
	"fmt"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// LeaseStatus says where a lease stands (LeaseState.Status).
type LeaseStatus string

// The statuses of a lease, as LeaseStates reads them.
const (
	// LeaseHeld: the lease is its execution's current one, unexpired, and
	// nothing ended it: its holder may still renew or end it.
	LeaseHeld LeaseStatus = "held"
	// LeaseEnded: the lease's own end committed (Complete, Fail, Release or
	// Delay under it); LeaseState.Outcome says which.
	LeaseEnded LeaseStatus = "ended"
	// LeaseExpired: the lease is still its execution's current one, but
	// its expiry has passed and no scanner has acted yet: calls under it
	// fail with ff.ErrLeaseExpired, and nothing it ended committed.
	LeaseExpired LeaseStatus = "expired"
	// LeaseLost: the lease was taken from its holder, and nothing it ended
	// committed: revoked, cancelled, expired by the attempt_timeout or
	// execution_deadline scanner, reclaimed, or the execution is gone. Also
	// the answer after the lease's own Release or Delay once the attempt
	// was leased again (the next Claim reuses its row), or once retention
	// removed the execution.
	LeaseLost LeaseStatus = "lost"
)

// LeaseState is what LeaseStates read about one lease.
type LeaseState struct {
	Status LeaseStatus
	// Outcome is the attempt's outcome that the lease's own end wrote, when
	// Status is LeaseEnded: "success" (Complete), "failed" (Fail, no retry
	// left or permanent), "retry" (Fail, retried) or "interrupted" (Release
	// or Delay).
	Outcome string
	// PublicState is the execution's public state as read ("" when it is
	// gone).
	PublicState string
	// DeadlinePassed says that the execution's deadline has passed while
	// the lease is held: the execution_deadline scanner is about to expire
	// it, and its holder's work is wasted.
	DeadlinePassed bool
}

// MaxLeaseStates is the most leases one LeaseStates call reads (a Runner
// holds at most 10,000).
const MaxLeaseStates = 10_000

// leaseStatesSQL reads, for each lease ($1 partitions, $2 UUIDs, $3 attempt
// indexes), its execution and the attempt the lease was for, each by its
// primary key: one row per lease, numbered from 1 in the order given. The
// lookups are LATERAL subqueries with OFFSET 0, which the planner cannot
// flatten into joins: a join of 10,000 keys turns into hash joins over
// sequential scans of both tables, which grow with the store; this plan
// costs two index lookups per lease whatever the store's size.
const leaseStatesSQL = `SELECT k.i, e.lifecycle_phase, e.public_state, e.attempt_index, e.deadline_at_ms,
       a.lease_id, a.lease_epoch, a.lease_expires_at_ms, a.outcome
FROM unnest($1::int2[], $2::uuid[], $3::int[]) WITH ORDINALITY AS k(partition_key, execution_id, attempt_index, i)
LEFT JOIN LATERAL (SELECT e.lifecycle_phase, e.public_state, e.attempt_index, e.deadline_at_ms FROM {S}ff_exec_core e
  WHERE e.partition_key = k.partition_key AND e.execution_id = k.execution_id OFFSET 0) e ON true
LEFT JOIN LATERAL (SELECT a.lease_id, a.lease_epoch, a.lease_expires_at_ms, a.outcome FROM {S}ff_attempt a
  WHERE a.partition_key = k.partition_key AND a.execution_id = k.execution_id AND a.attempt_index = k.attempt_index
  OFFSET 0) a ON true`

// LeaseStates reads where each of leases stands, in one query (two primary
// key lookups per lease) that takes no lock and writes nothing: whether it
// still holds its execution, whether its own end (Complete, Fail, Release,
// Delay) committed and what it was, or whether it was lost. The states are
// returned in the order of leases.
//
// It is how a holder learns, without waiting for its next Renew, that its
// lease was revoked, cancelled, reclaimed or expired (package runner checks
// the leases it holds every second this way), and how a caller resolves a
// call that returned ff.ErrOutcomeUnknown: LeaseEnded says the end
// committed, LeaseHeld that it did not and may be sent again, anything else
// that it did not and cannot any more. The answer is as of the query: a
// held lease may be lost a moment later, and the fence of the next call
// under it still decides.
//
// At most MaxLeaseStates leases per call; an invalid execution id is a
// validation error naming it.
func (s *Store) LeaseStates(ctx context.Context, leases []Lease) ([]LeaseState, error) {
	if len(leases) > MaxLeaseStates {
		return nil, ff.Validationf("leases", "%d leases: at most %d per call", len(leases), MaxLeaseStates)
	}
	if len(leases) == 0 {
		return nil, nil
	}
	parts := make([]int16, len(leases))
	uuids := make([][16]byte, len(leases))
	attempts := make([]int32, len(leases))
	for i, l := range leases {
		if err := s.checkID(l.ID); err != nil {
			return nil, fmt.Errorf("lease %d: %w", i, err)
		}
		parts[i], uuids[i], attempts[i] = l.ID.Partition, dbutil.UUID(l.ID.UUID), l.AttemptIndex
	}
	// now is taken before the query's snapshot: a lease the snapshot shows
	// expired at now was expired when any later Renew ran, so no renewal
	// the snapshot missed can have kept it.
	now := s.clock.NowMs()
	rows, err := s.pool.Query(ctx, s.sql(leaseStatesSQL), parts, uuids, attempts)
	if err != nil {
		return nil, dbutil.MapErr(err, "lease states")
	}
	out := make([]LeaseState, len(leases))
	var r leaseRow
	_, err = pgx.ForEachRow(rows, []any{&r.i, &r.phase, &r.public, &r.attemptIndex, &r.deadlineAtMs,
		&r.leaseID, &r.epoch, &r.expiresAtMs, &r.outcome}, func() error {
		if r.i < 1 || r.i > int64(len(leases)) {
			return fmt.Errorf("lease states: row %d of %d", r.i, len(leases))
		}
		out[r.i-1] = r.state(leases[r.i-1], now)
		return nil
	})
	if err != nil {
		return nil, dbutil.MapErr(err, "lease states")
	}
	return out, nil
}

// LeaseOutcome is LeaseStates for one lease: whether it still holds its
// execution, whether its own end committed (and what it was), or whether it
// was lost. Call it after a Complete, Fail or Release that returned
// ff.ErrOutcomeUnknown (or failed with ff.ErrUnavailable): LeaseEnded
// means the end committed; LeaseHeld means it did not, and the same call
// may be sent again; LeaseExpired and LeaseLost mean it did not and never
// will under this lease.
func (s *Store) LeaseOutcome(ctx context.Context, lease Lease) (LeaseState, error) {
	st, err := s.LeaseStates(ctx, []Lease{lease})
	if err != nil {
		return LeaseState{}, err
	}
	return st[0], nil
}

// leaseRow is one row of leaseStatesSQL.
type leaseRow struct {
	i                         int64
	phase, public             *string
	attemptIndex              *int32
	deadlineAtMs, expiresAtMs *int64
	leaseID                   *uuid.UUID
	epoch                     *int64
	outcome                   *string
}

// state classifies the row of lease l, read at now. Every transition that
// takes a lease from its holder bumps the attempt's epoch (revoke, cancel,
// the scanners' expiries; Reclaim also closes it as interrupted_reclaimed);
// a Claim after a Release or Delay writes a new lease id; the holder's own
// ends close the attempt under the same epoch and lease id.
func (r *leaseRow) state(l Lease, now int64) LeaseState {
	var st LeaseState
	if r.public != nil {
		st.PublicState = *r.public
	}
	switch {
	case r.phase == nil || r.leaseID == nil || *r.leaseID != l.LeaseID || r.epoch == nil || *r.epoch != l.Epoch:
		st.Status = LeaseLost
	case r.outcome != nil && *r.outcome == "interrupted_reclaimed":
		st.Status = LeaseLost
	case r.outcome != nil:
		st.Status, st.Outcome = LeaseEnded, *r.outcome
	case *r.phase != ff.PhaseActive || r.attemptIndex == nil || *r.attemptIndex != l.AttemptIndex:
		st.Status = LeaseLost
	case r.expiresAtMs == nil || *r.expiresAtMs <= now:
		st.Status = LeaseExpired
	default:
		st.Status = LeaseHeld
		st.DeadlinePassed = r.deadlineAtMs != nil && *r.deadlineAtMs <= now
	}
	return st
}
