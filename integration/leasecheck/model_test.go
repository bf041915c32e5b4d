package leasecheck

import (
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/ffriver/ffriver/ff"
	"github.com/google/uuid"
)

// These tests feed the model hand-written histories: the ones the known
// stale-lock bug produces must be rejected, their correct counterparts
// accepted. No database is needed.

const x = "{fp:1}:x"

// hist builds a history of one execution; times are in milliseconds, used
// both as porcupine's time and as every store's clock.
type hist struct{ ops []porcupine.Operation }

func (h *hist) add(client int, call, ret int64, steps []Step, results []Result) {
	out := Output{Results: results}
	if ret == Unbounded {
		out.Unknown = true
	}
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Call: call, Return: ret,
		Input: Input{Exec: x, Client: client, Steps: steps, Clock: Window{call, ret}, WallHi: ret}, Output: out})
}

func (h *hist) scanner(call, ret int64, tx *Tx) {
	h.ops = append(h.ops, porcupine.Operation{ClientId: 9, Call: call, Return: ret,
		Input: Input{Exec: x, Client: 9, Clock: Window{call, call}, Derived: true}, Output: Output{Events: tx}})
}

func (h *hist) check(t *testing.T, want porcupine.CheckResult) {
	t.Helper()
	res, bad := CheckLinearizable(h.ops, 10*time.Second)
	if res != want {
		var b strings.Builder
		for _, l := range bad {
			for _, op := range l.Ops {
				b.WriteString("  " + Describe(op.Input.(Input), op.Output.(Output)) + "\n")
			}
		}
		t.Fatalf("porcupine says %s, want %s\n%s", res, want, b.String())
	}
}

// The workers' instances of the tests.
const w1, w2 = "w1", "w2"

// leaseID is the n-th lease id of the tests.
func leaseID(n byte) uuid.UUID { return uuid.UUID{15: n} }

func created1() []Step { return []Step{{Kind: OpCreate, Create: CreateSpec{MaxRetries: 2}}} }

func ok() []Result { return []Result{{}} }

// claimed: worker 1 holds epoch 1 from 10 on, its lease good until 1010.
func claimed() *hist {
	h := &hist{}
	h.add(0, 0, 1, created1(), ok())
	h.add(1, 10, 10, []Step{{Kind: OpClaim, TTL: 1000, Instance: w1}},
		[]Result{{Lease: LeaseRef{Attempt: 0, Epoch: 1, LeaseID: leaseID(1), ExpiresAt: 1010, Instance: w1}}})
	return h
}

// lease1 is worker 1's lease of claimed().
func lease1() LeaseRef {
	return LeaseRef{Attempt: 0, Epoch: 1, LeaseID: leaseID(1), ExpiresAt: 1010, Instance: w1}
}

// The reported reproduction: worker 1's Complete waits behind one
// transaction that revokes and re-claims (worker 2, epoch 3: the revoke
// bumped 1 to 2, the claim takes max+1); worker 1's Complete returns nil
// and worker 2's Complete then gets ErrNotActive.
func TestModelRejectsCompleteAfterHandOver(t *testing.T) {
	h := claimed()
	h.add(2, 100, 200, []Step{{Kind: OpRevoke}, {Kind: OpClaim, TTL: 1000, Instance: w2}},
		[]Result{{}, {Lease: LeaseRef{Attempt: 0, Epoch: 3, LeaseID: leaseID(2), ExpiresAt: 1150, Instance: w2}}})
	h.add(1, 120, 210, []Step{{Kind: OpComplete, Lease: lease1()}}, ok())
	h.add(2, 220, 230, []Step{{Kind: OpComplete, Lease: LeaseRef{Attempt: 0, Epoch: 3, LeaseID: leaseID(2), ExpiresAt: 1150, Instance: w2}}},
		[]Result{{Err: ErrNotActive}})
	h.check(t, porcupine.Illegal)

	// The correct outcome: worker 1 is fenced, worker 2 completes.
	h = claimed()
	h.add(2, 100, 200, []Step{{Kind: OpRevoke}, {Kind: OpClaim, TTL: 1000, Instance: w2}},
		[]Result{{}, {Lease: LeaseRef{Attempt: 0, Epoch: 3, LeaseID: leaseID(2), ExpiresAt: 1150, Instance: w2}}})
	h.add(1, 120, 210, []Step{{Kind: OpComplete, Lease: lease1()}}, []Result{{Err: ErrStale}})
	h.add(2, 220, 230, []Step{{Kind: OpComplete, Lease: LeaseRef{Attempt: 0, Epoch: 3, LeaseID: leaseID(2), ExpiresAt: 1150, Instance: w2}}}, ok())
	h.check(t, porcupine.Ok)

	// Worker 1 may also win when its Complete commits first: the hand-over
	// then finds nothing to revoke.
	h = claimed()
	h.add(1, 100, 150, []Step{{Kind: OpComplete, Lease: lease1()}}, ok())
	h.add(2, 120, 200, []Step{{Kind: OpRevoke}}, []Result{{Err: ErrNotActive}})
	h.check(t, porcupine.Ok)
}

// The outbox of the reproduction: two "revoked" events of epoch 1, the
// second after the hand-over's "acquired" of epoch 3. Replayed in commit
// order, worker 1's Complete is illegal.
func TestModelRejectsTheReproductionsOutbox(t *testing.T) {
	s, why := Transition(State{}, Input{Steps: created1()}, Output{Results: ok()})
	if why != "" {
		t.Fatal(why)
	}
	claim := Input{Steps: []Step{{Kind: OpClaim, TTL: 1000, Instance: w1}}, Clock: Window{10, 10}, WallHi: 10}
	s, why = Transition(s[0], claim, Output{Results: []Result{{Lease: lease1()}},
		Events: &Tx{Lease: []LeaseEvent{{Type: ff.LeaseAcquired, Attempt: 0, Epoch: 1, LeaseID: leaseID(1), Instance: w1, AtMs: 10}}}})
	if why != "" {
		t.Fatal(why)
	}
	l2 := LeaseRef{Attempt: 0, Epoch: 3, LeaseID: leaseID(2), ExpiresAt: 1150, Instance: w2}
	handOver := Input{Steps: []Step{{Kind: OpRevoke}, {Kind: OpClaim, TTL: 1000, Instance: w2}}, Clock: Window{100, 200}, WallHi: 200}
	s, why = Transition(s[0], handOver, Output{Results: []Result{{}, {Lease: l2}}, Events: &Tx{Lease: []LeaseEvent{
		{Type: ff.LeaseRevoked, Attempt: 0, Epoch: 1, LeaseID: leaseID(1), Instance: w1, AtMs: 150},
		{Type: ff.LeaseAcquired, Attempt: 0, Epoch: 3, LeaseID: leaseID(2), Instance: w2, AtMs: 150},
	}}})
	if why != "" {
		t.Fatal(why)
	}
	complete := Input{Steps: []Step{{Kind: OpComplete, Lease: lease1()}}, Clock: Window{120, 210}, WallHi: 210}
	_, why = Transition(s[0], complete, Output{Results: ok(), Events: &Tx{
		Lease:       []LeaseEvent{{Type: ff.LeaseRevoked, Attempt: 0, Epoch: 1, LeaseID: leaseID(1), Instance: w1, AtMs: 205}},
		Completions: []CompletionEvent{{Outcome: ff.OutcomeSuccess, AtMs: 205}},
	}})
	if why == "" || !strings.Contains(why, "ErrStaleLease") {
		t.Fatalf("replaying worker 1's Complete after the hand-over: %q, want it illegal (the lease is stale)", why)
	}
}

// Cancel waiting behind a Claim that then commits: the stale read sees no
// lease, so the Cancel writes no "revoked" and leaves the lease live.
func TestModelRejectsCancelThatMissedALease(t *testing.T) {
	h := &hist{}
	h.add(0, 0, 1, created1(), ok())
	h.add(1, 10, 100, []Step{{Kind: OpClaim, TTL: 1000, Instance: w1}}, []Result{{Lease: LeaseRef{Epoch: 1, LeaseID: leaseID(1), ExpiresAt: 1050, Instance: w1}}})
	h.add(2, 20, 110, []Step{{Kind: OpCancel}}, ok())
	// The cancelled lease still renews: it was never fenced.
	h.add(1, 120, 130, []Step{{Kind: OpRenew, TTL: 1000, Lease: LeaseRef{Epoch: 1, LeaseID: leaseID(1), ExpiresAt: 1050, Instance: w1}}},
		[]Result{{Err: ErrNotActive}})
	h.check(t, porcupine.Illegal)

	// From its events alone: a completion "cancelled" of a leased
	// execution without the "revoked" of its lease.
	s := created(CreateSpec{})
	s.Phase, s.Row, s.Epoch, s.MaxEpoch, s.LeaseID, s.Holder, s.HasExpiry, s.Expires = Active, true, 1, 1, leaseID(1), w1, true, 1050
	_, why := Transition(s, Input{Steps: []Step{{Kind: OpCancel}}, Clock: Window{20, 110}},
		Output{Results: ok(), Events: &Tx{Completions: []CompletionEvent{{Outcome: ff.OutcomeCancelled, AtMs: 105}}}})
	if why == "" {
		t.Fatal("a Cancel of a leased execution without a revoked event was accepted")
	}
}

// A Reclaim that waited behind a Renew and took over the just-renewed lease.
func TestModelRejectsReclaimOfARenewedLease(t *testing.T) {
	h := &hist{}
	h.add(0, 0, 1, created1(), ok())
	h.add(1, 10, 10, []Step{{Kind: OpClaim, TTL: 100, Instance: w1}}, []Result{{Lease: LeaseRef{Epoch: 1, LeaseID: leaseID(1), ExpiresAt: 110, Instance: w1}}})
	// Renewed at 105 (until 1105), holding the row until 150.
	h.add(1, 105, 150, []Step{{Kind: OpRenew, TTL: 1000, Lease: LeaseRef{Epoch: 1, LeaseID: leaseID(1), ExpiresAt: 110, Instance: w1}}},
		[]Result{{Lease: LeaseRef{Epoch: 1, LeaseID: leaseID(1), ExpiresAt: 1105, Instance: w1}}})
	// The reclaim started at 120 after the old expiry and returned at 160.
	h.add(2, 120, 160, []Step{{Kind: OpReclaim, TTL: 1000, Instance: w2}}, []Result{{Lease: LeaseRef{Attempt: 1, Epoch: 2, LeaseID: leaseID(2), ExpiresAt: 1155, Instance: w2}}})
	h.check(t, porcupine.Illegal)

	// Waiting and then finding the lease renewed: ErrLeaseHeld.
	h.ops[len(h.ops)-1].Output = Output{Results: []Result{{Err: ErrHeld}}}
	h.check(t, porcupine.Ok)
}

// A Claim that writes an epoch back instead of max+1.
func TestModelRejectsAClaimThatReusesAnEpoch(t *testing.T) {
	h := claimed()
	h.add(2, 100, 110, []Step{{Kind: OpRevoke}}, ok())
	h.add(3, 120, 130, []Step{{Kind: OpClaim, TTL: 1000, Instance: "w3"}}, []Result{{Lease: LeaseRef{Epoch: 2, LeaseID: leaseID(2), ExpiresAt: 1125, Instance: "w3"}}})
	h.check(t, porcupine.Illegal)
	h.ops[len(h.ops)-1].Output = Output{Results: []Result{{Lease: LeaseRef{Epoch: 3, LeaseID: leaseID(2), ExpiresAt: 1125, Instance: "w3"}}}}
	h.check(t, porcupine.Ok)
}

// Time-dependent outcomes are legal either way inside the call's clock
// window, and only there.
func TestModelTimeWindows(t *testing.T) {
	renew := func(call, ret int64, r Result) *hist {
		h := claimed() // expires at 1010
		h.add(1, call, ret, []Step{{Kind: OpRenew, TTL: 1000, Lease: lease1()}}, []Result{r})
		return h
	}
	// A renew spanning the expiry may find it live or expired.
	renew(1000, 1020, Result{Err: ErrExpired}).check(t, porcupine.Ok)
	renew(1000, 1020, Result{Lease: LeaseRef{Epoch: 1, LeaseID: leaseID(1), ExpiresAt: 2005, Instance: w1}}).check(t, porcupine.Ok)
	// Renewed at 1015 (expiry+ttl says so): after the expiry.
	renew(1000, 1020, Result{Lease: LeaseRef{Epoch: 1, LeaseID: leaseID(1), ExpiresAt: 2015, Instance: w1}}).check(t, porcupine.Illegal)
	// Before the expiry it cannot be expired; after it, not live.
	renew(500, 600, Result{Err: ErrExpired}).check(t, porcupine.Illegal)
	renew(1010, 1020, Result{Lease: LeaseRef{Epoch: 1, LeaseID: leaseID(1), ExpiresAt: 2015, Instance: w1}}).check(t, porcupine.Illegal)

	// The scanner expires only a lease whose expiry is its clock or
	// earlier: the lease has ended at its expiry's instant, as for the
	// fence.
	expired := func(at int64) *Tx {
		return &Tx{Lease: []LeaseEvent{{Type: ff.LeaseExpired, Epoch: 1, LeaseID: leaseID(1), Instance: w1, AtMs: at}}}
	}
	h := claimed()
	h.scanner(1010, 1100, expired(1010))
	h.add(1, 1200, 1210, []Step{{Kind: OpRenew, TTL: 1000, Lease: lease1()}}, []Result{{Err: ErrStale}})
	h.check(t, porcupine.Ok)
	h = claimed()
	h.scanner(1009, 1100, expired(1009))
	h.check(t, porcupine.Illegal)
	// An expiry racing a renew: a renew that succeeded before the expiry
	// committed fences the scanner (its event then names a live lease).
	h = claimed()
	h.add(1, 1000, 1005, []Step{{Kind: OpRenew, TTL: 1000, Lease: lease1()}}, []Result{{Lease: LeaseRef{Epoch: 1, LeaseID: leaseID(1), ExpiresAt: 2002, Instance: w1}}})
	h.scanner(1011, 1100, expired(1011))
	h.check(t, porcupine.Illegal)
}

// Delayed executions are claimable once their time has passed (promotion
// is not observed), never before.
func TestModelPromotion(t *testing.T) {
	h := &hist{}
	h.add(0, 0, 1, []Step{{Kind: OpCreate, Create: CreateSpec{DelayUntil: 500}}}, ok())
	h.add(1, 100, 200, []Step{{Kind: OpClaim, TTL: 1000, Instance: w1}}, []Result{{Lease: LeaseRef{Epoch: 1, LeaseID: leaseID(1), ExpiresAt: 1150, Instance: w1}}})
	h.check(t, porcupine.Illegal)
	h = &hist{}
	h.add(0, 0, 1, []Step{{Kind: OpCreate, Create: CreateSpec{DelayUntil: 500}}}, ok())
	h.add(1, 490, 510, []Step{{Kind: OpClaim, TTL: 1000, Instance: w1}}, []Result{{Lease: LeaseRef{Epoch: 1, LeaseID: leaseID(1), ExpiresAt: 1500, Instance: w1}}})
	h.check(t, porcupine.Ok)
	// A claim of unknown outcome that the outbox shows committed never
	// returned: it may have come after the promotion, however late.
	h = &hist{}
	h.add(0, 0, 1, []Step{{Kind: OpCreate, Create: CreateSpec{DelayUntil: 500}}}, ok())
	h.add(1, 100, Unbounded, []Step{{Kind: OpClaim, TTL: 1000, Instance: w1}}, []Result{{Lease: LeaseRef{Epoch: 1, LeaseID: leaseID(1), ExpiresAt: 1600, Instance: w1}}})
	h.ops[1].Output = Output{Unknown: true, Resolved: true, Results: h.ops[1].Output.(Output).Results}
	h.ops[1].Input = Input{Exec: x, Client: 1, Steps: h.ops[1].Input.(Input).Steps, Clock: Window{100, Unbounded}, WallHi: Unbounded}
	h.check(t, porcupine.Ok)
}

// Unknown outcomes: an unresolved call committed nothing; a resolved one
// took effect somewhere after its call.
func TestModelUnknownOutcomes(t *testing.T) {
	h := claimed()
	h.add(2, 100, Unbounded, []Step{{Kind: OpRevoke}}, nil)
	h.add(1, 200, 210, []Step{{Kind: OpRenew, TTL: 1000, Lease: lease1()}}, []Result{{Lease: LeaseRef{Epoch: 1, LeaseID: leaseID(1), ExpiresAt: 1205, Instance: w1}}})
	h.check(t, porcupine.Ok)
	// Resolved: the revoke committed, so the renew after it is stale...
	h.ops[2].Output = Output{Unknown: true, Resolved: true, Results: ok()}
	h.ops[3].Output = Output{Results: []Result{{Err: ErrStale}}}
	h.check(t, porcupine.Ok)
	// ...unless the revoke is linearized after it.
	h.ops[3].Output = Output{Results: []Result{{Lease: LeaseRef{Epoch: 1, LeaseID: leaseID(1), ExpiresAt: 1205, Instance: w1}}}}
	h.check(t, porcupine.Ok)
	// Fail retries and the second Complete of the same lease.
	h = claimed()
	h.add(1, 100, 110, []Step{{Kind: OpFail, Lease: lease1()}}, []Result{{Retried: true, NextAttempt: 1}})
	h.add(1, 120, 130, []Step{{Kind: OpComplete, Lease: lease1()}}, []Result{{Err: ErrStale}})
	h.check(t, porcupine.Ok)
	h = claimed()
	h.add(1, 100, 110, []Step{{Kind: OpComplete, Lease: lease1()}}, ok())
	h.add(1, 120, 130, []Step{{Kind: OpComplete, Lease: lease1()}}, []Result{{Err: ErrNotActive}})
	h.check(t, porcupine.Ok)
}

// A Release (the runner stopping with the execution in hand) gives the
// attempt back without using a retry: the next Claim re-leases attempt 0
// with the next epoch, and the released lease is stale from then on.
func TestModelRelease(t *testing.T) {
	reclaimed := LeaseRef{Attempt: 0, Epoch: 2, LeaseID: leaseID(2), ExpiresAt: 1300, Instance: w2}
	h := claimed()
	h.add(1, 100, 110, []Step{{Kind: OpRelease, Lease: lease1()}}, ok())
	h.add(2, 300, 300, []Step{{Kind: OpClaim, TTL: 1000, Instance: w2}}, []Result{{Lease: reclaimed}})
	h.add(1, 400, 410, []Step{{Kind: OpComplete, Lease: lease1()}}, []Result{{Err: ErrStale}})
	h.add(2, 500, 510, []Step{{Kind: OpComplete, Lease: reclaimed}}, ok())
	h.check(t, porcupine.Ok)

	// A Release that used a retry (the claim opened attempt 1) is illegal.
	h = claimed()
	h.add(1, 100, 110, []Step{{Kind: OpRelease, Lease: lease1()}}, ok())
	h.add(2, 300, 300, []Step{{Kind: OpClaim, TTL: 1000, Instance: w2}},
		[]Result{{Lease: LeaseRef{Attempt: 1, Epoch: 1, LeaseID: leaseID(2), ExpiresAt: 1300, Instance: w2}}})
	h.check(t, porcupine.Illegal)

	// So is a Release of a lease that was already released.
	h = claimed()
	h.add(1, 100, 110, []Step{{Kind: OpRelease, Lease: lease1()}}, ok())
	h.add(1, 200, 210, []Step{{Kind: OpRelease, Lease: lease1()}}, ok())
	h.check(t, porcupine.Illegal)
}

// A lease that shares its attempt and epoch with the current one but not its
// lease id (a Claim's lease whose transaction never committed, or a lease of
// a removed incarnation) is stale, whatever the phase: the fence compares
// lease ids. Seen by the checker once clients kept such leases for their
// own batches: Fail with the never-committed lease on a completed execution
// returned ErrStaleLease, which the model without lease ids rejected.
func TestModelFencesOnLeaseID(t *testing.T) {
	phantom := LeaseRef{Attempt: 0, Epoch: 1, LeaseID: leaseID(9), ExpiresAt: 1010, Instance: w2}
	h := claimed()
	h.add(2, 100, 110, []Step{{Kind: OpComplete, Lease: phantom}}, []Result{{Err: ErrStale}})
	h.add(1, 200, 210, []Step{{Kind: OpComplete, Lease: lease1()}}, ok())
	h.add(2, 300, 310, []Step{{Kind: OpFail, Lease: phantom}}, []Result{{Err: ErrStale}})
	h.check(t, porcupine.Ok)

	// Once terminal, the phantom lease must not be told ErrNotActive, and
	// while active it must not act.
	h = claimed()
	h.add(1, 200, 210, []Step{{Kind: OpComplete, Lease: lease1()}}, ok())
	h.add(2, 300, 310, []Step{{Kind: OpFail, Lease: phantom}}, []Result{{Err: ErrNotActive}})
	h.check(t, porcupine.Illegal)
	h = claimed()
	h.add(2, 100, 110, []Step{{Kind: OpComplete, Lease: phantom}}, ok())
	h.check(t, porcupine.Illegal)
}

// Deadlines fence: no lease is granted at or past the deadline, none
// reaches past it, nothing ends a lease once it has passed, and an attempt
// that times out at or past it is not retried.
func TestModelDeadlines(t *testing.T) {
	created := func(deadline int64) *hist {
		h := &hist{}
		h.add(0, 0, 1, []Step{{Kind: OpCreate, Create: CreateSpec{MaxRetries: 2, Deadline: deadline}}}, ok())
		return h
	}
	claim := func(h *hist, call, ret, exp int64) {
		h.add(1, call, ret, []Step{{Kind: OpClaim, TTL: 1000, Instance: w1}},
			[]Result{{Lease: LeaseRef{Epoch: 1, LeaseID: leaseID(1), ExpiresAt: exp, Instance: w1}}})
	}
	capped := LeaseRef{Epoch: 1, LeaseID: leaseID(1), ExpiresAt: 500, Instance: w1}

	// A claim at 10 gets an expiry capped at the deadline 500, not 1010.
	h := created(500)
	claim(h, 10, 10, 500)
	h.check(t, porcupine.Ok)
	h = created(500)
	claim(h, 10, 10, 1010)
	h.check(t, porcupine.Illegal)
	// No claim at or after the deadline: a lease whose expiry is the
	// deadline was granted before it.
	h = created(500)
	claim(h, 500, 510, 500)
	h.check(t, porcupine.Illegal)
	h = created(500)
	claim(h, 490, 510, 500) // granted in [490, 499]
	h.check(t, porcupine.Ok)

	// Renew is capped alike; Complete and Renew at the deadline fail with
	// ErrLeaseExpired, even on a lease that reaches past it.
	h = created(500)
	claim(h, 10, 10, 500)
	h.add(1, 100, 110, []Step{{Kind: OpRenew, TTL: 1000, Lease: capped}}, []Result{{Lease: capped}})
	h.add(1, 500, 510, []Step{{Kind: OpComplete, Lease: capped}}, []Result{{Err: ErrExpired}})
	h.check(t, porcupine.Ok)
	h = created(500)
	claim(h, 10, 10, 500)
	h.add(1, 100, 110, []Step{{Kind: OpRenew, TTL: 1000, Lease: capped}}, []Result{{Lease: LeaseRef{Epoch: 1, LeaseID: leaseID(1), ExpiresAt: 1105, Instance: w1}}})
	h.check(t, porcupine.Illegal)
	h = created(500)
	claim(h, 10, 10, 500)
	h.add(1, 500, 510, []Step{{Kind: OpComplete, Lease: capped}}, ok())
	h.check(t, porcupine.Illegal)
	if got := leaseClasses(State{Phase: Active, Row: true, Epoch: 1, HasExpiry: true, Expires: 5000, Deadline: 500}, LeaseRef{Epoch: 1}, Window{500, 510}); got != setOf(ErrExpired) {
		t.Errorf("a lease reaching past the deadline, at the deadline: %s, want ErrLeaseExpired", got)
	}

	// Reclaim at or past the deadline: ErrNotActive.
	if got := reclaimClasses(State{Phase: Active, Row: true, Epoch: 1, HasExpiry: true, Expires: 400, MaxRetries: 2, Deadline: 500}, Window{450, 550}); got != setOf(OK, ErrNotActive) {
		t.Errorf("Reclaim over the deadline: %s, want ok or ErrNotActive", got)
	}

	// attempt_timeout at the deadline (the capped lease's expiry) does not
	// retry: it expires the execution, as execution_deadline does.
	timedOut := &Tx{Lease: []LeaseEvent{{Type: ff.LeaseExpired, Epoch: 1, LeaseID: leaseID(1), Instance: w1, AtMs: 500}}}
	h = created(500)
	claim(h, 10, 10, 500)
	h.scanner(500, 600, timedOut)
	h.check(t, porcupine.Illegal)
	timedOut.Completions = []CompletionEvent{{Outcome: ff.OutcomeExpired, AtMs: 500}}
	h = created(500)
	claim(h, 10, 10, 500)
	h.scanner(500, 600, timedOut)
	h.add(1, 700, 710, []Step{{Kind: OpComplete, Lease: capped}}, []Result{{Err: ErrStale}})
	h.check(t, porcupine.Ok)
}

// mark adds a mark of the execution's row over [call, ret].
func (h *hist) mark(call, ret int64, m Mark) {
	h.ops = append(h.ops, porcupine.Operation{ClientId: 9, Call: call, Return: ret,
		Input: Input{Exec: x, Client: 9, Mark: m}, Output: Output{}})
}

// removed: claimed(), completed at 100, removed by execution retention in
// [1200, 1300], the id created again in [1400, 1410].
func removed() *hist {
	h := claimed()
	h.add(1, 100, 100, []Step{{Kind: OpComplete, Lease: lease1()}}, ok())
	h.mark(1200, 1300, MarkRemoved)
	h.mark(1400, 1410, MarkIDCreated)
	return h
}

// A lease of a removed incarnation: not found while the id has no row,
// stale once it was created again; never ok, however its attempt and epoch
// match the new incarnation's.
func TestModelRemovedIncarnation(t *testing.T) {
	lease := []Step{{Kind: OpRenew, Lease: lease1(), TTL: 1000}}
	for _, tc := range []struct {
		name string
		at   int64
		err  ErrClass
		then func(*hist)
		want porcupine.CheckResult
	}{
		{name: "not found before the id is created again", at: 1350, err: ErrNotFound, want: porcupine.Ok},
		{name: "stale before the id is created again", at: 1350, err: ErrStale, want: porcupine.Illegal},
		{name: "stale after", at: 1500, err: ErrStale, want: porcupine.Ok},
		{name: "not found after", at: 1500, err: ErrNotFound, want: porcupine.Illegal},
		{name: "ok after", at: 1500, err: OK, want: porcupine.Illegal},
		{name: "not active while terminal", at: 1100, err: ErrNotActive, want: porcupine.Ok},
		{name: "not found once the later incarnation is removed too", at: 1700, err: ErrNotFound, want: porcupine.Ok,
			then: func(h *hist) { h.mark(1600, 1650, MarkIDRemoved) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := removed()
			if tc.then != nil {
				tc.then(h)
			}
			r := Result{Err: tc.err}
			if tc.err == OK {
				r.Lease = lease1()
				r.Lease.ExpiresAt = tc.at + 1000
			}
			h.add(2, tc.at, tc.at, lease, []Result{r})
			h.check(t, tc.want)
		})
	}
}

// Retention removes only terminal executions, and calls without a lease on
// a removed one find nothing.
func TestModelRemovedOnlyTerminal(t *testing.T) {
	h := claimed()
	h.mark(1200, 1300, MarkRemoved)
	h.check(t, porcupine.Illegal)

	h = removed()
	h.ops = h.ops[:len(h.ops)-1] // not created again
	h.add(2, 1350, 1360, []Step{{Kind: OpCancel}}, []Result{{Err: ErrNotFound}})
	h.add(3, 1350, 1360, []Step{{Kind: OpClaim, TTL: 100, Instance: w2}}, []Result{{Empty: true}})
	h.check(t, porcupine.Ok)

	h = removed()
	h.ops = h.ops[:len(h.ops)-1]
	h.add(2, 1350, 1360, []Step{{Kind: OpCancel}}, []Result{{Err: ErrNotActive}})
	h.check(t, porcupine.Illegal)
}

// An upstream call with a removed incarnation's handle is refused: not
// found while the id has no row, not found or fenced once it has one again;
// acting is illegal. (The first long run with both the upstream writer and
// execution retention, seed 5252, reported a refusal as a violation.)
func TestModelRemovedIncarnationUpstreamHandle(t *testing.T) {
	for _, tc := range []struct {
		name string
		at   int64
		err  ErrClass
		want porcupine.CheckResult
	}{
		{name: "not found before the id is created again", at: 1350, err: ErrNotFound, want: porcupine.Ok},
		{name: "fenced after", at: 1500, err: ErrStale, want: porcupine.Ok},
		{name: "not found after", at: 1500, err: ErrNotFound, want: porcupine.Ok},
		{name: "acting after", at: 1500, err: OK, want: porcupine.Illegal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := removed()
			h.add(2, tc.at, tc.at+10, []Step{{Kind: OpUpRenew}}, []Result{{Err: tc.err}})
			h.check(t, tc.want)
		})
	}
}
