package executions_test

import (
	"testing"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/actions"
	"github.com/jackc/pgx/v5"
)

func (f *fixture) action(fn func(tx pgx.Tx) (actions.Outcome, error)) actions.Outcome {
	f.t.Helper()
	return inTxValue(f, "action", fn)
}

// inTxValue runs fn in a transaction of its own, commits it and returns
// fn's value; an error fails the test, named by what.
func inTxValue[T any](f *fixture, what string, fn func(tx pgx.Tx) (T, error)) T {
	f.t.Helper()
	var out T
	err := f.InTx(func(tx pgx.Tx) error {
		var err error
		out, err = fn(tx)
		return err
	})
	if err != nil {
		f.t.Fatalf("%s: %v", what, err)
	}
	return out
}

func (f *fixture) expireAttempt(id ff.ExecutionID, attempt int32) actions.Outcome {
	f.t.Helper()
	return f.action(func(tx pgx.Tx) (actions.Outcome, error) {
		return actions.Of(f.st.Pipeline()).ExpireAttempt(f.ctx, tx, id, attempt)
	})
}

func TestExpireAttemptRetriesWhileRetriesRemain(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.Create(executions.CreateParams{RetryPolicy: executions.RetryPolicy{MaxRetries: 3}, Namespace: "n"})
	l := f.ClaimOne("lane-a", time.Second)
	if got := f.expireAttempt(id, 0); got != actions.NoOp {
		t.Fatalf("expire before the lease expired = %q, want no_op", got)
	}
	f.clock.Advance(time.Hour)
	if got := f.expireAttempt(id, 0); got != actions.Processed {
		t.Fatalf("expire = %q, want processed", got)
	}
	e := f.WantState(id, stRetry)
	if e.AttemptIndex != 1 || e.LastFailureMessage != "attempt_timeout" {
		t.Fatalf("after expiry: %+v", e)
	}
	var outcome string
	var epoch int64
	if err := f.db.Pool.QueryRow(f.ctx, `SELECT outcome, lease_epoch FROM ff_attempt WHERE execution_id = $1 AND attempt_index = 0`, id.UUID).Scan(&outcome, &epoch); err != nil {
		t.Fatal(err)
	}
	if outcome != "interrupted" || epoch != 2 {
		t.Errorf("attempt 0 = %s epoch %d, want interrupted epoch 2", outcome, epoch)
	}
	f.WantEvents(id, []string{"acquired", "expired"}, nil)
	ev := f.LeaseEvents(id)
	if ev[1].Namespace != "n" || ev[1].Epoch != 1 || ev[1].AtMs != t0+3600_000 {
		t.Errorf("expired event = %+v", ev[1])
	}
	// The late worker is fenced out; a second run of the action does nothing.
	_, err := f.st.Renew(f.ctx, l, time.Second)
	wantErr(t, err, ff.ErrStaleLease)
	if got := f.expireAttempt(id, 0); got != actions.NoOp {
		t.Fatalf("second expire = %q, want no_op", got)
	}
	f.WantEvents(id, []string{"acquired", "expired"}, nil)
}

func TestExpireAttemptTerminalWhenRetriesExhausted(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.Create(executions.CreateParams{})
	f.ClaimOne("lane-a", time.Second)
	f.clock.Advance(2 * time.Second)
	if got := f.expireAttempt(id, 0); got != actions.Processed {
		t.Fatalf("expire = %q", got)
	}
	f.WantState(id, stExpired)
	f.WantEvents(id, []string{"acquired", "expired"}, []string{"expired"})
	if got := f.expireAttempt(ff.NewExecutionID(id.Partition), 0); got != actions.Orphaned {
		t.Fatalf("expire of a missing execution = %q, want orphaned", got)
	}
}

func TestExpireAttemptSkipsLockedRow(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.Create(executions.CreateParams{})
	f.ClaimOne("lane-a", time.Second)
	f.clock.Advance(2 * time.Second)
	blocker, err := f.db.Pool.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Rollback(f.ctx)
	if _, err := blocker.Exec(f.ctx, `SELECT 1 FROM ff_exec_core WHERE execution_id = $1 FOR UPDATE`, id.UUID); err != nil {
		t.Fatal(err)
	}
	if got := f.expireAttempt(id, 0); got != actions.SkippedLocked {
		t.Fatalf("expire of a locked row = %q, want skipped_locked", got)
	}
	f.WantState(id, stActive)
	if err := blocker.Rollback(f.ctx); err != nil {
		t.Fatal(err)
	}
	if got := f.expireAttempt(id, 0); got != actions.Processed {
		t.Fatalf("expire after the lock is gone = %q", got)
	}
}

func TestPromoteDelayed(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.Create(executions.CreateParams{DelayUntil: time.UnixMilli(t0 + 1000)})
	promote(t, f, id, actions.NoOp)
	f.clock.Advance(time.Second)
	promote(t, f, id, actions.Processed)
	e := f.WantState(id, stWaiting)
	if e.DelayUntilMs != nil || e.BlockingReason != nil {
		t.Fatalf("promoted: delay_until %v blocking %v", e.DelayUntilMs, e.BlockingReason)
	}
	promote(t, f, id, actions.NoOp)
	f.WantEvents(id, nil, nil)
	f.ClaimOne("lane-a", time.Second)
}

func TestExpireDeadline(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	deadline := time.UnixMilli(t0 + 10_000)
	leased := f.Create(executions.CreateParams{Deadline: deadline, RetryPolicy: executions.RetryPolicy{MaxRetries: 5}})
	l := f.ClaimOne("lane-a", time.Hour)
	waiting := f.Create(executions.CreateParams{Lane: "b", Deadline: deadline})
	done := f.Create(executions.CreateParams{Lane: "c", Deadline: deadline})
	if err := f.st.Complete(f.ctx, f.ClaimOne("c", time.Hour), nil); err != nil {
		t.Fatal(err)
	}
	expire := func(id ff.ExecutionID) actions.Outcome {
		return f.action(func(tx pgx.Tx) (actions.Outcome, error) {
			return actions.Of(f.st.Pipeline()).ExpireDeadline(f.ctx, tx, id)
		})
	}
	if got := expire(leased); got != actions.NoOp {
		t.Fatalf("before the deadline: %q", got)
	}
	f.clock.Advance(11 * time.Second)
	for _, id := range []ff.ExecutionID{leased, waiting} {
		if got := expire(id); got != actions.Processed {
			t.Fatalf("expire deadline of %s = %q", id, got)
		}
		e := f.WantState(id, stExpired)
		if e.LastFailureMessage != "execution_deadline" {
			t.Errorf("message = %q", e.LastFailureMessage)
		}
	}
	if got := expire(done); got != actions.NoOp {
		t.Fatalf("expire of a completed execution = %q", got)
	}
	f.WantEvents(leased, []string{"acquired", "expired"}, []string{"expired"})
	f.WantEvents(waiting, nil, []string{"expired"})
	wantErr(t, f.st.Complete(f.ctx, l, nil), ff.ErrStaleLease)
}

func TestCancelSibling(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.Create(executions.CreateParams{})
	f.ClaimOne("lane-a", time.Hour)
	cancel := func() actions.Outcome {
		return f.action(func(tx pgx.Tx) (actions.Outcome, error) {
			return executions.CancelSibling(f.ctx, f.st, tx, id, "sibling_quorum_satisfied")
		})
	}
	if got := cancel(); got != actions.Processed {
		t.Fatalf("cancel sibling = %q", got)
	}
	e := f.WantState(id, stCanceled)
	if *e.CancellationReason != "sibling_quorum_satisfied" || *e.CancelledBy != "engine" {
		t.Fatalf("cancelled sibling = %+v", e)
	}
	if got := cancel(); got != actions.NoOp {
		t.Fatalf("second cancel = %q", got)
	}
	f.WantEvents(id, []string{"acquired", "revoked"}, []string{"cancelled"})
}
