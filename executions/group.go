package executions

import (
	"context"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/actions"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/jackc/pgx/v5"
)

// Group actions: the built-in scanner actions applied to many executions in
// one pass, for the apply engine's group transactions (workers/engine.go).
// A pass locks all of its executions with one statement and sends all of
// their writes in one batch, so a group of n items costs the server a
// handful of round trips instead of two per item, while each execution is
// decided exactly as the one-execution action decides it (the one-execution
// actions are passes of one).
//
// An execution named twice in one call is applied in a later pass, after the
// earlier pass's writes: the same order, and so the same outcomes, as
// applying the items one after the other.

// lockManySQL locks the executions of a pass without waiting: a row another
// transaction holds is left out (SKIP LOCKED), as is a row that does not
// exist. Rows are locked in key order (lockWaitManySQL). readManySQL then reads every named
// execution with its current attempt, with a snapshot taken after the locks
// are held (see lockRowSQL for why that takes a statement of its own): an
// execution it reads but the lock left out is held by another transaction,
// one it does not read does not exist.
const (
	lockManySQL = lockWaitManySQL + ` SKIP LOCKED`
	readManySQL = `SELECT e.partition_key, e.execution_id,` + lockedColumns + `
WHERE (e.partition_key, e.execution_id) IN (SELECT * FROM unnest($1::int2[], $2::uuid[]))`
)

// lockMany locks the distinct executions ids for a scanner action, in one
// round trip. An execution it could not lock gets the outcome that says why
// instead: SkippedLocked (another transaction holds it) or Orphaned (it
// does not exist).
func (s *Store) lockMany(ctx context.Context, tx pgx.Tx, ids []ff.ExecutionID) (map[ff.ExecutionID]*locked, map[ff.ExecutionID]actions.Outcome, error) {
	held, read, err := s.lockAndRead(ctx, tx, lockManySQL, ids)
	if err != nil {
		return nil, nil, err
	}
	got := make(map[ff.ExecutionID]*locked, len(ids))
	missing := make(map[ff.ExecutionID]actions.Outcome)
	for _, id := range ids {
		switch {
		case read[id] == nil:
			missing[id] = actions.Orphaned
		case !held[id]:
			missing[id] = actions.SkippedLocked
		default:
			got[id] = read[id]
		}
	}
	return got, missing, nil
}

// lockAndRead runs lockSQL (lockManySQL or lockWaitManySQL) over the
// distinct executions ids and then readManySQL, in one round trip: the ids
// it locked, and every execution it read once the locks were held.
func (s *Store) lockAndRead(ctx context.Context, tx pgx.Tx, lockSQL string, ids []ff.ExecutionID) (map[ff.ExecutionID]bool, map[ff.ExecutionID]*locked, error) {
	parts, uuids := keyArrays(ids)
	held := make(map[ff.ExecutionID]bool, len(ids))
	read := make(map[ff.ExecutionID]*locked, len(ids))
	b := &pgx.Batch{}
	b.Queue(s.sql(lockSQL), parts, uuids).Query(func(rows pgx.Rows) error {
		var id ff.ExecutionID
		_, err := pgx.ForEachRow(rows, []any{&id.Partition, &id.UUID}, func() error {
			held[id] = true
			return nil
		})
		return err
	})
	b.Queue(s.sql(readManySQL), parts, uuids).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			l := &locked{}
			if err := rows.Scan(append([]any{&l.id.Partition, &l.id.UUID}, l.fields()...)...); err != nil {
				return err
			}
			read[l.id] = l
		}
		return rows.Err()
	})
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, nil, dbutil.MapErr(err, "locking executions")
	}
	return held, read, nil
}

func keyArrays(ids []ff.ExecutionID) ([]int16, [][16]byte) {
	parts := make([]int16, len(ids))
	uuids := make([][16]byte, len(ids))
	for i, id := range ids {
		parts[i], uuids[i] = id.Partition, dbutil.UUID(id.UUID)
	}
	return parts, uuids
}

// passes splits the indexes of ids into passes in which no execution
// appears twice, keeping order: the k-th occurrence of an execution goes to
// pass k.
func passes(ids []ff.ExecutionID) [][]int {
	seen := make(map[ff.ExecutionID]int, len(ids))
	var out [][]int
	for i, id := range ids {
		k := seen[id]
		seen[id] = k + 1
		if k == len(out) {
			out = append(out, nil)
		}
		out[k] = append(out[k], i)
	}
	return out
}

// decideFunc decides item i of a pass on its locked row at now, queueing its
// writes into b, and returns its outcome.
type decideFunc func(ctx context.Context, i int, l *locked, now int64, b *pgx.Batch) (actions.Outcome, error)

// applyMany runs a scanner action over ids: each pass locks its executions
// with one statement, decides each locked one, and sends the writes of the
// whole pass in one batch. Any error fails the whole call (the caller's
// transaction is then unusable; the apply engine redoes the items one by one
// to find the failing one).
func (s *Store) applyMany(ctx context.Context, tx pgx.Tx, ids []ff.ExecutionID, doing string, decide decideFunc) ([]actions.Outcome, error) {
	for _, id := range ids {
		if err := s.checkID(id); err != nil {
			return nil, err
		}
	}
	outs := make([]actions.Outcome, len(ids))
	for _, pass := range passes(ids) {
		distinct := make([]ff.ExecutionID, len(pass))
		for j, i := range pass {
			distinct[j] = ids[i]
		}
		got, missing, err := s.lockMany(ctx, tx, distinct)
		if err != nil {
			return nil, err
		}
		now := s.clock.NowMs()
		b := &pgx.Batch{}
		for _, i := range pass {
			l := got[ids[i]]
			if l == nil {
				outs[i] = missing[ids[i]]
				continue
			}
			if outs[i], err = decide(ctx, i, l, now, b); err != nil {
				return nil, err
			}
		}
		if b.Len() > 0 {
			if err := sendBatch(ctx, tx, b, doing); err != nil {
				return nil, err
			}
		}
	}
	return outs, nil
}

// expireAttemptMany is expireAttempt for many attempts in one pass: the
// outcome of each, in order.
func (s *Store) expireAttemptMany(ctx context.Context, tx pgx.Tx, refs []actions.AttemptRef) ([]actions.Outcome, error) {
	ids := make([]ff.ExecutionID, len(refs))
	for i, r := range refs {
		ids[i] = r.ID
	}
	return s.applyMany(ctx, tx, ids, "expire attempts", func(ctx context.Context, i int, l *locked, now int64, b *pgx.Batch) (actions.Outcome, error) {
		return s.decideExpireAttempt(ctx, tx, b, l, refs[i].AttemptIndex, now)
	})
}

// promoteDelayedMany is promoteDelayed for many executions in one pass:
// the outcome of each, in order.
func (s *Store) promoteDelayedMany(ctx context.Context, tx pgx.Tx, ids []ff.ExecutionID) ([]actions.Outcome, error) {
	return s.applyMany(ctx, tx, ids, "promote delayed", func(_ context.Context, _ int, l *locked, now int64, b *pgx.Batch) (actions.Outcome, error) {
		return s.decidePromote(b, l, now), nil
	})
}

// expireDeadlineMany is expireDeadline for many executions in one pass: the
// outcome of each, in order.
func (s *Store) expireDeadlineMany(ctx context.Context, tx pgx.Tx, ids []ff.ExecutionID) ([]actions.Outcome, error) {
	return s.applyMany(ctx, tx, ids, "expire deadlines", func(ctx context.Context, _ int, l *locked, now int64, b *pgx.Batch) (actions.Outcome, error) {
		return s.decideExpireDeadline(ctx, tx, b, l, now)
	})
}

// one runs a group action for a single execution.
func one(outs []actions.Outcome, err error) (actions.Outcome, error) {
	if err != nil {
		return "", err
	}
	return outs[0], nil
}
