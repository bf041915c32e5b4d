package executions_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/internal/actions"
	"github.com/ffriver/ffriver/internal/pipeline"
	"github.com/ffriver/ffriver/internal/upstream"
	"github.com/ffriver/ffriver/jobs"
	"github.com/ffriver/ffriver/scanners"
	"github.com/ffriver/ffriver/workers"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
)

// The rows FlowFabric's Postgres backend writes (internal/upstream, the
// statements of its operations), each checked to end where upstream would
// put it once ffriver's scanners and actions have run on it.

// upstreamExec creates an execution the upstream way in lane, runnable as
// upstream's tests seed one, and returns its id.
func (f *fixture) upstreamExec(lane string, policy []byte) ff.ExecutionID {
	f.t.Helper()
	id := ff.ExecutionID{Partition: f.st.PartitionFor(uuid.Nil, lane), UUID: uuid.New()}
	if err := upstream.Create(f.ctx, f.db.Pool, upstream.Exec{ID: upID(id), Lane: lane, Policy: policy, Runnable: true}, f.clock.NowMs()); err != nil {
		f.t.Fatalf("upstream create: %v", err)
	}
	return id
}

func upID(id ff.ExecutionID) upstream.ID { return upstream.ID{Partition: id.Partition, UUID: id.UUID} }

// scan runs one scan of scanner s over partition part and returns its
// items.
func (f *fixture) scan(s workers.Scanner, part int16) []river.JobArgs {
	f.t.Helper()
	params, err := pipeline.ParamsOf(s)
	if err != nil {
		f.t.Fatal(err)
	}
	res, err := s.Scan(f.ctx, f.db.Pool, workers.ScanRequest{Store: f.st, Partition: part, NowMs: f.clock.NowMs(), Limit: 1000, Params: params})
	if err != nil {
		f.t.Fatalf("%s: Scan: %v", s.Name(), err)
	}
	return res.Items
}

// scanned reports whether scanner s's scan of id's partition has an item
// for id.
func (f *fixture) scanned(s workers.Scanner, id ff.ExecutionID) bool {
	f.t.Helper()
	for _, it := range f.scan(s, id.Partition) {
		var got ff.ExecutionID
		switch a := it.(type) {
		case jobs.ExpireAttemptArgs:
			got = a.ID
		case jobs.PromoteDelayedArgs:
			got = a.ID
		case jobs.ExpireDeadlineArgs:
			got = a.ID
		case jobs.AdvanceArgs:
			got = a.Upstream
		}
		if got == id {
			return true
		}
	}
	return false
}

// Upstream's create without a policy writes NULL: the execution is created
// with the default policy (no retries) instead of failing on the NOT NULL
// column; one with a policy keeps it.
func TestUpstreamCreateWithAndWithoutPolicy(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	plain := f.upstreamExec("up-create", nil)
	withPolicy := f.upstreamExec("up-create", []byte(`{"priority": 0, "retry_policy": {"max_retries": 2, "backoff": {"type": "fixed", "delay_ms": 10}}}`))
	if e := f.Get(plain); e.Policy.RetryPolicy.MaxRetries != 0 || e.LifecyclePhase != ff.PhaseRunnable {
		t.Errorf("no policy: %+v in %s, want no retries", e.Policy, e.LifecyclePhase)
	}
	if e := f.Get(withPolicy); e.Policy.RetryPolicy.MaxRetries != 2 {
		t.Errorf("with policy: %+v, want 2 retries", e.Policy)
	}
	// Its create's own shape (submitted, attempt_state "pending") is taken
	// as written.
	sub := ff.ExecutionID{Partition: 3, UUID: uuid.New()}
	if err := upstream.Create(f.ctx, f.db.Pool, upstream.Exec{ID: upID(sub), Lane: "up-create"}, f.clock.NowMs()); err != nil {
		t.Fatalf("upstream create: %v", err)
	}
	f.WantState(sub, state{ff.PhaseSubmitted, ff.OwnershipUnowned, ff.EligibleNow, "pending", ff.PublicWaiting})
}

// Upstream's scheduler writes claim grants and its typed claim consumes
// them: the table exists with upstream's shape.
func TestUpstreamClaimGrant(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.upstreamExec("up-grant", nil)
	now := f.clock.NowMs()
	if err := upstream.IssueGrant(f.ctx, f.db.Pool, upID(id), "up-grant", "w", now+60_000, now); err != nil {
		t.Fatal(err)
	}
	h, err := upstream.ClaimTyped(f.ctx, f.db.Pool, upID(id), "w", 0, 30_000, now)
	if err != nil {
		t.Fatalf("typed claim: %v", err)
	}
	if h.Epoch != 1 {
		t.Errorf("epoch %d, want 1", h.Epoch)
	}
	if n := f.Count(`SELECT count(*) FROM ff_claim_grant`); n != 0 {
		t.Errorf("%d grants left, want the one consumed", n)
	}
	f.WantState(id, state{ff.PhaseActive, ff.OwnershipLeased, ff.EligibleNotApplicable, ff.AttemptRunning, ff.PublicActive})
}

// claimUp claims id the upstream way: handle-based, or typed through a
// grant (which leaves attempt_index pointing at the next attempt).
func (f *fixture) claimUp(id ff.ExecutionID, lane string, typed bool, ttl time.Duration) upstream.Handle {
	f.t.Helper()
	now := f.clock.NowMs()
	var h upstream.Handle
	var err error
	if typed {
		var next int32
		if err := f.db.Pool.QueryRow(f.ctx, `SELECT attempt_index FROM ff_exec_core WHERE partition_key = $1 AND execution_id = $2`,
			id.Partition, id.UUID).Scan(&next); err != nil {
			f.t.Fatal(err)
		}
		if err := upstream.IssueGrant(f.ctx, f.db.Pool, upID(id), lane, "w", now+60_000, now); err != nil {
			f.t.Fatal(err)
		}
		h, err = upstream.ClaimTyped(f.ctx, f.db.Pool, upID(id), "w", next, ttl.Milliseconds(), now)
	} else {
		h, err = upstream.Claim(f.ctx, f.db.Pool, id.Partition, lane, "w", ttl.Milliseconds(), now)
	}
	if err != nil {
		f.t.Fatalf("upstream claim (typed %v): %v", typed, err)
	}
	if h.ID.UUID != id.UUID {
		f.t.Fatalf("upstream claim took %s, want %s", h.ID.UUID, id.UUID)
	}
	return h
}

// apply runs fn in a transaction and fails the test on an error.
func (f *fixture) apply(what string, fn func(tx pgx.Tx) error) {
	f.t.Helper()
	if err := f.InTx(fn); err != nil {
		f.t.Fatalf("%s: %v", what, err)
	}
}

// A delay written the upstream way — the handle-based delay's due time in
// deadline_at_ms, a typed retry's only in raw_fields.delay_until — is
// promoted when it comes due and never taken for the execution's deadline,
// which stays where it was.
func TestUpstreamDelaysArePromotedNotExpired(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	now := f.clock.NowMs()
	deadline := now + time.Hour.Milliseconds()
	mk := func(lane string) ff.ExecutionID {
		id := ff.ExecutionID{Partition: f.st.PartitionFor(uuid.Nil, lane), UUID: uuid.New()}
		if err := upstream.Create(f.ctx, f.db.Pool, upstream.Exec{ID: upID(id), Lane: lane, Runnable: true, DeadlineAtMs: &deadline,
			Policy: []byte(`{"retry_policy": {"max_retries": 1}}`)}, now); err != nil {
			t.Fatal(err)
		}
		return id
	}
	handle, typed := mk("up-delay-handle"), mk("up-delay-typed")
	h := f.claimUp(handle, "up-delay-handle", false, time.Minute)
	if err := upstream.Delay(f.ctx, f.db.Pool, h, now+5000, now); err != nil {
		t.Fatal(err)
	}
	h = f.claimUp(typed, "up-delay-typed", true, time.Minute)
	if err := upstream.FailTyped(f.ctx, f.db.Pool, h, 1, 5000, now); err != nil {
		t.Fatal(err)
	}
	for _, id := range []ff.ExecutionID{handle, typed} {
		e := f.WantState(id, state{ff.PhaseRunnable, ff.OwnershipUnowned, ff.EligibleNotUntilTime, f.Get(id).AttemptState, ff.PublicDelayed})
		if e.DelayUntilMs == nil || *e.DelayUntilMs != now+5000 || e.DeadlineAtMs == nil || *e.DeadlineAtMs != deadline {
			t.Errorf("%s: delay %v, deadline %v; want %d and %d", id, ptrVal(e.DelayUntilMs), ptrVal(e.DeadlineAtMs), now+5000, deadline)
		}
	}
	f.clock.Advance(6 * time.Second)
	for _, id := range []ff.ExecutionID{handle, typed} {
		if f.scanned(scanners.ExecutionDeadlineScanner{}, id) {
			t.Errorf("%s: its delay is taken for a deadline", id)
		}
		if !f.scanned(scanners.DelayedPromoterScanner{}, id) {
			t.Errorf("%s: its delay is not due for the promoter", id)
		}
		f.apply("promote", func(tx pgx.Tx) error {
			out, err := actions.Of(f.st.Pipeline()).PromoteDelayed(f.ctx, tx, id)
			if err == nil && out != "processed" {
				t.Errorf("%s: promote %s", id, out)
			}
			return err
		})
		f.WantState(id, state{ff.PhaseRunnable, ff.OwnershipUnowned, ff.EligibleNow, f.Get(id).AttemptState, ff.PublicWaiting})
	}
}

func ptrVal(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

// A lease taken by upstream's typed claim (attempt_index left pointing at
// the next attempt, the lease on the current one) is expired by the
// attempt_timeout scanner like any other: retried while the policy allows,
// then terminal expired. A typed retry moves to the next attempt.
func TestUpstreamTypedClaimLeaseExpires(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const lane = "up-typed"
	id := f.upstreamExec(lane, []byte(`{"retry_policy": {"max_retries": 1}}`))
	expire := func(wantAttempt int32) {
		t.Helper()
		f.clock.Advance(2 * time.Second)
		var found bool
		for _, it := range f.scan(scanners.AttemptTimeoutScanner{}, id.Partition) {
			if a, ok := it.(jobs.ExpireAttemptArgs); ok && a.ID == id {
				found = true
				if a.AttemptIndex != wantAttempt {
					t.Errorf("expiry of attempt %d, want %d", a.AttemptIndex, wantAttempt)
				}
				f.apply("expire", func(tx pgx.Tx) error {
					out, err := actions.Of(f.st.Pipeline()).ExpireAttempt(f.ctx, tx, id, a.AttemptIndex)
					if err == nil && out != "processed" {
						t.Errorf("expire: %s", out)
					}
					return err
				})
			}
		}
		if !found {
			t.Fatalf("the typed claim's expired lease (attempt %d) is not due", wantAttempt)
		}
	}
	f.claimUp(id, lane, true, time.Second)
	if e := f.Get(id); e.AttemptIndex != 0 || e.Attempt == nil || e.Attempt.LeaseExpiresAtMs == nil {
		t.Fatalf("after the typed claim: attempt_index %d, attempt %+v; want 0 holding the lease", e.AttemptIndex, e.Attempt)
	}
	expire(0)
	if e := f.WantState(id, state{ff.PhaseRunnable, ff.OwnershipUnowned, ff.EligibleNow, ff.AttemptPendingRetry, ff.PublicWaiting}); e.AttemptIndex != 1 {
		t.Errorf("retry at attempt %d, want 1", e.AttemptIndex)
	}
	f.claimUp(id, lane, true, time.Second)
	expire(1)
	f.WantState(id, state{ff.PhaseTerminal, ff.OwnershipUnowned, ff.EligibleNotApplicable, ff.AttemptTerminal, ff.PublicExpired})
	f.WantEvents(id, []string{"acquired", "expired", "acquired", "expired"}, []string{"expired"})

	// A typed fail with a retry left moves to the next attempt.
	other := f.upstreamExec(lane, []byte(`{"retry_policy": {"max_retries": 1}}`))
	h := f.claimUp(other, lane, true, time.Minute)
	if err := upstream.FailTyped(f.ctx, f.db.Pool, h, 1, 0, f.clock.NowMs()); err != nil {
		t.Fatal(err)
	}
	if e := f.Get(other); e.AttemptIndex != 1 {
		t.Errorf("typed retry at attempt %d, want 1", e.AttemptIndex)
	}
}

// flowUp creates a flow and, in its partition, n upstreams and one
// downstream whose group has policy, all the upstream way.
func (f *fixture) flowUp(lane string, n int, policy string, avoid ...int16) (flow uuid.UUID, ups []ff.ExecutionID, down ff.ExecutionID) {
	f.t.Helper()
	now := f.clock.NowMs()
	var part int16
	for {
		flow = uuid.New()
		if part = f.st.PartitionFor(flow, lane); !slices.Contains(avoid, part) {
			break
		}
	}
	if err := upstream.CreateFlow(f.ctx, f.db.Pool, part, flow, now); err != nil {
		f.t.Fatal(err)
	}
	mk := func() ff.ExecutionID {
		id := ff.ExecutionID{Partition: part, UUID: uuid.New()}
		if err := upstream.Create(f.ctx, f.db.Pool, upstream.Exec{ID: upID(id), Lane: lane, FlowID: &flow, Runnable: true}, now); err != nil {
			f.t.Fatal(err)
		}
		return id
	}
	var upIDs []uuid.UUID
	for range n {
		ups = append(ups, mk())
		upIDs = append(upIDs, ups[len(ups)-1].UUID)
	}
	down = mk()
	if err := upstream.Depend(f.ctx, f.db.Pool, part, flow, down.UUID, upIDs, []byte(policy), now); err != nil {
		f.t.Fatal(err)
	}
	return flow, ups, down
}

// hops returns the dependency scanner's due hops of partition part.
func (f *fixture) hops(part int16) []jobs.AdvanceArgs {
	f.t.Helper()
	var out []jobs.AdvanceArgs
	for _, it := range f.scan(scanners.NewDependencyScanner(0), part) {
		out = append(out, it.(jobs.AdvanceArgs))
	}
	return out
}

func (f *fixture) advance(a jobs.AdvanceArgs) string {
	f.t.Helper()
	var out string
	f.apply("advance", func(tx pgx.Tx) error {
		o, err := actions.Of(f.st.Pipeline()).Advance(f.ctx, tx, actions.Hop{Upstream: a.Upstream, FlowID: a.FlowID, Downstream: a.Downstream, Outcome: a.Outcome})
		out = string(o)
		return err
	})
	return out
}

// eventOf returns the event_id of id's completion event.
func (f *fixture) eventOf(id ff.ExecutionID) int64 {
	f.t.Helper()
	return int64(f.Count(`SELECT event_id FROM ff_completion_event WHERE partition_key = $1 AND execution_id = $2`, id.Partition, id.UUID))
}

func (f *fixture) successes(flow uuid.UUID, down ff.ExecutionID) int {
	f.t.Helper()
	return f.Count(`SELECT success_count FROM ff_edge_group WHERE flow_id = $1 AND downstream_eid = $2`, flow, down.UUID)
}

// A flow member completed by upstream's handle-based complete (terminal,
// public_state still "running", a completion "success") counts as a
// success, and is counted once, whoever counts it first: ffriver's hop, or
// upstream's own dispatch of its completion event.
func TestUpstreamFlowSuccessCountedOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const lane = "up-flow"
	// complete claims one upstream of the flow (whichever the claim takes)
	// and completes it, both the handle-based way.
	complete := func(part int16) ff.ExecutionID {
		t.Helper()
		h, err := upstream.Claim(f.ctx, f.db.Pool, part, lane, "w", time.Minute.Milliseconds(), f.clock.NowMs())
		if err != nil {
			t.Fatal(err)
		}
		if err := upstream.Complete(f.ctx, f.db.Pool, h, f.clock.NowMs()); err != nil {
			t.Fatal(err)
		}
		return ff.ExecutionID{Partition: h.ID.Partition, UUID: h.ID.UUID}
	}

	// Each flow below is in a partition of its own (used, the avoid list
	// of flowUp): complete claims in a partition and hops scans one, and
	// an earlier flow's upstreams and hops are still there.
	var used []int16

	// ffriver first: its hop counts a's success and releases the
	// downstream; upstream's dispatch of the event then finds it claimed.
	flow, _, down := f.flowUp(lane, 3, `{"kind": "any_of", "on_satisfied": "cancel_remaining"}`)
	used = append(used, down.Partition)
	won := complete(down.Partition)
	f.clock.Advance(16 * time.Second)
	hops := f.hops(down.Partition)
	if len(hops) != 1 || hops[0].Upstream != won || hops[0].Outcome != ff.OutcomeSuccess {
		t.Fatalf("due hops %+v, want one success of %s", hops, won)
	}
	if out := f.advance(hops[0]); out != "processed" {
		t.Errorf("hop: %s", out)
	}
	if n, err := upstream.Dispatch(f.ctx, f.db.Pool, f.eventOf(won), f.clock.NowMs()); err != nil || n != 0 {
		t.Errorf("upstream dispatch after ffriver's hop advanced %d groups (%v), want 0", n, err)
	}
	if n := f.successes(flow, down); n != 1 {
		t.Errorf("success counted %d times, want once", n)
	}
	f.WantState(down, state{ff.PhaseRunnable, ff.OwnershipUnowned, ff.EligibleNow, ff.AttemptPendingFirst, ff.PublicWaiting})

	// Upstream first: its dispatch counts the success, releases the
	// downstream and flags the siblings; ffriver's hop records the edge
	// and counts nothing.
	flow, _, down = f.flowUp(lane, 3, `{"kind": "quorum", "k": 1, "on_satisfied": "cancel_remaining"}`, used...)
	used = append(used, down.Partition)
	won = complete(down.Partition)
	if n, err := upstream.Dispatch(f.ctx, f.db.Pool, f.eventOf(won), f.clock.NowMs()); err != nil || n != 1 {
		t.Fatalf("upstream dispatch advanced %d groups (%v), want 1", n, err)
	}
	f.clock.Advance(16 * time.Second)
	for _, h := range f.hops(down.Partition) {
		if h.Downstream != down.UUID {
			continue
		}
		// It records the group's resolution, which upstream's count
		// reached (processed), without counting.
		f.advance(h)
	}
	if n := f.successes(flow, down); n != 1 {
		t.Errorf("success counted %d times, want once", n)
	}
	if n := f.Count(`SELECT count(*) FROM ff_edge WHERE flow_id = $1 AND upstream_outcome IS NULL AND upstream_terminal_at_ms IS NOT NULL`, flow); n != 0 {
		t.Errorf("%d hops still due", n)
	}
	if n := f.Count(`SELECT cardinality(cancel_siblings_pending_members) FROM ff_edge_group WHERE flow_id = $1`, flow); n != 2 {
		t.Errorf("%d siblings flagged, want 2", n)
	}

	// A terminal upstream whose outcome is recorded nowhere (written by
	// hand: public_state "running", no completion event) is never counted,
	// as a failure or anything else: its hop is reported unprocessable.
	flow, ups, down := f.flowUp(lane, 2, `{"kind": "all_of"}`, used...)
	if _, err := f.db.Pool.Exec(f.ctx, `UPDATE ff_exec_core SET lifecycle_phase = 'terminal', public_state = 'running',
		terminal_at_ms = $2 WHERE execution_id = $1`, ups[0].UUID, f.clock.NowMs()); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(16 * time.Second)
	if hops := f.hops(down.Partition); len(hops) != 0 {
		t.Errorf("hops %+v of an upstream of unknown outcome", hops)
	}
	dep := scanners.NewDependencyScanner(0)
	params, _ := pipeline.ParamsOf(dep)
	un, err := dep.Unprocessable(f.ctx, f.db.Pool, workers.DueRequest{Store: f.st, NowMs: f.clock.NowMs(), Params: params})
	if err != nil {
		t.Fatal(err)
	}
	if len(un) != 1 || un[0].Reason != "terminal upstream whose outcome is recorded nowhere" || un[0].Count != 1 {
		t.Errorf("unprocessable %+v, want the one hop of unknown outcome", un)
	}
	if n := f.successes(flow, down) + f.Count(`SELECT fail_count FROM ff_edge_group WHERE flow_id = $1`, flow); n != 0 {
		t.Errorf("%d outcomes counted, want none", n)
	}
}

// A lease ffriver's Reclaim took over is fenced for upstream's handle too:
// upstream's handle-based calls fence on the epoch of the attempt the handle
// names and nothing else, so the reclaimed attempt's epoch moves on, as
// docs/api.md's Fencing says (found while modelling the lease checker's
// upstream writer: Reclaim closed the old attempt under its epoch, and the
// old holder's upstream Complete then ended the execution under the
// reclaimer's live lease).
func TestUpstreamHandleFencedAfterReclaim(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const lane = "up-reclaim"
	id := f.upstreamExec(lane, []byte(`{"retry_policy": {"max_retries": 2}}`))
	h := f.claimUp(id, lane, false, time.Second)
	f.clock.Advance(2 * time.Second)
	l, err := f.st.Reclaim(f.ctx, id, executions.ClaimParams{WorkerID: "r", WorkerInstanceID: "r-1", LeaseTTL: time.Minute})
	if err != nil {
		t.Fatalf("reclaim: %v", err)
	}
	now := f.clock.NowMs()
	for what, call := range map[string]func() error{
		"renew":    func() error { return upstream.Renew(f.ctx, f.db.Pool, h, 30_000, now) },
		"complete": func() error { return upstream.Complete(f.ctx, f.db.Pool, h, now) },
		"fail":     func() error { return upstream.Fail(f.ctx, f.db.Pool, h, false, now) },
		"delay":    func() error { return upstream.Delay(f.ctx, f.db.Pool, h, now+1000, now) },
	} {
		if err := call(); !errors.Is(err, upstream.ErrFence) {
			t.Errorf("upstream %s with the reclaimed handle: %v, want upstream.ErrFence", what, err)
		}
	}
	f.WantState(id, state{ff.PhaseActive, ff.OwnershipLeased, ff.EligibleNotApplicable, ff.AttemptRunning, ff.PublicActive})
	if err := f.st.Complete(f.ctx, l, nil); err != nil {
		t.Fatalf("the reclaimer's complete: %v", err)
	}
	f.WantEvents(id, []string{"acquired", "reclaimed", "revoked"}, []string{"success"})
}

// An upstream renew that commits while attempt_timeout or Reclaim waits for
// the attempt row is not undone, and is decided on: upstream's renew locks
// only the attempt row and moves the expiry under the same epoch, so the
// expiry read under the execution's lock alone may no longer hold when the
// write gets the row. A renew that left the lease live keeps it: Reclaim
// (which locks the attempt row before it reads) answers ErrLeaseHeld, the
// attempt_timeout write is refused with ErrLeaseHeld and the action, retried
// alone, finds the lease live (found by the lease checker's upstream writer:
// a renew that committed first, then an "expired" event decided on the
// expiry it had replaced). A renew that left the lease expired (a renew
// whose clock was behind) does not save it: Reclaim takes it over instead
// of answering ErrLeaseHeld for a lease that had expired in every order of
// the two (lease checker, seed 5253), and attempt_timeout, retried alone,
// expires it.
func TestUpstreamRenewBeatsExpiryWaitingForTheRow(t *testing.T) {
	t.Parallel()
	type take func(f *fixture, tx pgx.Tx, id ff.ExecutionID, attempt int32) error
	expire := func(f *fixture, tx pgx.Tx, id ff.ExecutionID, attempt int32) error {
		out, err := actions.Of(f.st.Pipeline()).ExpireAttempt(f.ctx, tx, id, attempt)
		if err == nil && out != actions.Processed {
			return fmt.Errorf("outcome %s", out)
		}
		return err
	}
	reclaim := func(f *fixture, tx pgx.Tx, id ff.ExecutionID, _ int32) error {
		_, err := f.st.ReclaimTx(f.ctx, tx, id, executions.ClaimParams{WorkerID: "r", WorkerInstanceID: "r-1", LeaseTTL: time.Minute})
		return err
	}
	for _, c := range []struct {
		name string
		take take
		// renewBy is how far past now the renew moves the expiry.
		renewBy time.Duration
		// raced is what take returns after the renew committed.
		raced error
		// renewed: the renew's lease holds afterwards; else take's retry
		// (alone, when raced is not nil) ends it.
		renewed bool
	}{
		{"attempt_timeout/live", expire, 30 * time.Second, ff.ErrLeaseHeld, true},
		{"Reclaim/live", reclaim, 30 * time.Second, ff.ErrLeaseHeld, true},
		{"attempt_timeout/still-expired", expire, -time.Millisecond, ff.ErrLeaseHeld, false},
		{"Reclaim/still-expired", reclaim, -time.Millisecond, nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			const lane = "up-renew-race"
			id := f.upstreamExec(lane, []byte(`{"retry_policy": {"max_retries": 2}}`))
			h := f.claimUp(id, lane, false, time.Second)
			f.clock.Advance(2 * time.Second)

			// Upstream's renew, up to its COMMIT: the attempt row locked
			// and its expiry moved.
			renew, err := f.db.Pool.Begin(f.ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer renew.Rollback(f.ctx)
			var renewPID int
			if err := renew.QueryRow(f.ctx, `SELECT pg_backend_pid()`).Scan(&renewPID); err != nil {
				t.Fatal(err)
			}
			if _, err := renew.Exec(f.ctx, `SELECT 1 FROM ff_attempt WHERE partition_key = $1 AND execution_id = $2 AND attempt_index = $3 FOR UPDATE`,
				id.Partition, id.UUID, h.Attempt); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- f.InTx(func(tx pgx.Tx) error { return c.take(f, tx, id, h.Attempt) }) }()
			fftest.Await(t, 10*time.Second, c.name+" waiting for the attempt row", func() bool {
				return f.Count(`SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, renewPID) > 0
			})
			expiry := f.clock.NowMs() + c.renewBy.Milliseconds()
			if _, err := renew.Exec(f.ctx, `UPDATE ff_attempt SET lease_expires_at_ms = $4 WHERE partition_key = $1 AND execution_id = $2 AND attempt_index = $3`,
				id.Partition, id.UUID, h.Attempt, expiry); err != nil {
				t.Fatal(err)
			}
			if err := renew.Commit(f.ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-done; !errors.Is(err, c.raced) || (err != nil && c.raced == nil) {
				t.Fatalf("%s after the renew committed: %v; want %v", c.name, err, c.raced)
			}
			if c.renewed {
				f.apply("expire again", func(tx pgx.Tx) error {
					out, err := actions.Of(f.st.Pipeline()).ExpireAttempt(f.ctx, tx, id, h.Attempt)
					if err == nil && out != actions.NoOp {
						t.Errorf("attempt_timeout of the renewed lease: %s, want %s", out, actions.NoOp)
					}
					return err
				})
				if e := f.Get(id); e.Attempt == nil || e.Attempt.LeaseExpiresAtMs == nil || *e.Attempt.LeaseExpiresAtMs != expiry {
					t.Fatalf("after the renew: attempt %+v, want the lease renewed until %d", e.Attempt, expiry)
				}
				if err := upstream.Complete(f.ctx, f.db.Pool, h, f.clock.NowMs()); err != nil {
					t.Fatalf("upstream complete with the renewed handle: %v", err)
				}
				return
			}
			if c.raced != nil {
				if err := f.InTx(func(tx pgx.Tx) error { return c.take(f, tx, id, h.Attempt) }); err != nil {
					t.Fatalf("%s again: %v", c.name, err)
				}
			}
			if err := upstream.Renew(f.ctx, f.db.Pool, h, 30_000, f.clock.NowMs()); !errors.Is(err, upstream.ErrFence) {
				t.Fatalf("upstream renew with the ended lease's handle: %v, want upstream.ErrFence", err)
			}
		})
	}
}
