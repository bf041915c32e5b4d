package executions_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/jackc/pgx/v5"
)

// A batch of finishes commits each fenced item with its own outbox rows; the
// one whose lease was revoked fails with ErrStaleLease and writes nothing.
func TestFinishManyFencesEachItem(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	done := f.Create(executions.CreateParams{})
	retried := f.Create(executions.CreateParams{RetryPolicy: executions.RetryPolicy{MaxRetries: 1}})
	failed := f.Create(executions.CreateParams{})
	stale := f.Create(executions.CreateParams{})
	leases, err := f.st.Claim(f.ctx, executions.ClaimParams{Lane: "lane-a", WorkerID: "w", LeaseTTL: time.Minute, Max: 4})
	if err != nil || len(leases) != 4 {
		t.Fatalf("Claim = %d leases, %v", len(leases), err)
	}
	byID := map[ff.ExecutionID]executions.Lease{}
	for _, l := range leases {
		byID[l.ID] = l
	}
	if err := f.st.Revoke(f.ctx, stale, "operator"); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(time.Second)
	outs, err := f.st.FinishMany(f.ctx, []executions.Finish{
		{Lease: byID[done], Result: []byte("ok")},
		{Lease: byID[retried], Fail: &executions.FailParams{Message: "again"}},
		{Lease: byID[stale], Result: []byte("late")},
		{Lease: byID[failed], Fail: &executions.FailParams{Message: "no", Permanent: true}},
	})
	if err != nil {
		t.Fatalf("FinishMany: %v", err)
	}
	for i, want := range []error{nil, nil, ff.ErrStaleLease, nil} {
		if got := outs[i].Err; (want == nil) != (got == nil) || (want != nil && !errors.Is(got, want)) {
			t.Errorf("item %d: err = %v, want %v", i, got, want)
		}
	}
	if !outs[1].Fail.Retried || outs[1].Fail.NextAttempt != 1 || outs[3].Fail.Retried {
		t.Errorf("fail results = %+v, %+v", outs[1].Fail, outs[3].Fail)
	}
	if e := f.WantState(done, stDone); string(e.Result) != "ok" || *e.TerminalAtMs != t0+1000 {
		t.Errorf("completed: result %q at %d", e.Result, *e.TerminalAtMs)
	}
	f.WantState(retried, stRetry)
	f.WantState(failed, stFailed)
	f.WantEvents(done, []string{"acquired", "revoked"}, []string{"success"})
	f.WantEvents(retried, []string{"acquired", "revoked"}, nil)
	f.WantEvents(failed, []string{"acquired", "revoked"}, []string{"failed"})
	// The stale item: the operator's revoke only, no completion.
	f.WantEvents(stale, []string{"acquired", "revoked"}, nil)
	if e := f.Get(stale); e.PublicState == "completed" || string(e.Result) == "late" {
		t.Errorf("the stale lease completed its execution: %+v", e)
	}
}

// The same execution twice in one batch: the second finish is fenced
// against what the first left.
func TestFinishManySameExecutionTwice(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.Create(executions.CreateParams{})
	l := f.ClaimOne("lane-a", time.Minute)
	outs, err := f.st.FinishMany(f.ctx, []executions.Finish{{Lease: l, Result: []byte("1")}, {Lease: l, Result: []byte("2")}})
	if err != nil {
		t.Fatal(err)
	}
	if outs[0].Err != nil || !errors.Is(outs[1].Err, ff.ErrNotActive) {
		t.Fatalf("outcomes = %v, %v; want nil, ErrNotActive", outs[0].Err, outs[1].Err)
	}
	if e := f.WantState(id, stDone); string(e.Result) != "1" {
		t.Errorf("result = %q, want the first item's", e.Result)
	}
	f.WantEvents(id, []string{"acquired", "revoked"}, []string{"success"})
}

// Bad items fail alone: an id outside the schema's partitions, an unknown
// execution, a message that is not UTF-8.
func TestFinishManyBadItemsFailAlone(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.Create(executions.CreateParams{})
	l := f.ClaimOne("lane-a", time.Minute)
	unknown := l
	unknown.ID.UUID[0] ^= 0xff
	outside := l
	outside.ID.Partition = 30000
	outs, err := f.st.FinishMany(f.ctx, []executions.Finish{
		{Lease: unknown}, {Lease: outside}, {Lease: l, Fail: &executions.FailParams{Message: "\xff"}}, {Lease: l},
	})
	if err != nil {
		t.Fatal(err)
	}
	wantErr(t, outs[0].Err, ff.ErrNotFound)
	wantErr(t, outs[1].Err, ff.ErrValidation)
	wantErr(t, outs[2].Err, ff.ErrValidation)
	if outs[3].Err != nil {
		t.Fatalf("the good item: %v", outs[3].Err)
	}
	f.WantState(id, stDone)
}

// A batch that waits behind a transaction handing one of its executions to
// another worker fences that item against the hand-over (as Complete does,
// TestHandOverRevokeClaimThenStaleComplete) and commits the rest.
func TestFinishManyWaitsAndFencesAfterHandOver(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	a := f.Create(executions.CreateParams{Lane: "lane-b"})
	b := f.Create(executions.CreateParams{})
	la := f.ClaimOne("lane-b", time.Minute)
	lb := f.ClaimOne("lane-a", time.Minute)
	h := f.hold(func(tx pgx.Tx) error {
		if err := f.st.RevokeTx(f.ctx, tx, b, "hand over"); err != nil {
			return err
		}
		leases, err := f.st.ClaimTx(f.ctx, tx, executions.ClaimParams{Lane: "lane-a", WorkerID: "w2", LeaseTTL: time.Minute})
		if err == nil && len(leases) != 1 {
			err = errors.New("want one lease")
		}
		return err
	})
	var outs []executions.FinishOutcome
	done := f.waiting(1, func() error {
		var err error
		outs, err = f.st.FinishMany(f.ctx, []executions.Finish{{Lease: la, Result: []byte("a")}, {Lease: lb, Result: []byte("b")}})
		return err
	})
	h.commit()
	if err := f.result(done); err != nil {
		t.Fatal(err)
	}
	if outs[0].Err != nil || !errors.Is(outs[1].Err, ff.ErrStaleLease) {
		t.Fatalf("outcomes = %v, %v; want nil, ErrStaleLease", outs[0].Err, outs[1].Err)
	}
	f.WantState(a, stDone)
	f.WantState(b, stActive)
	f.wantLeaseEvents(b, "acquired@1", "revoked@1", "acquired@3")
}

// Completes of many executions outside flows are written set-based: every
// row and event as a Complete of each writes it (namespace and instance tag
// copied onto the events, results kept, nil results NULL).
func TestFinishManyCompletesWriteWhatCompleteWrites(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for i := range 3 {
		f.Create(executions.CreateParams{Namespace: "ns-" + string(rune('a'+i)),
			Tags: map[string]string{"cairn.instance_id": "i-" + string(rune('a'+i))}})
	}
	leases, err := f.st.Claim(f.ctx, executions.ClaimParams{Lane: "lane-a", WorkerID: "w", WorkerInstanceID: "w-1", LeaseTTL: time.Minute, Max: 3})
	if err != nil || len(leases) != 3 {
		t.Fatalf("Claim = %d, %v", len(leases), err)
	}
	f.clock.Advance(time.Second)
	items := make([]executions.Finish, 3)
	for i, l := range leases {
		items[i] = executions.Finish{Lease: l, Result: []byte(l.ID.String())}
	}
	items[2].Result = nil
	outs, err := f.st.FinishMany(f.ctx, items)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range leases {
		if outs[i].Err != nil {
			t.Fatalf("item %d: %v", i, outs[i].Err)
		}
		e := f.WantState(l.ID, stDone)
		if want := items[i].Result; string(e.Result) != string(want) || (want == nil) != (e.Result == nil) {
			t.Errorf("%s: result %q, want %q", l.ID, e.Result, want)
		}
		if *e.TerminalAtMs != t0+1000 || *e.Attempt.Outcome != "success" || e.Attempt.LeaseExpiresAtMs != nil || e.Attempt.Epoch != 1 {
			t.Errorf("%s: terminal %d, attempt %+v", l.ID, *e.TerminalAtMs, e.Attempt)
		}
		evs := f.LeaseEvents(l.ID)
		if len(evs) != 2 || evs[1].Type != "revoked" || evs[1].Epoch != 1 || evs[1].Attempt != 0 || evs[1].AtMs != t0+1000 ||
			evs[1].Namespace != evs[0].Namespace || evs[1].InstanceTag != evs[0].InstanceTag || evs[1].Namespace == "" || evs[1].InstanceTag == "" {
			t.Errorf("%s: lease events %+v", l.ID, evs)
		}
		var ns, tag string
		var flow *[16]byte
		var at int64
		if err := f.db.Pool.QueryRow(f.ctx, `SELECT namespace, instance_tag, flow_id, occurred_at_ms FROM ff_completion_event
			WHERE partition_key = $1 AND execution_id = $2 AND outcome = 'success'`, l.ID.Partition, l.ID.UUID).Scan(&ns, &tag, &flow, &at); err != nil {
			t.Fatalf("%s: completion event: %v", l.ID, err)
		}
		if ns != evs[0].Namespace || tag != evs[0].InstanceTag || flow != nil || at != t0+1000 {
			t.Errorf("%s: completion event ns %q tag %q flow %v at %d", l.ID, ns, tag, flow, at)
		}
	}
}

// Completes of executions another transaction holds do not hold up the
// Completes of other executions: before, two of them filled both batches
// the Store runs at once, and every later Complete waited for the holder.
// They wait in the Store's queue, handed back by each batch, and complete
// once the holder commits.
func TestCompleteBehindALockDoesNotHoldUpOthers(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	for range 3 {
		f.Create(executions.CreateParams{})
	}
	leases, err := f.st.Claim(f.ctx, executions.ClaimParams{Lane: "lane-a", WorkerID: "w", LeaseTTL: time.Minute, Max: 3})
	if err != nil || len(leases) != 3 {
		t.Fatalf("Claim = %d, %v", len(leases), err)
	}
	held, free := leases[:2], leases[2]
	h := f.hold(func(tx pgx.Tx) error {
		for _, l := range held {
			if _, err := tx.Exec(f.ctx, `SELECT FROM ff_exec_core WHERE partition_key = $1 AND execution_id = $2 FOR UPDATE`,
				l.ID.Partition, l.ID.UUID); err != nil {
				return err
			}
		}
		return nil
	})
	first := f.retrying(1, func() error { return f.st.Complete(f.ctx, held[0], nil) })
	second := f.retrying(2, func() error { return f.st.Complete(f.ctx, held[1], nil) })
	done := make(chan error, 1)
	go func() { done <- f.st.Complete(f.ctx, free, []byte("free")) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the free execution's Complete: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the free execution's Complete waited for a transaction that holds other executions")
	}
	h.commit()
	for _, c := range []<-chan error{first, second} {
		if err := f.result(c); err != nil {
			t.Fatalf("a held execution's Complete after the holder committed: %v", err)
		}
	}
	for _, l := range leases {
		f.WantState(l.ID, stDone)
	}
}

// A guard that refuses a Complete's writes (a row changed without its lock
// being taken: here a trigger that drops the execution's update) rolls back
// every write of the batch: the attempt stays open under its lease and no
// event is written. The guards are checked in Go, from row counts, so a
// coalesced finish sends COMMIT only after they passed.
func TestCompleteRefusedByAGuardWritesNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.Create(executions.CreateParams{})
	l := f.ClaimOne("lane-a", time.Minute)
	if _, err := f.db.Pool.Exec(f.ctx, `
		CREATE FUNCTION drop_core_updates() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
		CREATE TRIGGER drop_core_updates_trg BEFORE UPDATE ON ff_exec_core FOR EACH ROW EXECUTE FUNCTION drop_core_updates();`); err != nil {
		t.Fatal(err)
	}
	err := f.st.Complete(f.ctx, l, []byte(`"r"`))
	if err == nil || !strings.Contains(err.Error(), "no longer hold what was read under their locks") {
		t.Fatalf("Complete with the execution's update dropped = %v; want the guard's error", err)
	}
	f.WantState(id, stActive)
	e := f.Get(id)
	if e.Attempt == nil || e.Attempt.LeaseExpiresAtMs == nil || e.Attempt.Outcome != nil {
		t.Fatalf("attempt after the refused Complete = %+v; want it open under its lease", e.Attempt)
	}
	f.WantEvents(id, []string{"acquired"}, nil)
}
