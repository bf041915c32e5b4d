package executions

import (
	"context"
	"errors"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/actions"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// SiblingCancelReason is the cancellation_reason the dispatcher writes on
// the siblings it cancels.
const SiblingCancelReason = "sibling_quorum_satisfied"

func (s *Store) checkGroup(g actions.GroupKey) error {
	if !s.parts.Contains(g.Partition) {
		return ff.Validationf("partition", "%d is outside this schema's 0..%d", g.Partition, int(s.parts)-1)
	}
	return nil
}

type lockedGroup struct {
	flag    bool
	members []string
}

// lockGroup locks a group row without waiting. It reports found=false with
// locked=true when another transaction holds it, and found=false,
// locked=false when it does not exist.
func (s *Store) lockGroup(ctx context.Context, tx pgx.Tx, g actions.GroupKey) (lg lockedGroup, found, locked bool, err error) {
	err = tx.QueryRow(ctx, s.sql(`SELECT cancel_siblings_pending_flag, cancel_siblings_pending_members
		FROM {S}ff_edge_group WHERE partition_key = $1 AND flow_id = $2 AND downstream_eid = $3
		FOR UPDATE SKIP LOCKED`), g.Partition, g.FlowID, g.DownstreamEID).Scan(&lg.flag, &lg.members)
	if err == nil {
		return lg, true, false, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return lg, false, false, dbutil.MapErr(err, "locking edge group")
	}
	var exists bool
	if err := tx.QueryRow(ctx, s.sql(`SELECT EXISTS (SELECT 1 FROM {S}ff_edge_group
		WHERE partition_key = $1 AND flow_id = $2 AND downstream_eid = $3)`),
		g.Partition, g.FlowID, g.DownstreamEID).Scan(&exists); err != nil {
		return lg, false, false, dbutil.MapErr(err, "probing edge group")
	}
	return lg, false, exists, nil
}

// pendingExists reports whether the group still has its pending row.
func (s *Store) pendingExists(ctx context.Context, tx pgx.Tx, g actions.GroupKey) (bool, error) {
	var ok bool
	err := tx.QueryRow(ctx, s.sql(`SELECT EXISTS (SELECT 1 FROM {S}ff_pending_cancel_groups
		WHERE partition_key = $1 AND flow_id = $2 AND downstream_eid = $3)`),
		g.Partition, g.FlowID, g.DownstreamEID).Scan(&ok)
	return ok, dbutil.MapErr(err, "reading pending cancel group")
}

func (s *Store) deletePending(ctx context.Context, tx pgx.Tx, g actions.GroupKey) (bool, error) {
	tag, err := tx.Exec(ctx, s.sql(`DELETE FROM {S}ff_pending_cancel_groups
		WHERE partition_key = $1 AND flow_id = $2 AND downstream_eid = $3`), g.Partition, g.FlowID, g.DownstreamEID)
	if err != nil {
		return false, dbutil.MapErr(err, "deleting pending cancel group")
	}
	return tag.RowsAffected() > 0, nil
}

// deleteOrphan deletes the pending row of a missing group: out when this
// transaction deleted it, NoOp when a concurrent one already had (nothing
// locks a missing group, so two runs may race here).
func (s *Store) deleteOrphan(ctx context.Context, tx pgx.Tx, g actions.GroupKey, out actions.Outcome) (actions.GroupResult, error) {
	deleted, err := s.deletePending(ctx, tx, g)
	if err != nil {
		return actions.GroupResult{}, err
	}
	if !deleted {
		return actions.GroupResult{Outcome: actions.NoOp}, nil
	}
	return actions.GroupResult{Outcome: out}, nil
}

func (s *Store) clearGroup(ctx context.Context, tx pgx.Tx, g actions.GroupKey) error {
	_, err := tx.Exec(ctx, s.sql(`UPDATE {S}ff_edge_group
		SET cancel_siblings_pending_flag = false, cancel_siblings_pending_members = '{}'
		WHERE partition_key = $1 AND flow_id = $2 AND downstream_eid = $3`), g.Partition, g.FlowID, g.DownstreamEID)
	return dbutil.MapErr(err, "clearing edge group")
}

// parseMembers returns the member ids that are UUIDs, de-duplicated in
// order, and how many entries were not UUIDs.
func parseMembers(raw []string) (ids []uuid.UUID, bad int) {
	seen := map[uuid.UUID]bool{}
	for _, m := range raw {
		u, err := uuid.Parse(m)
		if err != nil {
			bad++
			continue
		}
		if !seen[u] {
			seen[u] = true
			ids = append(ids, u)
		}
	}
	return ids, bad
}

// lockPendingGroup is the start both group actions share: check the key,
// lock the group without waiting, and confirm the pending row still exists.
// When the action ends there, it returns that result (whenLocked when
// another transaction holds the group, NoOp when the pending row is gone,
// the deletion of an orphan pending row reported as whenMissing when the
// group itself is gone); otherwise the locked group and a nil result.
func (s *Store) lockPendingGroup(ctx context.Context, tx pgx.Tx, g actions.GroupKey, whenLocked, whenMissing actions.Outcome) (lockedGroup, *actions.GroupResult, error) {
	fail := &actions.GroupResult{}
	if err := s.checkGroup(g); err != nil {
		return lockedGroup{}, fail, err
	}
	lg, found, locked, err := s.lockGroup(ctx, tx, g)
	if err != nil {
		return lockedGroup{}, fail, err
	}
	if locked {
		return lockedGroup{}, &actions.GroupResult{Outcome: whenLocked}, nil
	}
	pending, err := s.pendingExists(ctx, tx, g)
	if err != nil {
		return lockedGroup{}, fail, err
	}
	if !pending {
		return lockedGroup{}, &actions.GroupResult{Outcome: actions.NoOp}, nil
	}
	if !found {
		res, err := s.deleteOrphan(ctx, tx, g, whenMissing)
		return lockedGroup{}, &res, err
	}
	return lg, nil, nil
}

// dispatchCancelGroup is the edge_cancel_dispatcher action for one group,
// inside the caller's transaction:
//
//   - the group row is locked without waiting; held by another transaction
//     → SkippedLocked, nothing written;
//   - the pending row is already gone → NoOp (another run drained it);
//   - the group is missing → the pending row is an orphan: it is deleted
//     (Orphaned);
//   - the cancel flag is false → SkippedForReconciler, nothing written;
//   - otherwise every listed member still non-terminal is cancelled with
//     cancelSibling (lease fenced, completion "cancelled", lease "revoked"
//     if it was leased, reason sibling_quorum_satisfied, by engine), then the
//     flag and members are cleared and the pending row deleted → Processed.
//
// Members live in the group's partition (a flow's executions share one).
// The caller commits; everything the action wrote commits or rolls back
// together.
func (s *Store) dispatchCancelGroup(ctx context.Context, tx pgx.Tx, g actions.GroupKey) (actions.GroupResult, error) {
	lg, done, err := s.lockPendingGroup(ctx, tx, g, actions.SkippedLocked, actions.Orphaned)
	if done != nil || err != nil {
		return *done, err
	}
	if !lg.flag {
		return actions.GroupResult{Outcome: actions.SkippedForReconciler}, nil
	}
	ids, bad := parseMembers(lg.members)
	res := actions.GroupResult{Outcome: actions.Processed, Missing: bad}
	for _, u := range ids {
		out, err := s.cancelSibling(ctx, tx, ff.ExecutionID{Partition: g.Partition, UUID: u}, SiblingCancelReason)
		if err != nil {
			return actions.GroupResult{}, err
		}
		switch out {
		case actions.Processed:
			res.Cancelled++
		case actions.Orphaned:
			res.Missing++
		default:
			res.AlreadyTerminal++
		}
	}
	if err := s.clearGroup(ctx, tx, g); err != nil {
		return actions.GroupResult{}, err
	}
	_, err = s.deletePending(ctx, tx, g)
	return res, err
}

// reconcileCancelGroup is the edge_cancel_reconciler action for one
// pending group, inside the caller's transaction:
//
//   - the group row is held by another transaction → NoOp (the holder, most
//     likely the dispatcher, owns it);
//   - the pending row is already gone → NoOp;
//   - the group is missing, or its flag is false → the pending row is stale
//     and deleted (SremmedStale);
//   - the flag is set and some listed member is still non-terminal → NoOp:
//     draining is the dispatcher's job, the reconciler never fights it;
//   - otherwise (every member terminal, or none listed) the flag and members
//     are cleared and the pending row deleted (CompletedDrain).
//
// It never cancels an execution and writes no outbox event.
func (s *Store) reconcileCancelGroup(ctx context.Context, tx pgx.Tx, g actions.GroupKey) (actions.GroupResult, error) {
	lg, done, err := s.lockPendingGroup(ctx, tx, g, actions.NoOp, actions.SremmedStale)
	if done != nil || err != nil {
		return *done, err
	}
	if !lg.flag {
		_, err := s.deletePending(ctx, tx, g)
		return actions.GroupResult{Outcome: actions.SremmedStale}, err
	}
	ids, bad := parseMembers(lg.members)
	var running, terminal int
	if len(ids) > 0 {
		if err := tx.QueryRow(ctx, s.sql(`SELECT
			count(*) FILTER (WHERE lifecycle_phase NOT IN ('terminal', 'cancelled')),
			count(*) FILTER (WHERE lifecycle_phase IN ('terminal', 'cancelled'))
			FROM {S}ff_exec_core WHERE partition_key = $1 AND execution_id = ANY($2)`),
			g.Partition, ids).Scan(&running, &terminal); err != nil {
			return actions.GroupResult{}, dbutil.MapErr(err, "counting group members")
		}
	}
	res := actions.GroupResult{Running: running, AlreadyTerminal: terminal, Missing: bad + len(ids) - running - terminal}
	if running > 0 {
		res.Outcome = actions.NoOp
		return res, nil
	}
	if err := s.clearGroup(ctx, tx, g); err != nil {
		return actions.GroupResult{}, err
	}
	res.Outcome = actions.CompletedDrain
	_, err = s.deletePending(ctx, tx, g)
	return res, err
}
