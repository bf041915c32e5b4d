package executions_test

import (
	"slices"
	"testing"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/actions"
	"github.com/jackc/pgx/v5"
)

// One call over many executions gives each the outcome the one-execution
// action gives it: due ones processed with their events, a not-yet-due one
// no_op, a missing one orphaned, one locked by another transaction
// skipped_locked (and left as it was), an execution named twice applied once.
func TestExpireAttemptManyMixedGroup(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	retry := f.Create(executions.CreateParams{RetryPolicy: executions.RetryPolicy{MaxRetries: 1}, Namespace: "n"})
	f.ClaimOne("lane-a", time.Second)
	final := f.Create(executions.CreateParams{Namespace: "n"})
	f.ClaimOne("lane-a", time.Second)
	lockedElsewhere := f.Create(executions.CreateParams{})
	f.ClaimOne("lane-a", time.Second)
	f.clock.Advance(2 * time.Second)
	notDue := f.Create(executions.CreateParams{})
	f.ClaimOne("lane-a", time.Hour)
	missing := ff.NewExecutionID(retry.Partition)

	blocker, err := f.db.Pool.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Rollback(f.ctx)
	if _, err := blocker.Exec(f.ctx, `SELECT 1 FROM ff_exec_core WHERE execution_id = $1 FOR UPDATE`, lockedElsewhere.UUID); err != nil {
		t.Fatal(err)
	}

	refs := []actions.AttemptRef{
		{ID: final, AttemptIndex: 0},
		{ID: retry, AttemptIndex: 0},
		{ID: missing, AttemptIndex: 0},
		{ID: lockedElsewhere, AttemptIndex: 0},
		{ID: retry, AttemptIndex: 0}, // a duplicate job: applied after the first, finds it done
		{ID: notDue, AttemptIndex: 0},
		{ID: retry, AttemptIndex: 1}, // the retry's next attempt was never leased: nothing to expire
	}
	var got []actions.Outcome
	if err := f.InTx(func(tx pgx.Tx) error {
		var err error
		got, err = actions.Of(f.st.Pipeline()).ExpireAttemptMany(f.ctx, tx, refs)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	want := []actions.Outcome{actions.Processed, actions.Processed, actions.Orphaned, actions.SkippedLocked,
		actions.NoOp, actions.NoOp, actions.NoOp}
	if !slices.Equal(got, want) {
		t.Fatalf("outcomes = %v, want %v", got, want)
	}
	f.WantState(final, stExpired)
	f.WantEvents(final, []string{"acquired", "expired"}, []string{"expired"})
	f.WantState(retry, stRetry)
	f.WantEvents(retry, []string{"acquired", "expired"}, nil)
	f.WantState(lockedElsewhere, stActive)
	f.WantEvents(lockedElsewhere, []string{"acquired"}, nil)
	f.WantState(notDue, stActive)
	if err := blocker.Rollback(f.ctx); err != nil {
		t.Fatal(err)
	}
	if got := f.expireAttempt(lockedElsewhere, 0); got != actions.Processed {
		t.Fatalf("expire after the lock is gone = %q", got)
	}
}

// A bad id fails the whole call with a validation error naming it, and
// nothing of the call is written.
func TestGroupActionRejectsBadID(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.Create(executions.CreateParams{DelayUntil: time.UnixMilli(t0 + 1000)})
	f.clock.Advance(time.Second)
	bad := ff.ExecutionID{Partition: id.Partition}
	err := f.InTx(func(tx pgx.Tx) error {
		_, err := actions.Of(f.st.Pipeline()).PromoteDelayedMany(f.ctx, tx, []ff.ExecutionID{id, bad})
		return err
	})
	wantErr(t, err, ff.ErrValidation)
	promote(t, f, id, actions.Processed)
}

// Deadlines of several executions, leased or not, expire in one call.
func TestExpireDeadlineMany(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	deadline := time.UnixMilli(t0 + 1000)
	leased := f.Create(executions.CreateParams{Deadline: deadline})
	f.ClaimOne("lane-a", time.Hour)
	waiting := f.Create(executions.CreateParams{Deadline: deadline})
	later := f.Create(executions.CreateParams{Deadline: time.UnixMilli(t0 + 60_000)})
	f.clock.Advance(2 * time.Second)
	var got []actions.Outcome
	if err := f.InTx(func(tx pgx.Tx) error {
		var err error
		got, err = actions.Of(f.st.Pipeline()).ExpireDeadlineMany(f.ctx, tx, []ff.ExecutionID{leased, waiting, later})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if want := []actions.Outcome{actions.Processed, actions.Processed, actions.NoOp}; !slices.Equal(got, want) {
		t.Fatalf("outcomes = %v, want %v", got, want)
	}
	f.WantState(leased, stExpired)
	f.WantEvents(leased, []string{"acquired", "expired"}, []string{"expired"})
	f.WantState(waiting, stExpired)
	f.WantEvents(waiting, nil, []string{"expired"})
	f.WantState(later, stWaiting)
}

// Events written under an execution's lock copy its namespace, instance tag
// and (completion events) flow from the locked row, as the outbox's own
// lookup does for other producers.
func TestEventsCarryTheLockedRowsSource(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	flow := f.Flow()
	id := f.Create(executions.CreateParams{FlowID: flow, Namespace: "ns-1", Tags: map[string]string{"cairn.instance_id": "inst-1", "other": "x"}})
	plain := f.Create(executions.CreateParams{Lane: "lane-b"})
	if err := f.st.Complete(f.ctx, f.ClaimOne("lane-a", time.Minute), nil); err != nil {
		t.Fatal(err)
	}
	if err := f.st.Complete(f.ctx, f.ClaimOne("lane-b", time.Minute), nil); err != nil {
		t.Fatal(err)
	}
	type src struct {
		ns, tag *string
		flow    *string
	}
	read := func(q string, eid ff.ExecutionID) []src {
		rows, err := f.db.Pool.Query(f.ctx, q, eid.UUID)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []src
		for rows.Next() {
			var s src
			if err := rows.Scan(&s.ns, &s.tag, &s.flow); err != nil {
				t.Fatal(err)
			}
			out = append(out, s)
		}
		return out
	}
	const leaseQ = `SELECT namespace, instance_tag, NULL::text FROM ff_lease_event WHERE execution_id = $1::text ORDER BY event_id`
	const completionQ = `SELECT namespace, instance_tag, flow_id::text FROM ff_completion_event WHERE execution_id = $1`
	lease, completion := read(leaseQ, id), read(completionQ, id)
	if len(lease) != 2 || len(completion) != 1 {
		t.Fatalf("%d lease and %d completion events, want 2 and 1", len(lease), len(completion))
	}
	for _, s := range append(lease, completion...) {
		if s.ns == nil || *s.ns != "ns-1" || s.tag == nil || *s.tag != "inst-1" {
			t.Errorf("event of %s: namespace %v tag %v, want ns-1 and inst-1", id, s.ns, s.tag)
		}
	}
	if c := completion[0]; c.flow == nil || *c.flow != flow.String() {
		t.Errorf("completion event flow %v, want %s", c.flow, flow)
	}
	for _, s := range append(read(leaseQ, plain), read(completionQ, plain)...) {
		if s.ns != nil || s.tag != nil || s.flow != nil {
			t.Errorf("event of a solo execution without namespace or tag: %+v", s)
		}
	}
}
