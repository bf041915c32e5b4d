package executions_test

import (
	"testing"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/upstream"
	"github.com/google/uuid"
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

// Upstream's create without a policy writes NULL: the execution is created
// with the default policy (no retries) instead of failing on the NOT NULL
// column; one with a policy keeps it.
func TestUpstreamCreateWithAndWithoutPolicy(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	plain := f.upstreamExec("up-create", nil)
	withPolicy := f.upstreamExec("up-create", []byte(`{"priority": 0, "retry_policy": {"max_retries": 2, "backoff": {"type": "fixed", "delay_ms": 10}}}`))
	if e := f.get(plain); e.Policy.RetryPolicy.MaxRetries != 0 || e.LifecyclePhase != ff.PhaseRunnable {
		t.Errorf("no policy: %+v in %s, want no retries", e.Policy, e.LifecyclePhase)
	}
	if e := f.get(withPolicy); e.Policy.RetryPolicy.MaxRetries != 2 {
		t.Errorf("with policy: %+v, want 2 retries", e.Policy)
	}
	// Its create's own shape (submitted, attempt_state "pending") is taken
	// as written.
	sub := ff.ExecutionID{Partition: 3, UUID: uuid.New()}
	if err := upstream.Create(f.ctx, f.db.Pool, upstream.Exec{ID: upID(sub), Lane: "up-create"}, f.clock.NowMs()); err != nil {
		t.Fatalf("upstream create: %v", err)
	}
	f.wantState(sub, state{ff.PhaseSubmitted, ff.OwnershipUnowned, ff.EligibleNow, "pending", ff.PublicWaiting})
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
	if n := f.count(`SELECT count(*) FROM ff_claim_grant`); n != 0 {
		t.Errorf("%d grants left, want the one consumed", n)
	}
	f.wantState(id, state{ff.PhaseActive, ff.OwnershipLeased, ff.EligibleNotApplicable, ff.AttemptRunning, ff.PublicActive})
}

func (f *fixture) count(q string, args ...any) int {
	f.t.Helper()
	var n int
	if err := f.db.Pool.QueryRow(f.ctx, q, args...).Scan(&n); err != nil {
		f.t.Fatalf("%s: %v", q, err)
	}
	return n
}
