package executions_test

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/internal/actions"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// The hand-over tests: one transaction hands an execution over (or changes
// its lease) and holds its row lock while another call on the same
// execution arrives and waits for that lock. Once the lock is released the
// waiting call must decide on the execution as the handing transaction left
// it, never on what it read before the wait. Each of these failed on the
// one-statement lock of earlier releases, which fenced against the attempt
// row of a snapshot taken before the wait; `go test -tags ffstalelock`
// builds that lock again, and they fail there.

// holder is a transaction that holds an execution's row lock.
type holder struct {
	f   *fixture
	tx  pgx.Tx
	pid int32
}

// hold begins a transaction, runs fn in it (which takes the locks) and
// returns it still open.
func (f *fixture) hold(fn func(tx pgx.Tx) error) *holder {
	f.t.Helper()
	tx, err := f.db.Pool.Begin(f.ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	h := &holder{f: f, tx: tx}
	f.t.Cleanup(func() { _ = tx.Rollback(f.ctx) })
	if err := tx.QueryRow(f.ctx, `SELECT pg_backend_pid()`).Scan(&h.pid); err != nil {
		f.t.Fatal(err)
	}
	if err := fn(tx); err != nil {
		f.t.Fatalf("the handing transaction: %v", err)
	}
	return h
}

// holdClaim claims lane-a's execution in a transaction it leaves open,
// holding the row, and returns the holder and the lease.
func (f *fixture) holdClaim() (*holder, executions.Lease) {
	f.t.Helper()
	var lease executions.Lease
	h := f.hold(func(tx pgx.Tx) error {
		leases, err := f.st.ClaimTx(f.ctx, tx, executions.ClaimParams{Lane: "lane-a", WorkerID: "w", LeaseTTL: time.Minute})
		if err == nil && len(leases) != 1 {
			err = errors.New("the claim returned no lease")
		}
		if len(leases) == 1 {
			lease = leases[0]
		}
		return err
	})
	return h, lease
}

// waiting runs call in a goroutine and returns once its connection waits
// for a lock (n backends of this test's schema waiting in all); the
// returned channel yields call's error once it returns. A call that returns
// before it waited fails the test: it did not race the holder.
func (f *fixture) waiting(n int, call func() error) <-chan error {
	f.t.Helper()
	done := make(chan error, 1)
	go func() { done <- call() }()
	fftest.Await(f.t, 30*time.Second, "the call to wait for the row lock", func() bool {
		select {
		case err := <-done:
			f.t.Fatalf("the call returned (%v) before it waited for the lock", err)
		default:
		}
		return f.lockWaiters() >= n
	})
	return done
}

// retrying runs call, a Complete, Fail or Release, in a goroutine and
// returns once the Store has handed it back n times in all because its
// execution was held (it waits in the Store's queue, not on the lock); the
// returned channel yields call's error once it returns. A call that returns
// before that fails the test: it did not race the holder.
func (f *fixture) retrying(n int64, call func() error) <-chan error {
	f.t.Helper()
	done := make(chan error, 1)
	go func() { done <- call() }()
	fftest.Await(f.t, 30*time.Second, "the call to be handed back for its held execution", func() bool {
		select {
		case err := <-done:
			f.t.Fatalf("the call returned (%v) before it met the held execution", err)
		default:
		}
		return executions.FinishRetries(f.st) >= n
	})
	return done
}

// lockWaiters counts the backends running a statement on this test's
// schema that wait for a lock.
func (f *fixture) lockWaiters() int {
	f.t.Helper()
	return f.Count(`SELECT count(*) FROM pg_stat_activity
		WHERE wait_event_type = 'Lock' AND datname = current_database() AND strpos(query, $1) > 0`,
		`"`+f.db.Name+`".`)
}

func (h *holder) commit() {
	h.f.t.Helper()
	if err := h.tx.Commit(h.f.ctx); err != nil {
		h.f.t.Fatalf("committing the handing transaction: %v", err)
	}
}

// result waits for a waiting call's error.
func (f *fixture) result(done <-chan error) error {
	f.t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		f.t.Fatal("the waiting call did not return within 30 s of the commit")
		return nil
	}
}

// attemptRow reads an attempt's epoch, lease expiry and outcome.
func (f *fixture) attemptRow(id ff.ExecutionID, idx int32) (epoch int64, expires *int64, outcome *string) {
	f.t.Helper()
	if err := f.db.Pool.QueryRow(f.ctx, `SELECT lease_epoch, lease_expires_at_ms, outcome FROM ff_attempt
		WHERE partition_key = $1 AND execution_id = $2 AND attempt_index = $3`, id.Partition, id.UUID, idx).
		Scan(&epoch, &expires, &outcome); err != nil {
		f.t.Fatalf("reading attempt %d of %s: %v", idx, id, err)
	}
	return epoch, expires, outcome
}

// leaseTypes returns the types of id's lease events in order.
func (f *fixture) leaseTypes(id ff.ExecutionID) []string {
	f.t.Helper()
	var out []string
	for _, e := range f.LeaseEvents(id) {
		out = append(out, e.Type)
	}
	return out
}

// wantLeaseEvents checks id's lease events as type@epoch, in order.
func (f *fixture) wantLeaseEvents(id ff.ExecutionID, want ...string) {
	f.t.Helper()
	var got []string
	for _, e := range f.LeaseEvents(id) {
		got = append(got, e.Type+"@"+strconv.FormatInt(e.Epoch, 10))
	}
	if !slices.Equal(got, want) {
		f.t.Errorf("lease events of %s = %v, want %v", id, got, want)
	}
}

// Worker 1's Complete waits behind a transaction that revokes its lease and
// hands the execution to worker 2. It must fail as stale: worker 2 holds the
// execution, and completes it.
func TestHandOverRevokeClaimThenStaleComplete(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.Create(executions.CreateParams{})
	old := f.ClaimOne("lane-a", time.Minute)
	var fresh executions.Lease
	h := f.hold(func(tx pgx.Tx) error {
		if err := f.st.RevokeTx(f.ctx, tx, id, "hand over"); err != nil {
			return err
		}
		leases, err := f.st.ClaimTx(f.ctx, tx, executions.ClaimParams{Lane: "lane-a", WorkerID: "w2", LeaseTTL: time.Minute})
		if err != nil || len(leases) != 1 {
			return errors.Join(err, errors.New("want one lease"))
		}
		fresh = leases[0]
		return nil
	})
	done := f.retrying(1, func() error { return f.st.Complete(f.ctx, old, []byte("worker 1")) })
	h.commit()
	wantErr(t, f.result(done), ff.ErrStaleLease)

	if err := f.st.Complete(f.ctx, fresh, []byte("worker 2")); err != nil {
		t.Fatalf("worker 2's Complete: %v", err)
	}
	if e := f.WantState(id, stDone); string(e.Result) != "worker 2" {
		t.Errorf("result = %q, want worker 2's", e.Result)
	}
	f.wantLeaseEvents(id, "acquired@1", "revoked@1", "acquired@3", "revoked@3")
	f.WantEvents(id, f.leaseTypes(id), []string{"success"})
}

// A Reclaim that arrives just after the lease's first expiry waits behind
// the worker's own Renew. It must see the renewed lease and back off.
func TestHandOverRenewThenReclaimBacksOff(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.Create(executions.CreateParams{RetryPolicy: executions.RetryPolicy{MaxRetries: 2}})
	lease := f.ClaimOne("lane-a", 10*time.Second)
	f.clock.Set(t0 + 9000)
	var renewed executions.Lease
	h := f.hold(func(tx pgx.Tx) error {
		var err error
		renewed, err = f.st.RenewTx(f.ctx, tx, lease, 10*time.Second)
		return err
	})
	f.clock.Set(t0 + 11000) // past the first expiry, before the renewed one
	done := f.waiting(1, func() error {
		_, err := f.st.Reclaim(f.ctx, id, executions.ClaimParams{WorkerID: "thief", LeaseTTL: time.Minute})
		return err
	})
	h.commit()
	wantErr(t, f.result(done), ff.ErrLeaseHeld)

	if _, err := f.st.Renew(f.ctx, renewed, 10*time.Second); err != nil {
		t.Fatalf("the worker's next Renew: %v", err)
	}
	f.WantState(id, stActive)
	f.wantLeaseEvents(id, "acquired@1", "renewed@1", "renewed@1")
}

// A Cancel waits behind a Claim. It must fence the lease the claim took:
// attempt closed, epoch bumped, a revoked event; the claimer's Complete is
// then stale.
func TestHandOverClaimThenCancelFencesTheLease(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.Create(executions.CreateParams{})
	h, lease := f.holdClaim()
	done := f.waiting(1, func() error { return f.st.Cancel(f.ctx, id, executions.CancelParams{Reason: "stop"}) })
	h.commit()
	if err := f.result(done); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	f.WantState(id, stCanceled)
	epoch, expires, outcome := f.attemptRow(id, 0)
	if epoch != 2 || expires != nil || outcome == nil || *outcome != "cancelled" {
		t.Errorf("attempt after the cancel: epoch %d, lease expiry %v, outcome %v; want 2, none, cancelled", epoch, expires, outcome)
	}
	f.wantLeaseEvents(id, "acquired@1", "revoked@1")
	f.WantEvents(id, f.leaseTypes(id), []string{"cancelled"})
	wantErr(t, f.st.Complete(f.ctx, lease, nil), ff.ErrStaleLease)
}

// An operator's Revoke waits behind a Claim. It must revoke the lease the
// claim took instead of finding no lease.
func TestHandOverClaimThenRevoke(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.Create(executions.CreateParams{})
	h, lease := f.holdClaim()
	done := f.waiting(1, func() error { return f.st.Revoke(f.ctx, id, "operator") })
	h.commit()
	if err := f.result(done); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	f.WantState(id, state{"runnable", "unowned", "eligible_now", "attempt_interrupted", "waiting"})
	f.wantLeaseEvents(id, "acquired@1", "revoked@1")
	_, err := f.st.Renew(f.ctx, lease, time.Minute)
	wantErr(t, err, ff.ErrStaleLease)
}

// The edge-cancel dispatcher's sibling cancel waits behind a Claim of the
// sibling. It must fence the new lease.
func TestHandOverClaimThenSiblingCancel(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.Create(executions.CreateParams{})
	h, _ := f.holdClaim()
	var out actions.Outcome
	done := f.waiting(1, func() error {
		return f.InTx(func(tx pgx.Tx) error {
			var err error
			out, err = executions.CancelSibling(f.ctx, f.st, tx, id, executions.SiblingCancelReason)
			return err
		})
	})
	h.commit()
	if err := f.result(done); err != nil || out != actions.Processed {
		t.Fatalf("CancelSibling = %s, %v; want processed", out, err)
	}
	f.wantLeaseEvents(id, "acquired@1", "revoked@1")
	if epoch, expires, _ := f.attemptRow(id, 0); epoch != 2 || expires != nil {
		t.Errorf("attempt after the sibling cancel: epoch %d, lease expiry %v; want 2 and none", epoch, expires)
	}
}

// A worker whose lease expired renews while another worker's Reclaim holds
// the execution: the renew is stale (the attempt moved on), not expired,
// and the new holder completes.
func TestHandOverReclaimThenStaleRenew(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.Create(executions.CreateParams{RetryPolicy: executions.RetryPolicy{MaxRetries: 2}})
	old := f.ClaimOne("lane-a", time.Second)
	f.clock.Set(t0 + 5000)
	var fresh executions.Lease
	h := f.hold(func(tx pgx.Tx) error {
		var err error
		fresh, err = f.st.ReclaimTx(f.ctx, tx, id, executions.ClaimParams{WorkerID: "w2", LeaseTTL: time.Minute})
		return err
	})
	done := f.waiting(1, func() error {
		_, err := f.st.Renew(f.ctx, old, time.Minute)
		return err
	})
	h.commit()
	wantErr(t, f.result(done), ff.ErrStaleLease)
	if err := f.st.Complete(f.ctx, fresh, nil); err != nil {
		t.Fatalf("the reclaimer's Complete: %v", err)
	}
	f.wantLeaseEvents(id, "acquired@1", "reclaimed@2", "revoked@2")
}

// The scanners' group actions never wait: an execution another transaction
// holds is skipped_locked, and once it is released the action decides on the
// lease that transaction left (here a deadline expires a lease claimed while
// the scan's item was queued).
func TestHandOverClaimThenDeadline(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.Create(executions.CreateParams{Deadline: time.UnixMilli(t0 + 1000)})
	h, lease := f.holdClaim()
	f.clock.Set(t0 + 2000)
	deadline := func() actions.Outcome {
		var out actions.Outcome
		if err := f.InTx(func(tx pgx.Tx) error {
			var err error
			out, err = actions.Of(f.st.Pipeline()).ExpireDeadline(f.ctx, tx, id)
			return err
		}); err != nil {
			t.Fatalf("ExpireDeadline: %v", err)
		}
		return out
	}
	if out := deadline(); out != actions.SkippedLocked {
		t.Fatalf("deadline while the claim holds the row = %s, want skipped_locked", out)
	}
	h.commit()
	if out := deadline(); out != actions.Processed {
		t.Fatalf("deadline after the claim = %s, want processed", out)
	}
	f.WantState(id, stExpired)
	f.wantLeaseEvents(id, "acquired@1", "expired@1")
	wantErr(t, f.st.Complete(f.ctx, lease, nil), ff.ErrStaleLease)
}

// AddDependencies and the edge-cancel dispatcher both lock several
// executions. AddDependencies used to lock the downstream, then its
// upstreams, while the dispatcher locks a group's members in id order: with
// the downstream and an upstream both members of a flagged group, the two
// waited for each other and Postgres killed one (deadlock detected). Now
// both lock in key order and both succeed.
func TestAddDependenciesAndDispatcherDoNotDeadlock(t *testing.T) {
	t.Parallel()
	g := newGroupFixture(t)
	f := g.fixture
	lo, hi := uuid.New(), uuid.New()
	if strings.Compare(lo.String(), hi.String()) > 0 {
		lo, hi = hi, lo
	}
	up := f.Create(executions.CreateParams{ID: lo, FlowID: g.flow})
	down := f.Create(executions.CreateParams{ID: hi, FlowID: g.flow})
	k := g.group(true, up.UUID.String(), down.UUID.String())

	// Something else holds the downstream for a moment (a worker's
	// transaction, say).
	h := f.hold(func(tx pgx.Tx) error {
		_, err := tx.Exec(f.ctx, `SELECT FROM ff_exec_core WHERE partition_key = $1 AND execution_id = $2 FOR NO KEY UPDATE`,
			down.Partition, down.UUID)
		return err
	})
	addDone := f.waiting(1, func() error {
		return f.st.AddDependencies(f.ctx, executions.DependencyParams{FlowID: g.flow, Downstream: down, Upstreams: []ff.ExecutionID{up}})
	})
	var res actions.GroupResult
	dispatchDone := f.waiting(2, func() error {
		return f.InTx(func(tx pgx.Tx) error {
			var err error
			res, err = actions.Of(f.st.Pipeline()).DispatchCancelGroup(f.ctx, tx, k)
			return err
		})
	})
	h.commit()
	if err := f.result(addDone); err != nil {
		t.Errorf("AddDependencies: %v", err)
	}
	if err := f.result(dispatchDone); err != nil {
		t.Errorf("DispatchCancelGroup: %v", err)
	}
	if res.Outcome != actions.Processed || res.Cancelled != 2 {
		t.Errorf("dispatch = %+v, want both members cancelled", res)
	}
}
