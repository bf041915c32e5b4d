package executions

import (
	"context"
	"errors"
	"fmt"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/actions"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/outbox"
	"github.com/jackc/pgx/v5"
)

// Finish is how one leased attempt ends, an item of FinishMany: completed
// with Result; or, when Fail is set, failed as Fail does; or, when Release
// is set, released as Release does. Fail and Release together are a
// validation error.
type Finish struct {
	Lease   Lease
	Result  []byte
	Fail    *FailParams
	Release bool
}

// FinishOutcome is what FinishMany did with one item.
type FinishOutcome struct {
	// Err is nil when the item's writes are in the transaction, or the
	// typed error the one-lease call would have returned: ff.ErrStaleLease,
	// ff.ErrLeaseExpired, ff.ErrNotActive, ff.ErrNotFound or a validation
	// error. An item with an error wrote nothing.
	Err error
	// Fail is what a failed item did (retried or terminal).
	Fail FailResult
}

// lockWaitManySQL locks the executions of a FinishMany pass in key order,
// waiting for transactions that hold them. Every statement that locks more
// than one execution and waits (this one, AddDependencies, the cancel
// dispatcher) locks in (partition_key, execution_id) order, so two of them
// cannot deadlock. readManySQL then reads them after the locks are held.
const lockWaitManySQL = `SELECT e.partition_key, e.execution_id FROM {S}ff_exec_core e
WHERE (e.partition_key, e.execution_id) IN (SELECT * FROM unnest($1::int2[], $2::uuid[]))
ORDER BY e.partition_key, e.execution_id
FOR NO KEY UPDATE`

// FinishMany completes and fails many leases in one transaction: what the
// coalesced Complete, Fail and Release calls (and so package runner) send
// instead of one transaction per execution. Each item is fenced on its own, exactly as
// Complete or Fail fences it, and writes its own outbox rows; an item whose
// lease is stale, expired or no longer active gets that typed error in its
// FinishOutcome and writes nothing, while the others commit. The returned
// error is for the call as a whole (the database, or a writer that changed
// a locked row without locking it): then nothing was written.
//
// An execution named twice is finished in the order given: the second item
// is fenced against what the first left (a stale lease, after a Complete).
func (s *Store) FinishMany(ctx context.Context, items []Finish) ([]FinishOutcome, error) {
	var outs []FinishOutcome
	err := s.inTx(ctx, "finish", func(tx pgx.Tx) error {
		var err error
		outs, err = s.FinishManyTx(ctx, tx, items)
		return err
	})
	return outs, err
}

// FinishManyTx is FinishMany inside the caller's transaction. After an
// error the transaction holds part of the writes and must be rolled back.
func (s *Store) FinishManyTx(ctx context.Context, tx pgx.Tx, items []Finish) ([]FinishOutcome, error) {
	return s.finishMany(ctx, tx, items, true)
}

// errBusy is the outcome of an item whose execution another transaction
// held, in a finishMany that does not wait: it wrote nothing.
var errBusy = errors.New("executions: the execution is locked by another transaction")

// finishMany is FinishManyTx; without wait, an item whose execution is
// locked by another transaction gets errBusy instead of waiting for it.
func (s *Store) finishMany(ctx context.Context, tx pgx.Tx, items []Finish, wait bool) ([]FinishOutcome, error) {
	outs := make([]FinishOutcome, len(items))
	ids := make([]ff.ExecutionID, len(items))
	for i, it := range items {
		ids[i] = it.Lease.ID
		if err := s.checkID(it.Lease.ID); err != nil {
			outs[i].Err = err
			continue
		}
		switch {
		case it.Fail != nil && it.Release:
			outs[i].Err = ff.Validationf("finish", "%s: both Fail and Release are set", it.Lease.ID)
		case it.Fail != nil:
			outs[i].Err = ff.CheckText("message", it.Fail.Message, false, ff.MaxMessage)
		}
	}
	for _, pass := range passes(ids) {
		var distinct []ff.ExecutionID
		for _, i := range pass {
			if outs[i].Err == nil {
				distinct = append(distinct, ids[i])
			}
		}
		if len(distinct) == 0 {
			continue
		}
		var got map[ff.ExecutionID]*locked
		var busy map[ff.ExecutionID]actions.Outcome
		var err error
		if wait {
			got, err = s.lockWaitMany(ctx, tx, distinct)
		} else {
			got, busy, err = s.lockMany(ctx, tx, distinct)
		}
		if err != nil {
			return nil, err
		}
		now := s.clock.NowMs()
		b := &pgx.Batch{}
		var plain completes
		for _, i := range pass {
			if outs[i].Err != nil {
				continue
			}
			it := items[i]
			l := got[it.Lease.ID]
			if l == nil {
				if busy[it.Lease.ID] == actions.SkippedLocked {
					outs[i].Err = errBusy
				} else {
					outs[i].Err = fmt.Errorf("execution %s: %w", it.Lease.ID, ff.ErrNotFound)
				}
				continue
			}
			if err := s.fence(l, it.Lease, now); err != nil {
				outs[i].Err = err
				continue
			}
			switch {
			case it.Fail != nil:
				outs[i].Fail, err = s.queueFail(ctx, tx, b, l, *it.Fail, now)
			case it.Release:
				err = s.queueRelease(b, l, now)
			default:
				plain.add(l, it.Result)
			}
			if err != nil {
				return nil, err
			}
		}
		if err := s.queueCompletes(ctx, tx, b, &plain, now); err != nil {
			return nil, err
		}
		if b.Len() > 0 {
			if err := sendBatch(ctx, tx, b, "finish"); err != nil {
				return nil, err
			}
		}
	}
	return outs, nil
}

// completes gathers the Completes of a FinishMany pass: they are written by
// set-based statements, a handful per pass instead of four per execution
// (a flow member's completion event and cascade still one by one).
type completes struct {
	locked  []*locked
	results [][]byte
}

func (c *completes) add(l *locked, result []byte) {
	c.locked, c.results = append(c.locked, l), append(c.results, result)
}

// Complete of fenced executions, set-based: the attempts closed and the
// executions made terminal, each guarded by what was read under its lock
// (the attempt's epoch; the execution's phase and attempt index).
const (
	closeAttemptsSQL = `UPDATE {S}ff_attempt a
SET outcome = 'success', lease_expires_at_ms = NULL, terminal_at_ms = $5
FROM unnest($1::int2[], $2::uuid[], $3::int[], $4::bigint[]) AS k(partition_key, execution_id, attempt_index, lease_epoch)
WHERE a.partition_key = k.partition_key AND a.execution_id = k.execution_id
  AND a.attempt_index = k.attempt_index AND a.lease_epoch = k.lease_epoch`
	completeManySQL = `UPDATE {S}ff_exec_core e
SET lifecycle_phase = 'terminal', ownership_state = 'unowned', eligibility_state = 'not_applicable',
    attempt_state = 'attempt_terminal', public_state = 'completed', blocking_reason = NULL,
    terminal_at_ms = $6, result = k.result
FROM unnest($1::int2[], $2::uuid[], $3::bytea[], $4::text[], $5::int[]) AS k(partition_key, execution_id, result, phase, attempt_index)
WHERE e.partition_key = k.partition_key AND e.execution_id = k.execution_id
  AND e.lifecycle_phase = k.phase AND e.attempt_index = k.attempt_index`
)

// queueCompletes queues the writes of the Completes in c, each execution
// fenced and locked: its attempt closed with outcome success, the execution
// terminal with its result, a lease "revoked" and a completion "success"
// event; a flow member's completion also enqueues its cascade (see
// queueCompletion). It is the only place a Complete's writes are written,
// for one execution (CompleteTx) as for many (FinishMany).
func (s *Store) queueCompletes(ctx context.Context, tx pgx.Tx, b *pgx.Batch, c *completes, now int64) error {
	n := len(c.locked)
	if n == 0 {
		return nil
	}
	parts := make([]int16, n)
	uuids := make([][16]byte, n)
	attempts := make([]int32, n)
	epochs := make([]int64, n)
	phases := make([]string, n)
	leases := make([]outbox.LeaseRow, n)
	var comps []outbox.CompletionRow
	var members []*locked
	for i, l := range c.locked {
		parts[i], uuids[i] = l.id.Partition, dbutil.UUID(l.id.UUID)
		attempts[i], epochs[i], phases[i] = l.attemptIndex, l.epoch, l.phase
		leases[i] = lockedLeaseEvent(l, ff.LeaseRevoked, now)
		if l.flowID != nil {
			members = append(members, l)
		} else {
			comps = append(comps, outboxCompletion(l, ff.OutcomeSuccess, now))
		}
	}
	what := "complete " + c.locked[0].id.String()
	if n > 1 {
		what = fmt.Sprintf("complete %d executions", n)
	}
	s.queueExpect(b, what, int64(n), ff.ErrStaleLease, closeAttemptsSQL, parts, uuids, attempts, epochs, now)
	s.queueExpect(b, what, int64(n), ff.ErrStaleLease, completeManySQL, parts, uuids, c.results, phases, attempts, now)
	if err := s.out.QueueLeases(b, leases); err != nil {
		return err
	}
	if err := s.out.QueueCompletions(b, comps); err != nil {
		return err
	}
	for _, l := range members {
		if err := s.queueCompletion(ctx, tx, b, l, ff.OutcomeSuccess, now); err != nil {
			return err
		}
	}
	return nil
}

// lockWaitMany locks the distinct executions ids, waiting for their
// holders, and reads them once locked, in one round trip. An id it does not
// return does not exist.
func (s *Store) lockWaitMany(ctx context.Context, tx pgx.Tx, ids []ff.ExecutionID) (map[ff.ExecutionID]*locked, error) {
	held, read, err := s.lockAndRead(ctx, tx, lockWaitManySQL, ids)
	for id := range read {
		if !held[id] { // inserted after the lock statement ran
			delete(read, id)
		}
	}
	return read, err
}

// IsFenced reports whether err says a lease no longer holds its execution
// (stale, expired, not active or gone): the holder must stop working on it.
func IsFenced(err error) bool {
	return errors.Is(err, ff.ErrStaleLease) || errors.Is(err, ff.ErrLeaseExpired) ||
		errors.Is(err, ff.ErrNotActive) || errors.Is(err, ff.ErrNotFound)
}

// finishBatch runs a batch of coalesced Complete, Fail and Release calls
// in one transaction that does not wait for locks: a call whose execution
// another transaction holds would hold up every other call of the batch
// for as long as that transaction runs. Such a call is handed back to the
// coalescer (retry), holding no connection while it waits, and rides a
// later batch once its lock is free; so a session holding N executions for
// minutes costs only the calls on those N, each bounded by its caller's
// context. When the batch fails as a whole before its COMMIT was sent
// (nothing of it committed) its calls are finished one by one, each in a
// transaction and a goroutine of its own, on its caller's context, each
// getting its own error; when its COMMIT fails, every call gets that
// error, as an unknown outcome.
func (s *Store) finishBatch(ctx context.Context, items []Finish, d *delivery[Finish, FinishOutcome]) {
	var outs []FinishOutcome
	// BEGIN travels with the lock statement; COMMIT goes alone, after the
	// writes' guards (checked here, from their row counts) have passed: sent
	// with the writes, it would commit whatever a failed guard refuses.
	committing := false
	err := s.inPipeTx(ctx, "finish", func(tx *pipeTx) error {
		var err error
		if outs, err = s.finishMany(ctx, tx, items, false); err != nil {
			return err
		}
		committing = true
		return tx.Commit(ctx)
	})
	// A batch that failed at COMMIT may have committed (the connection can
	// be lost after the server committed): its calls get the error, an
	// unknown outcome, and are never finished again one by one, which would
	// tell them "not active" about their own batch's commit.
	if err != nil && (committing || len(items) == 1) {
		if committing && !errors.Is(err, ff.ErrOutcomeUnknown) && !isTyped(err) {
			err = ff.OutcomeUnknown("finish: committing a batch", err)
		}
		for i := range items {
			d.deliver(i, result[FinishOutcome]{err: err})
		}
		return
	}
	// alone finishes call i in a transaction of its own, on ctx.
	alone := func(ctx context.Context, i int) {
		go func() {
			outs, err := s.FinishMany(ctx, items[i:i+1])
			if err != nil {
				d.deliver(i, result[FinishOutcome]{err: err})
			} else {
				d.deliver(i, result[FinishOutcome]{res: outs[0]})
			}
		}()
	}
	for i := range items {
		switch {
		case err == nil && errors.Is(outs[i].Err, errBusy) && unboundedBatch:
			alone(ctx, i) // the earlier releases' way: on the batch's context
		case err == nil && errors.Is(outs[i].Err, errBusy):
			d.retry(i)
		case err == nil:
			d.deliver(i, result[FinishOutcome]{res: outs[i]})
		default:
			alone(d.ctx(i), i)
		}
	}
}

// finish ends one lease through the coalescer and returns its outcome.
func (s *Store) finish(ctx context.Context, it Finish) (FinishOutcome, error) {
	out, err := s.finisher.do(ctx, it)
	if err != nil {
		return FinishOutcome{}, err
	}
	return out, out.Err
}
