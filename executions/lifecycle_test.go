package executions_test

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/internal/actions"
	"github.com/jackc/pgx/v5"
)

var (
	stWaiting  = state{"runnable", "unowned", "eligible_now", "pending_first_attempt", "waiting"}
	stActive   = state{"active", "leased", "not_applicable", "running_attempt", "active"}
	stRetry    = state{"runnable", "unowned", "eligible_now", "pending_retry_attempt", "waiting"}
	stDone     = state{"terminal", "unowned", "not_applicable", "attempt_terminal", "completed"}
	stFailed   = state{"terminal", "unowned", "not_applicable", "attempt_terminal", "failed"}
	stCanceled = state{"terminal", "unowned", "not_applicable", "attempt_terminal", "cancelled"}
	stExpired  = state{"terminal", "unowned", "not_applicable", "attempt_terminal", "expired"}
)

func TestCreateSoloAndInFlow(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	solo := f.Create(executions.CreateParams{Lane: "emails", Namespace: "tenant-a", Tags: map[string]string{"cairn.instance_id": "i-1"}})
	if want := f.st.Partitions().ForLane("emails"); solo.Partition != want {
		t.Errorf("solo partition = %d, want CRC16(lane) %% 256 = %d", solo.Partition, want)
	}
	e := f.WantState(solo, stWaiting)
	if e.Namespace != "tenant-a" || e.Tags["cairn.instance_id"] != "i-1" || e.AttemptIndex != 0 || e.Attempt != nil {
		t.Errorf("created execution = %+v", e)
	}
	flow := f.Flow()
	a := f.Create(executions.CreateParams{Lane: "x", FlowID: flow})
	b := f.Create(executions.CreateParams{Lane: "y", FlowID: flow})
	if a.Partition != b.Partition || a.Partition != f.st.Partitions().ForFlow(flow) {
		t.Errorf("flow members in partitions %d and %d, want both %d", a.Partition, b.Partition, f.st.Partitions().ForFlow(flow))
	}
	f.WantEvents(solo, nil, nil)

	// Re-creating an existing id is refused and changes nothing.
	_, err := f.st.Create(f.ctx, executions.CreateParams{ID: solo.UUID, Lane: "emails"})
	wantErr(t, err, ff.ErrValidation)
}

func TestCreateDelayedThenClaimIgnoresIt(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	until := time.UnixMilli(t0 + 5000)
	id := f.Create(executions.CreateParams{DelayUntil: until})
	e := f.WantState(id, state{"runnable", "unowned", "not_eligible_until_time", "pending_first_attempt", "delayed"})
	if e.DelayUntilMs == nil || *e.DelayUntilMs != t0+5000 || e.DeadlineAtMs != nil {
		t.Errorf("delay_until_ms = %v, deadline_at_ms = %v; want %d and nil", e.DelayUntilMs, e.DeadlineAtMs, t0+5000)
	}
	leases, err := f.st.Claim(f.ctx, executions.ClaimParams{Lane: "lane-a", LeaseTTL: time.Second})
	if err != nil || len(leases) != 0 {
		t.Fatalf("Claim of a delayed execution = %v, %v; want nothing", leases, err)
	}
}

func TestClaimLeasesAndWritesAcquired(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.Create(executions.CreateParams{Namespace: "ns1", Tags: map[string]string{"cairn.instance_id": "inst-7"}, Payload: []byte("hi")})
	l := f.ClaimOne("lane-a", 30*time.Second)
	if l.ID != id || l.AttemptIndex != 0 || l.Epoch != 1 || l.ExpiresAtMs != t0+30000 || string(l.Payload) != "hi" {
		t.Fatalf("lease = %+v", l)
	}
	e := f.WantState(id, stActive)
	if e.Attempt == nil || e.Attempt.Epoch != 1 || *e.Attempt.LeaseExpiresAtMs != t0+30000 || *e.Attempt.WorkerInstanceID != "w-1" {
		t.Fatalf("attempt = %+v", e.Attempt)
	}
	if e.StartedAtMs == nil || *e.StartedAtMs != t0 {
		t.Errorf("started_at_ms = %v, want %d", e.StartedAtMs, t0)
	}
	ev := f.LeaseEvents(id)
	if len(ev) != 1 || ev[0] != (fftest.LeaseEvent{Type: "acquired", Namespace: "ns1", InstanceTag: "inst-7", Epoch: 1, Attempt: 0, AtMs: t0}) {
		t.Fatalf("lease events = %+v", ev)
	}
	f.WantEvents(id, []string{"acquired"}, nil)
}

func TestClaimOrderAcrossPartitionsAndLanes(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var ids []ff.ExecutionID
	// Flows spread executions over partitions; priority first, then age.
	for i, prio := range []int32{0, 5, 0, 5} {
		ids = append(ids, f.Create(executions.CreateParams{Lane: "q", FlowID: f.Flow(), Priority: prio}))
		f.clock.Advance(time.Duration(i+1) * time.Millisecond)
	}
	other := f.Create(executions.CreateParams{Lane: "other"})
	leases, err := f.st.Claim(f.ctx, executions.ClaimParams{Lane: "q", LeaseTTL: time.Second, Max: 10})
	if err != nil {
		t.Fatal(err)
	}
	var got []ff.ExecutionID
	for _, l := range leases {
		got = append(got, l.ID)
	}
	want := []ff.ExecutionID{ids[1], ids[3], ids[0], ids[2]}
	if !slices.Equal(got, want) {
		t.Fatalf("claim order = %v, want %v", got, want)
	}
	f.WantState(other, stWaiting)
}

func TestClaimConcurrentWorkersGetDisjointExecutions(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const n = 40
	for range n {
		f.Create(executions.CreateParams{Lane: "c", FlowID: f.Flow()})
	}
	var mu sync.Mutex
	seen := map[ff.ExecutionID]int{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				leases, err := f.st.Claim(f.ctx, executions.ClaimParams{Lane: "c", LeaseTTL: time.Minute, Max: 3})
				if err != nil {
					t.Error(err)
					return
				}
				if len(leases) == 0 {
					return
				}
				mu.Lock()
				for _, l := range leases {
					seen[l.ID]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(seen) != n {
		t.Fatalf("claimed %d distinct executions, want %d", len(seen), n)
	}
	for id, c := range seen {
		if c != 1 {
			t.Errorf("%s claimed %d times", id, c)
		}
	}
}

func TestClaimCapabilities(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.Create(executions.CreateParams{RequiredCapabilities: []string{"gpu"}})
	leases, err := f.st.Claim(f.ctx, executions.ClaimParams{Lane: "lane-a", LeaseTTL: time.Second, Capabilities: []string{"cpu"}})
	if err != nil || len(leases) != 0 {
		t.Fatalf("Claim without the capability = %v, %v", leases, err)
	}
	leases, err = f.st.Claim(f.ctx, executions.ClaimParams{Lane: "lane-a", LeaseTTL: time.Second, Capabilities: []string{"cpu", "gpu"}})
	if err != nil || len(leases) != 1 || leases[0].ID != id {
		t.Fatalf("Claim with the capability = %v, %v", leases, err)
	}
}

func TestRenew(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.Create(executions.CreateParams{})
	l := f.ClaimOne("lane-a", 10*time.Second)
	f.clock.Advance(4 * time.Second)
	l2, err := f.st.Renew(f.ctx, l, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if l2.ExpiresAtMs != t0+14000 || l2.Epoch != 1 {
		t.Errorf("renewed lease = %+v", l2)
	}
	if e := f.Get(id); *e.Attempt.LeaseExpiresAtMs != t0+14000 {
		t.Errorf("stored expiry = %d", *e.Attempt.LeaseExpiresAtMs)
	}
	bad := l
	bad.Epoch = 7
	_, err = f.st.Renew(f.ctx, bad, time.Second)
	wantErr(t, err, ff.ErrStaleLease)
	_, err = f.st.Renew(f.ctx, l, -time.Second)
	wantErr(t, err, ff.ErrValidation)
	f.clock.Advance(11 * time.Second)
	_, err = f.st.Renew(f.ctx, l2, time.Second)
	wantErr(t, err, ff.ErrLeaseExpired)
	f.WantEvents(id, []string{"acquired", "renewed"}, nil)
}

func TestComplete(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.Create(executions.CreateParams{})
	l := f.ClaimOne("lane-a", 10*time.Second)
	f.clock.Advance(time.Second)
	if err := f.st.Complete(f.ctx, l, []byte("ok")); err != nil {
		t.Fatal(err)
	}
	e := f.WantState(id, stDone)
	if string(e.Result) != "ok" || *e.TerminalAtMs != t0+1000 || *e.Attempt.Outcome != "success" || e.Attempt.LeaseExpiresAtMs != nil {
		t.Errorf("completed = %+v attempt %+v", e, e.Attempt)
	}
	f.WantEvents(id, []string{"acquired", "revoked"}, []string{"success"})
	// A second complete is refused and writes nothing.
	wantErr(t, f.st.Complete(f.ctx, l, nil), ff.ErrNotActive)
	f.WantEvents(id, []string{"acquired", "revoked"}, []string{"success"})
}

func TestCompleteAfterExpiryIsRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.Create(executions.CreateParams{})
	l := f.ClaimOne("lane-a", time.Second)
	f.clock.Advance(2 * time.Second)
	wantErr(t, f.st.Complete(f.ctx, l, nil), ff.ErrLeaseExpired)
	f.WantState(id, stActive)
	f.WantEvents(id, []string{"acquired"}, nil)
}

func TestFailRetriesThenGoesTerminal(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.Create(executions.CreateParams{RetryPolicy: executions.RetryPolicy{MaxRetries: 1}})
	l := f.ClaimOne("lane-a", time.Minute)
	res, err := f.st.Fail(f.ctx, l, executions.FailParams{Message: "boom"})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Retried || res.NextAttempt != 1 || res.DelayUntilMs != 0 {
		t.Errorf("first fail = %+v", res)
	}
	e := f.WantState(id, stRetry)
	if e.AttemptIndex != 1 || e.LastFailureMessage != "boom" {
		t.Errorf("after retry: attempt_index %d, message %q", e.AttemptIndex, e.LastFailureMessage)
	}
	f.WantEvents(id, []string{"acquired", "revoked"}, nil)

	l2 := f.ClaimOne("lane-a", time.Minute)
	if l2.AttemptIndex != 1 || l2.Epoch != 2 {
		t.Errorf("second lease = attempt %d epoch %d, want 1 and 2", l2.AttemptIndex, l2.Epoch)
	}
	// The first attempt's lease can no longer act.
	wantErr(t, f.st.Complete(f.ctx, l, nil), ff.ErrStaleLease)
	res, err = f.st.Fail(f.ctx, l2, executions.FailParams{Message: "boom again"})
	if err != nil || res.Retried {
		t.Fatalf("second fail = %+v, %v; want terminal", res, err)
	}
	f.WantState(id, stFailed)
	f.WantEvents(id, []string{"acquired", "revoked", "acquired", "revoked"}, []string{"failed"})
}

func TestFailWithBackoffDelaysTheRetry(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	rp := executions.RetryPolicy{MaxRetries: 3, Backoff: &executions.Backoff{Kind: executions.BackoffExponential, InitialMs: 1000, MaxMs: 3000}}
	id := f.Create(executions.CreateParams{RetryPolicy: rp})
	want := []int64{1000, 2000, 3000}
	for i, d := range want {
		l := f.ClaimOne("lane-a", time.Minute)
		res, err := f.st.Fail(f.ctx, l, executions.FailParams{})
		if err != nil {
			t.Fatal(err)
		}
		now := f.st.NowMs()
		if res.DelayUntilMs != now+d {
			t.Fatalf("retry %d delayed until %d, want now+%d", i+1, res.DelayUntilMs, d)
		}
		e := f.WantState(id, state{"runnable", "unowned", "not_eligible_until_time", "pending_retry_attempt", "delayed"})
		if *e.DelayUntilMs != now+d || *e.BlockingReason != "waiting_for_retry_backoff" {
			t.Fatalf("delayed retry = %+v", e)
		}
		// Promote it as the delayed_promoter scanner would once due.
		f.clock.Advance(time.Duration(d) * time.Millisecond)
		promote(t, f, id, actions.Processed)
	}
}

func TestFailPermanentSkipsRetries(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.Create(executions.CreateParams{RetryPolicy: executions.RetryPolicy{MaxRetries: 5}})
	l := f.ClaimOne("lane-a", time.Minute)
	if res, err := f.st.Fail(f.ctx, l, executions.FailParams{Permanent: true}); err != nil || res.Retried {
		t.Fatalf("permanent fail = %+v, %v", res, err)
	}
	f.WantState(id, stFailed)
	f.WantEvents(id, []string{"acquired", "revoked"}, []string{"failed"})
}

func TestDelayReleasesWithoutConsumingAnAttempt(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.Create(executions.CreateParams{})
	l := f.ClaimOne("lane-a", time.Minute)
	if err := f.st.Delay(f.ctx, l, time.UnixMilli(t0+500)); err != nil {
		t.Fatal(err)
	}
	e := f.WantState(id, state{"runnable", "unowned", "not_eligible_until_time", "attempt_interrupted", "delayed"})
	if *e.DelayUntilMs != t0+500 || e.AttemptIndex != 0 {
		t.Fatalf("delayed = %+v", e)
	}
	wantErr(t, f.st.Complete(f.ctx, l, nil), ff.ErrNotActive)
	f.clock.Advance(time.Second)
	promote(t, f, id, actions.Processed)
	l2 := f.ClaimOne("lane-a", time.Minute)
	if l2.AttemptIndex != 0 || l2.Epoch != 2 {
		t.Fatalf("re-lease after delay = attempt %d epoch %d, want 0 and 2", l2.AttemptIndex, l2.Epoch)
	}
	f.WantEvents(id, []string{"acquired", "revoked", "acquired"}, nil)
}

func TestReleaseGivesBackWithoutConsumingAnAttempt(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.Create(executions.CreateParams{})
	l := f.ClaimOne("lane-a", time.Minute)
	if err := f.st.Release(f.ctx, l); err != nil {
		t.Fatal(err)
	}
	e := f.WantState(id, state{"runnable", "unowned", "eligible_now", "attempt_interrupted", "waiting"})
	if e.AttemptIndex != 0 || e.Attempt.LeaseExpiresAtMs != nil {
		t.Fatalf("released = %+v attempt %+v", e, e.Attempt)
	}
	wantErr(t, f.st.Release(f.ctx, l), ff.ErrNotActive)
	wantErr(t, f.st.Complete(f.ctx, l, nil), ff.ErrNotActive)
	// Claimable at once, as the same attempt under the next epoch.
	l2 := f.ClaimOne("lane-a", time.Minute)
	if l2.AttemptIndex != 0 || l2.Epoch != 2 {
		t.Fatalf("re-lease after release = attempt %d epoch %d, want 0 and 2", l2.AttemptIndex, l2.Epoch)
	}
	wantErr(t, f.st.Complete(f.ctx, l, nil), ff.ErrStaleLease)
	if err := f.st.Complete(f.ctx, l2, nil); err != nil {
		t.Fatal(err)
	}
	f.WantEvents(id, []string{"acquired", "revoked", "acquired", "revoked"}, []string{"success"})
}

func TestCancel(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	leased := f.Create(executions.CreateParams{})
	l := f.ClaimOne("lane-a", time.Minute)
	waiting := f.Create(executions.CreateParams{})

	if err := f.st.Cancel(f.ctx, leased, executions.CancelParams{Reason: "user asked"}); err != nil {
		t.Fatal(err)
	}
	e := f.WantState(leased, stCanceled)
	if *e.CancellationReason != "user asked" || *e.CancelledBy != "operator" || e.Attempt.Epoch != 2 || e.Attempt.LeaseExpiresAtMs != nil {
		t.Fatalf("cancelled = %+v attempt %+v", e, e.Attempt)
	}
	f.WantEvents(leased, []string{"acquired", "revoked"}, []string{"cancelled"})
	// The worker is fenced out.
	_, err := f.st.Renew(f.ctx, l, time.Minute)
	wantErr(t, err, ff.ErrStaleLease)
	wantErr(t, f.st.Complete(f.ctx, l, nil), ff.ErrStaleLease)

	if err := f.st.Cancel(f.ctx, waiting, executions.CancelParams{}); err != nil {
		t.Fatal(err)
	}
	f.WantState(waiting, stCanceled)
	f.WantEvents(waiting, nil, []string{"cancelled"})

	wantErr(t, f.st.Cancel(f.ctx, waiting, executions.CancelParams{}), ff.ErrNotActive)
	f.WantEvents(waiting, nil, []string{"cancelled"})
	wantErr(t, f.st.Cancel(f.ctx, ff.NewExecutionID(3), executions.CancelParams{}), ff.ErrNotFound)
}

func TestRevoke(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.Create(executions.CreateParams{RetryPolicy: executions.RetryPolicy{MaxRetries: 0}})
	l := f.ClaimOne("lane-a", time.Minute)
	if err := f.st.Revoke(f.ctx, id, "drain node"); err != nil {
		t.Fatal(err)
	}
	e := f.WantState(id, state{"runnable", "unowned", "eligible_now", "attempt_interrupted", "waiting"})
	if e.AttemptIndex != 0 || e.Attempt.Epoch != 2 {
		t.Fatalf("revoked: attempt %d epoch %d", e.AttemptIndex, e.Attempt.Epoch)
	}
	_, err := f.st.Renew(f.ctx, l, time.Minute)
	wantErr(t, err, ff.ErrStaleLease)
	wantErr(t, f.st.Revoke(f.ctx, id, ""), ff.ErrNotActive)
	l2 := f.ClaimOne("lane-a", time.Minute)
	if l2.AttemptIndex != 0 || l2.Epoch != 3 {
		t.Fatalf("re-lease after revoke = attempt %d epoch %d, want 0 and 3", l2.AttemptIndex, l2.Epoch)
	}
	f.WantEvents(id, []string{"acquired", "revoked", "acquired"}, nil)
	// Each lease event carries the epoch of the lease it is about.
	if ev := f.LeaseEvents(id); ev[0].Epoch != 1 || ev[1].Epoch != 1 || ev[2].Epoch != 3 {
		t.Fatalf("event epochs = %d, %d, %d; want 1, 1, 3", ev[0].Epoch, ev[1].Epoch, ev[2].Epoch)
	}
}

func TestReclaim(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.Create(executions.CreateParams{RetryPolicy: executions.RetryPolicy{MaxRetries: 1}})
	l := f.ClaimOne("lane-a", time.Second)
	p := executions.ClaimParams{WorkerID: "w2", WorkerInstanceID: "w2-1", LeaseTTL: time.Minute}
	_, err := f.st.Reclaim(f.ctx, id, p)
	wantErr(t, err, ff.ErrLeaseHeld)

	f.clock.Advance(2 * time.Second)
	l2, err := f.st.Reclaim(f.ctx, id, p)
	if err != nil {
		t.Fatal(err)
	}
	if l2.AttemptIndex != 1 || l2.Epoch != 2 || l2.WorkerInstanceID != "w2-1" {
		t.Fatalf("reclaimed lease = %+v", l2)
	}
	e := f.WantState(id, stActive)
	if e.AttemptIndex != 1 || e.LeaseReclaimCount != 1 {
		t.Fatalf("after reclaim: %+v", e)
	}
	wantErr(t, f.st.Complete(f.ctx, l, nil), ff.ErrStaleLease)
	f.WantEvents(id, []string{"acquired", "reclaimed"}, nil)
	var outcome string
	if err := f.db.Pool.QueryRow(f.ctx, `SELECT outcome FROM ff_attempt WHERE execution_id = $1 AND attempt_index = 0`, id.UUID).Scan(&outcome); err != nil || outcome != "interrupted_reclaimed" {
		t.Fatalf("old attempt outcome = %q, %v", outcome, err)
	}
	// The retry budget is spent: a second expiry cannot be reclaimed.
	f.clock.Advance(2 * time.Minute)
	_, err = f.st.Reclaim(f.ctx, id, p)
	wantErr(t, err, ff.ErrNotActive)
	if err := f.st.Complete(f.ctx, l2, nil); !errors.Is(err, ff.ErrLeaseExpired) {
		t.Fatalf("complete after the reclaimed lease expired: %v", err)
	}
}

func promote(t *testing.T, f *fixture, id ff.ExecutionID, want actions.Outcome) {
	t.Helper()
	var got actions.Outcome
	err := f.InTx(func(tx pgx.Tx) error {
		var err error
		got, err = actions.Of(f.st.Pipeline()).PromoteDelayed(f.ctx, tx, id)
		return err
	})
	if err != nil || got != want {
		t.Fatalf("PromoteDelayed = %q, %v; want %q", got, err, want)
	}
}

// A claim whose claim statement fails after its lock statement locked the
// rows (a coalesced Claim pipelines BEGIN with the lock and COMMIT with the
// claim) leaves nothing behind: no lease, no event, no connection inside a
// transaction holding the rows; the next claim takes them.
func TestClaimThatFailsMidTransactionLeavesNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.Create(executions.CreateParams{})
	if _, err := f.db.Pool.Exec(f.ctx, `
		CREATE FUNCTION refuse_attempts() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'attempts refused by the test'; END $$;
		CREATE TRIGGER refuse_attempts_trg BEFORE INSERT ON ff_attempt FOR EACH ROW EXECUTE FUNCTION refuse_attempts();`); err != nil {
		t.Fatal(err)
	}
	p := executions.ClaimParams{Lane: "lane-a", WorkerID: "w", WorkerInstanceID: "w-1", LeaseTTL: time.Minute}
	for range 3 { // more claims than one connection could serve if it stayed in a failed transaction
		if leases, err := f.st.Claim(f.ctx, p); err == nil || !strings.Contains(err.Error(), "attempts refused by the test") {
			t.Fatalf("Claim with attempts refused = %v, %v; want the trigger's error", leases, err)
		}
	}
	f.WantState(id, state{"runnable", "unowned", "eligible_now", "pending_first_attempt", "waiting"})
	f.WantEvents(id, nil, nil)
	if _, err := f.db.Pool.Exec(f.ctx, `DROP TRIGGER refuse_attempts_trg ON ff_attempt`); err != nil {
		t.Fatal(err)
	}
	if l := f.ClaimOne("lane-a", time.Minute); l.ID != id || l.Epoch != 1 {
		t.Fatalf("claim after the failures = %+v, want %s at epoch 1", l, id)
	}
	f.WantEvents(id, []string{"acquired"}, nil)
}
