package executions_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/jackc/pgx/v5"
)

// A caller-owned transaction that rolls back leaves neither the transition
// nor its events.
func TestTxVariantRollsBackWithTheCaller(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.Create(executions.CreateParams{})
	l := f.ClaimOne("lane-a", time.Minute)
	errAbort := errors.New("caller aborts")
	err := f.InTx(func(tx pgx.Tx) error {
		if err := f.st.CompleteTx(f.ctx, tx, l, []byte("r")); err != nil {
			return err
		}
		return errAbort
	})
	if !errors.Is(err, errAbort) {
		t.Fatalf("err = %v", err)
	}
	f.WantState(id, stActive)
	f.WantEvents(id, []string{"acquired"}, nil)
	// The same lease still completes afterwards.
	if err := f.st.Complete(f.ctx, l, nil); err != nil {
		t.Fatal(err)
	}
	f.WantEvents(id, []string{"acquired", "revoked"}, []string{"success"})
}

// A failure in the middle of an operation (here: the completion event's
// INSERT is made to fail) leaves nothing behind: no state change, no lease
// event, no attempt change.
func TestMidOperationFailureLeavesNothingBehind(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.Create(executions.CreateParams{})
	l := f.ClaimOne("lane-a", time.Minute)
	if _, err := f.db.Pool.Exec(f.ctx, `
		CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'injected failure'; END $$;
		CREATE TRIGGER boom BEFORE INSERT ON ff_completion_event FOR EACH ROW EXECUTE FUNCTION boom();`); err != nil {
		t.Fatal(err)
	}
	err := f.st.Complete(f.ctx, l, []byte("r"))
	if err == nil || !strings.Contains(err.Error(), "injected failure") {
		t.Fatalf("Complete err = %v, want the injected failure", err)
	}
	e := f.WantState(id, stActive)
	if e.Attempt.Outcome != nil || e.Attempt.LeaseExpiresAtMs == nil || e.Result != nil {
		t.Fatalf("attempt changed: %+v", e.Attempt)
	}
	f.WantEvents(id, []string{"acquired"}, nil)
	// Cancel (lease fenced + two events) is just as atomic.
	if err := f.st.Cancel(f.ctx, id, executions.CancelParams{}); err == nil {
		t.Fatal("Cancel succeeded despite the failing completion insert")
	}
	f.WantState(id, stActive)
	if f.Get(id).Attempt.Epoch != 1 {
		t.Fatal("the epoch moved although Cancel failed")
	}
	f.WantEvents(id, []string{"acquired"}, nil)
}

// Rows written by plain SQL, the way upstream engines and operators write
// them, work with every operation.
func TestCompatibilityInserts(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	u := "8a3c9d5e-0f1b-4c2d-9e8f-7a6b5c4d3e2f"
	part := f.st.Partitions().ForLane("legacy")
	if _, err := f.db.Pool.Exec(f.ctx, `
		INSERT INTO ff_exec_core (partition_key, execution_id, lane_id, lifecycle_phase, ownership_state,
		                          eligibility_state, public_state, attempt_state, policy, raw_fields)
		VALUES ($1, $2, 'legacy', 'runnable', 'unowned', 'eligible_now', 'waiting', 'pending_first_attempt',
		        '{"retry_policy":{"max_retries":2}}', '{"namespace":"ns-x","tags":{"cairn.instance_id":"i-9"}}')`,
		part, u); err != nil {
		t.Fatalf("plain insert: %v", err)
	}
	// A legacy writer that parks a delayed row in deadline_at_ms.
	delayed := "1b2c3d4e-5f60-4718-8293-a4b5c6d7e8f9"
	if _, err := f.db.Pool.Exec(f.ctx, `
		INSERT INTO ff_exec_core (partition_key, execution_id, lane_id, lifecycle_phase, ownership_state,
		                          eligibility_state, public_state, attempt_state, deadline_at_ms)
		VALUES ($1, $2, 'legacy', 'runnable', 'unowned', 'not_eligible_until_time', 'delayed', 'pending_first_attempt', $3)`,
		part, delayed, t0+500); err != nil {
		t.Fatalf("plain delayed insert: %v", err)
	}
	// The outbox tables accept the seed's column lists.
	if _, err := f.db.Pool.Exec(f.ctx, `
		INSERT INTO ff_lease_event (execution_id, lease_id, event_type, occurred_at_ms, partition_key, namespace, instance_tag)
		VALUES ($1, NULL, 'acquired', 1, $2, NULL, NULL)`, u, int32(part)); err != nil {
		t.Fatalf("seed lease event insert: %v", err)
	}
	if _, err := f.db.Pool.Exec(f.ctx, `
		INSERT INTO ff_completion_event (partition_key, execution_id, flow_id, outcome, namespace, instance_tag, occurred_at_ms)
		VALUES ($1, $2, NULL, 'expired', NULL, NULL, 1)`, part, u); err != nil {
		t.Fatalf("seed completion event insert: %v", err)
	}
	id := ff.MustParseExecutionID("{fp:" + strconv.Itoa(int(part)) + "}:" + u)
	l := f.ClaimOne("legacy", time.Minute)
	if l.ID != id || l.Epoch != 1 {
		t.Fatalf("claimed %+v, want %s", l, id)
	}
	ev := f.LeaseEvents(id)
	if last := ev[len(ev)-1]; last.Type != "acquired" || last.Namespace != "ns-x" || last.InstanceTag != "i-9" {
		t.Fatalf("acquired event = %+v: namespace and tag must be copied from the plain row", last)
	}
	if res, err := f.st.Fail(f.ctx, l, executions.FailParams{}); err != nil || !res.Retried {
		t.Fatalf("fail of a plain row = %+v, %v; want a retry (max_retries 2)", res, err)
	}
	d := f.Get(ff.ExecutionID{Partition: part, UUID: ff.MustParseExecutionID("{fp:0}:" + delayed).UUID})
	if d.DelayUntilMs == nil || *d.DelayUntilMs != t0+500 || d.DeadlineAtMs != nil {
		t.Fatalf("legacy delayed row: delay_until %v deadline %v; want the delay moved to delay_until_ms", d.DelayUntilMs, d.DeadlineAtMs)
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.Create(executions.CreateParams{})
	l := f.ClaimOne("lane-a", time.Minute)
	cases := []struct {
		name string
		err  error
		want error
	}{
		{"claim unknown lane", claimErr(f, executions.ClaimParams{Lane: "nope", LeaseTTL: time.Second}), ff.ErrValidation},
		{"claim negative ttl", claimErr(f, executions.ClaimParams{Lane: "lane-a", LeaseTTL: -time.Second}), ff.ErrValidation},
		{"claim empty lane", claimErr(f, executions.ClaimParams{LeaseTTL: time.Second}), ff.ErrValidation},
		{"create without lane", createErr(f, executions.CreateParams{}), ff.ErrValidation},
		{"create NUL namespace", createErr(f, executions.CreateParams{Lane: "a", Namespace: "a\x00b"}), ff.ErrValidation},
		{"create negative retries", createErr(f, executions.CreateParams{Lane: "a", RetryPolicy: executions.RetryPolicy{MaxRetries: -1}}), ff.ErrValidation},
		{"create bad backoff", createErr(f, executions.CreateParams{Lane: "a", RetryPolicy: executions.RetryPolicy{Backoff: &executions.Backoff{Kind: "linear"}}}), ff.ErrValidation},
		{"renew wrong epoch", renewErr(f, withEpoch(l, 99)), ff.ErrStaleLease},
		{"renew wrong attempt", renewErr(f, withAttempt(l, 3)), ff.ErrStaleLease},
		{"id outside partitions", f.st.Cancel(f.ctx, ff.ExecutionID{Partition: 9999, UUID: id.UUID}, executions.CancelParams{}), ff.ErrValidation},
		{"missing execution", f.st.Revoke(f.ctx, ff.NewExecutionID(1), ""), ff.ErrNotFound},
		{"delay without time", f.st.Delay(f.ctx, l, time.Time{}), ff.ErrValidation},
	}
	for _, c := range cases {
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: err = %v, want %v", c.name, c.err, c.want)
		}
		if c.err != nil && c.err.Error() == "" {
			t.Errorf("%s: empty message", c.name)
		}
	}
	var verr *ff.ValidationError
	if err := claimErr(f, executions.ClaimParams{Lane: "nope", LeaseTTL: time.Second}); !errors.As(err, &verr) || verr.Field != "lane" || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("unknown lane error = %v; want it to name the lane", err)
	}
	f.WantState(id, stActive)
	f.WantEvents(id, []string{"acquired"}, nil)
}

func claimErr(f *fixture, p executions.ClaimParams) error {
	_, err := f.st.Claim(f.ctx, p)
	return err
}

func createErr(f *fixture, p executions.CreateParams) error {
	_, err := f.st.Create(f.ctx, p)
	return err
}

func renewErr(f *fixture, l executions.Lease) error {
	_, err := f.st.Renew(f.ctx, l, time.Second)
	return err
}

func withEpoch(l executions.Lease, e int64) executions.Lease   { l.Epoch = e; return l }
func withAttempt(l executions.Lease, a int32) executions.Lease { l.AttemptIndex = a; return l }
