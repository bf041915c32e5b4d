package executions_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/fftest"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// wantLease fails the test unless LeaseOutcome says status (and outcome,
// for an ended lease) about l.
func (f *fixture) wantLease(l executions.Lease, status executions.LeaseStatus, outcome string) executions.LeaseState {
	f.t.Helper()
	st, err := f.st.LeaseOutcome(f.ctx, l)
	if err != nil {
		f.t.Fatalf("LeaseOutcome: %v", err)
	}
	if st.Status != status || st.Outcome != outcome {
		f.t.Fatalf("LeaseOutcome = %+v, want status %s outcome %q", st, status, outcome)
	}
	return st
}

// LeaseOutcome resolves an end whose outcome is unknown: the lease's own
// end committed (and which), did not (the lease still holds: send it
// again), or cannot any more (the lease ran out or was taken).
func TestLeaseOutcome(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	lane := fftest.DefaultLane

	// Committed or not.
	{
		f.Create(executions.CreateParams{})
		l := f.ClaimOne(lane, time.Minute)
		f.wantLease(l, executions.LeaseHeld, "")
		// A Complete whose transaction did not commit left nothing.
		rolledBack := errors.New("rolled back")
		err := f.InTx(func(tx pgx.Tx) error {
			if err := f.st.CompleteTx(f.ctx, tx, l, []byte("r")); err != nil {
				return err
			}
			return rolledBack
		})
		if !errors.Is(err, rolledBack) {
			t.Fatal(err)
		}
		f.wantLease(l, executions.LeaseHeld, "")
		if err := f.st.Complete(f.ctx, l, []byte("r")); err != nil {
			t.Fatal(err)
		}
		if st := f.wantLease(l, executions.LeaseEnded, ff.OutcomeSuccess); st.PublicState != ff.PublicCompleted {
			t.Fatalf("public state %q, want completed", st.PublicState)
		}
	}

	// Failed, retried, released.
	{
		f.Create(executions.CreateParams{RetryPolicy: executions.RetryPolicy{MaxRetries: 1}})
		l := f.ClaimOne(lane, time.Minute)
		if _, err := f.st.Fail(f.ctx, l, executions.FailParams{Message: "flaky"}); err != nil {
			t.Fatal(err)
		}
		f.wantLease(l, executions.LeaseEnded, "retry")
		l = f.ClaimOne(lane, time.Minute)
		if err := f.st.Release(f.ctx, l); err != nil {
			t.Fatal(err)
		}
		f.wantLease(l, executions.LeaseEnded, "interrupted")
		// The next claim re-leases the same attempt: the released lease is
		// no longer its holder's.
		next := f.ClaimOne(lane, time.Minute)
		f.wantLease(l, executions.LeaseLost, "")
		if _, err := f.st.Fail(f.ctx, next, executions.FailParams{Message: "bad", Permanent: true}); err != nil {
			t.Fatal(err)
		}
		f.wantLease(next, executions.LeaseEnded, ff.OutcomeFailed)
	}

	// Revoked or cancelled.
	{
		id := f.Create(executions.CreateParams{})
		l := f.ClaimOne(lane, time.Minute)
		if err := f.st.Revoke(f.ctx, id, "operator"); err != nil {
			t.Fatal(err)
		}
		f.wantLease(l, executions.LeaseLost, "")
		l = f.ClaimOne(lane, time.Minute)
		if err := f.st.Cancel(f.ctx, id, executions.CancelParams{}); err != nil {
			t.Fatal(err)
		}
		if st := f.wantLease(l, executions.LeaseLost, ""); st.PublicState != ff.PublicCancelled {
			t.Fatalf("public state %q, want cancelled", st.PublicState)
		}
	}

	// Expired, reclaimed, past its deadline.
	{
		id := f.Create(executions.CreateParams{RetryPolicy: executions.RetryPolicy{MaxRetries: 1},
			Deadline: time.UnixMilli(f.clock.NowMs() + 3_600_000)})
		l := f.ClaimOne(lane, time.Second)
		f.clock.Advance(time.Second)
		f.wantLease(l, executions.LeaseExpired, "")
		if err := f.st.Complete(f.ctx, l, nil); !errors.Is(err, ff.ErrLeaseExpired) {
			t.Fatalf("Complete of an expired lease: %v", err)
		}
		next, err := f.st.Reclaim(f.ctx, id, executions.ClaimParams{WorkerID: "w2", LeaseTTL: 2 * time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		f.wantLease(l, executions.LeaseLost, "")
		if st := f.wantLease(next, executions.LeaseHeld, ""); st.DeadlinePassed {
			t.Fatal("deadline passed an hour early")
		}
		// Deadlines fence: the 2 h lease was capped at the deadline, and
		// ends with it.
		if deadline := f.clock.NowMs() + 3_600_000 - 1000; next.ExpiresAtMs > deadline {
			t.Fatalf("Reclaim's lease expires at %d, past the deadline %d", next.ExpiresAtMs, deadline)
		}
		f.clock.Advance(time.Hour)
		f.wantLease(next, executions.LeaseExpired, "")
	}

	// Many in one call, in order.
	{
		f.Create(executions.CreateParams{})
		f.Create(executions.CreateParams{})
		a, b := f.ClaimOne(lane, time.Minute), f.ClaimOne(lane, time.Minute)
		if err := f.st.Complete(f.ctx, b, nil); err != nil {
			t.Fatal(err)
		}
		gone := a
		gone.ID.UUID = uuid.New()
		got, err := f.st.LeaseStates(f.ctx, []executions.Lease{b, a, gone, a})
		if err != nil {
			t.Fatal(err)
		}
		want := []executions.LeaseStatus{executions.LeaseEnded, executions.LeaseHeld, executions.LeaseLost, executions.LeaseHeld}
		for i := range want {
			if got[i].Status != want[i] {
				t.Fatalf("LeaseStates = %+v, want statuses %v", got, want)
			}
		}
	}

	// Bad input.
	{
		_, err := f.st.LeaseOutcome(f.ctx, executions.Lease{})
		wantErr(t, err, ff.ErrValidation)
		_, err = f.st.LeaseStates(f.ctx, make([]executions.Lease, executions.MaxLeaseStates+1))
		wantErr(t, err, ff.ErrValidation)
	}
}
