package executions_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/actions"
	"github.com/jackc/pgx/v5"
)

// Deadlines fence (issue 37, item 4): no lease is granted at or after an
// execution's deadline, none reaches past it, and a lease's holder can end
// nothing once it has passed, whether or not the execution_deadline scanner
// has run yet. A lease and a deadline end at their instant: at
// lease_expires_at_ms (deadline_at_ms) itself they have ended, for the API
// and for the scanners alike.

// A claim skips an execution whose deadline has passed (at the deadline's
// instant included) and claims the next one instead, with Claim and ClaimTx.
func TestClaimSkipsAnExecutionPastItsDeadline(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	deadline := time.UnixMilli(t0 + 1000)
	for _, lane := range []string{"plain", "tx"} {
		late := f.Create(executions.CreateParams{Lane: lane, Deadline: deadline, Priority: 1})
		next := f.Create(executions.CreateParams{Lane: lane})
		f.clock.Set(t0 + 1000) // the deadline's instant: it has passed
		var leases []executions.Lease
		var err error
		p := executions.ClaimParams{Lane: lane, WorkerID: "w", LeaseTTL: time.Minute, Max: 2}
		if lane == "plain" {
			leases, err = f.st.Claim(f.ctx, p)
		} else {
			err = f.InTx(func(tx pgx.Tx) error {
				leases, err = f.st.ClaimTx(f.ctx, tx, p)
				return err
			})
		}
		if err != nil {
			t.Fatalf("%s claim: %v", lane, err)
		}
		if len(leases) != 1 || leases[0].ID != next {
			t.Fatalf("%s claim at the deadline got %d leases %+v, want only %s (not %s, past its deadline)", lane, len(leases), leases, next, late)
		}
		f.WantState(late, stWaiting)
		f.WantEvents(late, nil, nil)
		f.clock.Set(t0)
	}
}

// Claim, Renew and Reclaim never grant a lease past the deadline: its expiry
// is now + TTL capped at deadline_at_ms.
func TestLeaseExpiryIsCappedAtTheDeadline(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.Create(executions.CreateParams{Deadline: time.UnixMilli(t0 + 10_000), RetryPolicy: executions.RetryPolicy{MaxRetries: 3}})
	l := f.ClaimOne("lane-a", time.Hour)
	if l.ExpiresAtMs != t0+10_000 {
		t.Fatalf("claimed with a TTL of an hour: expiry %d, want the deadline %d", l.ExpiresAtMs, t0+10_000)
	}
	wantExpiry := func(want int64) {
		t.Helper()
		if e := f.Get(id); e.Attempt == nil || e.Attempt.LeaseExpiresAtMs == nil || *e.Attempt.LeaseExpiresAtMs != want {
			t.Fatalf("attempt = %+v, want lease_expires_at_ms %d", e.Attempt, want)
		}
	}
	wantExpiry(t0 + 10_000)

	f.clock.Set(t0 + 2000)
	l, err := f.st.Renew(f.ctx, l, time.Second) // within the deadline: not capped
	if err != nil || l.ExpiresAtMs != t0+3000 {
		t.Fatalf("Renew for 1 s at %d = %d, %v; want %d", t0+2000, l.ExpiresAtMs, err, t0+3000)
	}
	wantExpiry(t0 + 3000)
	l, err = f.st.Renew(f.ctx, l, time.Hour)
	if err != nil || l.ExpiresAtMs != t0+10_000 {
		t.Fatalf("Renew for an hour = %d, %v; want the deadline %d", l.ExpiresAtMs, err, t0+10_000)
	}
	wantExpiry(t0 + 10_000)

	if err := f.InTx(func(tx pgx.Tx) error {
		l, err = f.st.RenewTx(f.ctx, tx, l, time.Second)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	f.clock.Set(t0 + 3000) // the lease's expiry: it has ended, Reclaim may take it
	r, err := f.st.Reclaim(f.ctx, id, executions.ClaimParams{WorkerID: "w2", LeaseTTL: time.Hour})
	if err != nil || r.ExpiresAtMs != t0+10_000 {
		t.Fatalf("Reclaim for an hour = %+v, %v; want a lease until the deadline %d", r, err, t0+10_000)
	}
	wantExpiry(t0 + 10_000)
}

// Every end of a lease after the deadline is refused with ErrLeaseExpired
// and changes nothing, in every form (plain, Tx, FinishMany, the coalesced
// batch), until the scanner expires the execution.
func TestLeaseEndsPastTheDeadlineAreRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	deadline := time.UnixMilli(t0 + 10_000)
	id := f.Create(executions.CreateParams{Deadline: deadline, RetryPolicy: executions.RetryPolicy{MaxRetries: 3}})
	l := f.ClaimOne("lane-a", time.Hour)
	f.clock.Set(t0 + 12_000) // 2 s past the deadline; no scanner ran
	until := time.UnixMilli(t0 + 60_000)
	calls := map[string]func() error{
		"Renew":    func() error { _, err := f.st.Renew(f.ctx, l, time.Minute); return err },
		"Complete": func() error { return f.st.Complete(f.ctx, l, nil) },
		"Fail":     func() error { _, err := f.st.Fail(f.ctx, l, executions.FailParams{Message: "late"}); return err },
		"Delay":    func() error { return f.st.Delay(f.ctx, l, until) },
		"Release":  func() error { return f.st.Release(f.ctx, l) },
		"FinishMany": func() error {
			outs, err := f.st.FinishMany(f.ctx, []executions.Finish{{Lease: l}})
			if err != nil {
				return err
			}
			return outs[0].Err
		},
		"RenewTx": func() error {
			return f.InTx(func(tx pgx.Tx) error { _, err := f.st.RenewTx(f.ctx, tx, l, time.Minute); return err })
		},
		"CompleteTx": func() error { return f.InTx(func(tx pgx.Tx) error { return f.st.CompleteTx(f.ctx, tx, l, nil) }) },
		"FailTx": func() error {
			return f.InTx(func(tx pgx.Tx) error { _, err := f.st.FailTx(f.ctx, tx, l, executions.FailParams{}); return err })
		},
		"DelayTx":   func() error { return f.InTx(func(tx pgx.Tx) error { return f.st.DelayTx(f.ctx, tx, l, until) }) },
		"ReleaseTx": func() error { return f.InTx(func(tx pgx.Tx) error { return f.st.ReleaseTx(f.ctx, tx, l) }) },
		"FinishManyTx": func() error {
			var outs []executions.FinishOutcome
			err := f.InTx(func(tx pgx.Tx) error {
				var err error
				outs, err = f.st.FinishManyTx(f.ctx, tx, []executions.Finish{{Lease: l, Release: true}})
				return err
			})
			if err != nil {
				return err
			}
			return outs[0].Err
		},
	}
	check := func(why string) {
		t.Helper()
		for name, call := range calls {
			err := call()
			wantErr(t, err, ff.ErrLeaseExpired)
			if !executions.IsFenced(err) || !strings.Contains(err.Error(), why) {
				t.Errorf("%s past the deadline: %v; want it fenced, saying %q", name, err, why)
			}
		}
		f.WantState(id, stActive)
		f.WantEvents(id, []string{"acquired"}, nil)
	}
	check("the execution's deadline")

	// A lease that reaches past the deadline, as a writer other than
	// ffriver may leave it, ends at the deadline all the same.
	f.Exec(`UPDATE ff_attempt SET lease_expires_at_ms = $2 WHERE execution_id = $1`, id.UUID, t0+3600_000)
	check("its deadline passed")

	if got := f.action(func(tx pgx.Tx) (actions.Outcome, error) {
		return actions.Of(f.st.Pipeline()).ExpireDeadline(f.ctx, tx, id)
	}); got != actions.Processed {
		t.Fatalf("the deadline's expiry = %q, want processed", got)
	}
	f.WantState(id, stExpired)
	wantErr(t, f.st.Complete(f.ctx, l, nil), ff.ErrStaleLease)
}

// Reclaim grants no lease past the deadline: it is refused with
// ErrNotActive, naming the deadline, from the deadline's instant on.
func TestReclaimPastTheDeadlineIsRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.Create(executions.CreateParams{Deadline: time.UnixMilli(t0 + 5000), RetryPolicy: executions.RetryPolicy{MaxRetries: 3}})
	f.ClaimOne("lane-a", time.Second)
	f.clock.Set(t0 + 5000)
	p := executions.ClaimParams{WorkerID: "w2", LeaseTTL: time.Minute}
	_, err := f.st.Reclaim(f.ctx, id, p)
	wantErr(t, err, ff.ErrNotActive)
	if !strings.Contains(err.Error(), "deadline passed at") {
		t.Errorf("Reclaim past the deadline: %v; want it to name the deadline", err)
	}
	err = f.InTx(func(tx pgx.Tx) error { _, err := f.st.ReclaimTx(f.ctx, tx, id, p); return err })
	wantErr(t, err, ff.ErrNotActive)
	f.WantState(id, stActive)
	f.WantEvents(id, []string{"acquired"}, nil)
}

// The instant a lease or a deadline ends is one rule: at
// lease_expires_at_ms the holder is refused and the attempt_timeout action
// expires the lease; at deadline_at_ms a claim gets nothing and the
// execution_deadline action expires the execution. A millisecond earlier,
// the holder succeeds and both actions do nothing.
func TestTheEndingInstantIsTheSameForTheAPIAndTheScanners(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	leased := f.Create(executions.CreateParams{RetryPolicy: executions.RetryPolicy{MaxRetries: 1}})
	l := f.ClaimOne("lane-a", time.Second)
	f.clock.Set(l.ExpiresAtMs - 1)
	if got := f.expireAttempt(leased, 0); got != actions.NoOp {
		t.Fatalf("attempt_timeout a millisecond before the expiry = %q, want no_op", got)
	}
	l, err := f.st.Renew(f.ctx, l, time.Second)
	if err != nil {
		t.Fatalf("Renew a millisecond before the expiry: %v", err)
	}
	f.clock.Set(l.ExpiresAtMs)
	_, err = f.st.Renew(f.ctx, l, time.Second)
	wantErr(t, err, ff.ErrLeaseExpired)
	if got := f.expireAttempt(leased, 0); got != actions.Processed {
		t.Fatalf("attempt_timeout at the expiry's instant = %q, want processed", got)
	}

	deadline := f.clock.NowMs() + 1000
	timed := f.Create(executions.CreateParams{Lane: "lane-d", Deadline: time.UnixMilli(deadline)})
	expire := func() actions.Outcome {
		return f.action(func(tx pgx.Tx) (actions.Outcome, error) {
			return actions.Of(f.st.Pipeline()).ExpireDeadline(f.ctx, tx, timed)
		})
	}
	f.clock.Set(deadline - 1)
	if got := expire(); got != actions.NoOp {
		t.Fatalf("execution_deadline a millisecond before the deadline = %q, want no_op", got)
	}
	f.clock.Set(deadline)
	if leases, err := f.st.Claim(f.ctx, executions.ClaimParams{Lane: "lane-d", LeaseTTL: time.Second}); err != nil || len(leases) != 0 {
		t.Fatalf("Claim at the deadline's instant = %+v, %v; want nothing", leases, err)
	}
	if got := expire(); got != actions.Processed {
		t.Fatalf("execution_deadline at the deadline's instant = %q, want processed", got)
	}
	f.WantState(timed, stExpired)
}

// A lease that ends at its execution's deadline is not retried by the
// attempt_timeout action (no retry could be claimed): the execution
// expires, as the execution_deadline action would expire it, whichever of
// the two scanners comes first.
func TestAttemptTimeoutAtTheDeadlineExpiresTheExecution(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.Create(executions.CreateParams{Deadline: time.UnixMilli(t0 + 5000), RetryPolicy: executions.RetryPolicy{MaxRetries: 3}})
	l := f.ClaimOne("lane-a", time.Minute)
	f.clock.Set(l.ExpiresAtMs)
	if got := f.expireAttempt(id, 0); got != actions.Processed {
		t.Fatalf("attempt_timeout at the deadline = %q, want processed", got)
	}
	if e := f.WantState(id, stExpired); e.LastFailureMessage != "execution_deadline" || e.AttemptIndex != 0 {
		t.Errorf("expired: attempt %d, message %q; want attempt 0 not retried, execution_deadline", e.AttemptIndex, e.LastFailureMessage)
	}
	f.WantEvents(id, []string{"acquired", "expired"}, []string{"expired"})
}
