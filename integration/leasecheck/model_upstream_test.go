package leasecheck

import (
	"testing"

	"github.com/anishathalye/porcupine"
	"github.com/ffriver/ffriver/ff"
)

// The upstream writer's rules (model_upstream.go) on hand-written
// histories: an upstream handle superseded by a Reclaim must be refused.

// upClaimed: the upstream writer holds attempt 0 epoch 1 (a new row: no
// lease id) from 10 on, its lease good until 1010.
func upClaimed() *hist {
	h := &hist{}
	h.add(0, 0, 1, created1(), ok())
	h.add(1, 10, 10, []Step{{Kind: OpUpClaim, TTL: 1000, Lease: LeaseRef{Instance: "up-1"}}},
		[]Result{{Lease: LeaseRef{Attempt: 0, Epoch: 1, ExpiresAt: 1010, Instance: "up-1"}}})
	return h
}

func upHandle0() LeaseRef { return LeaseRef{Attempt: 0, Epoch: 1} }

// reclaimed: worker 2 reclaims the expired upstream lease at 1100, as
// attempt 1 under epoch 2.
func (h *hist) reclaimed() *hist {
	h.add(2, 1100, 1100, []Step{{Kind: OpReclaim, TTL: 1000, Instance: w2}},
		[]Result{{Lease: LeaseRef{Attempt: 1, Epoch: 2, LeaseID: leaseID(2), ExpiresAt: 2100, Instance: w2}}})
	return h
}

// The defect the upstream writer found: after a Reclaim the old holder's
// upstream Complete (its fence: the epoch of attempt 0, which the Reclaim
// left) ended the execution under the reclaimer's live lease.
func TestModelRejectsUpstreamCompleteAfterReclaim(t *testing.T) {
	h := upClaimed().reclaimed()
	h.add(1, 1200, 1200, []Step{{Kind: OpUpComplete, Lease: upHandle0()}}, ok())
	h.check(t, porcupine.Illegal)
}

func TestModelAcceptsUpstreamFenceAfterReclaim(t *testing.T) {
	h := upClaimed().reclaimed()
	h.add(1, 1200, 1200, []Step{{Kind: OpUpComplete, Lease: upHandle0()}}, []Result{{Err: ErrStale}})
	h.add(2, 1300, 1300, []Step{{Kind: OpComplete, Lease: LeaseRef{Attempt: 1, Epoch: 2, LeaseID: leaseID(2), ExpiresAt: 2100, Instance: w2}}}, ok())
	h.check(t, porcupine.Ok)
}

// Upstream's renew extends its lease without an expiry check, and an
// ffriver lease of an earlier claim of the row is stale after the
// upstream claim (its epoch moved on).
func TestModelUpstreamRenewAndFfriverFence(t *testing.T) {
	h := upClaimed()
	h.add(1, 1500, 1500, []Step{{Kind: OpUpRenew, TTL: 1000, Lease: upHandle0()}},
		[]Result{{Lease: LeaseRef{Attempt: 0, Epoch: 1, ExpiresAt: 2500}}})
	h.add(2, 1600, 1600, []Step{{Kind: OpComplete, Lease: LeaseRef{Attempt: 0, Epoch: 1, LeaseID: leaseID(1), ExpiresAt: 1010, Instance: w1}}},
		[]Result{{Err: ErrStale}})
	h.add(1, 1700, 1700, []Step{{Kind: OpUpFail, Lease: upHandle0()}}, ok())
	h.check(t, porcupine.Ok)
	// The retry is the next attempt, eligible at once: an upstream claim
	// takes it with a new row.
	h.add(1, 1800, 1800, []Step{{Kind: OpUpClaim, TTL: 1000, Lease: LeaseRef{Instance: "up-1"}}},
		[]Result{{Lease: LeaseRef{Attempt: 1, Epoch: 1, ExpiresAt: 2800, Instance: "up-1"}}})
	h.check(t, porcupine.Ok)
}

// An upstream Complete writes a completion "success" and a lease "revoked"
// without a lease identity, at its reading; the row keeps public_state
// "running".
func TestModelUpstreamCompleteEvents(t *testing.T) {
	s, why := Transition(State{}, Input{Steps: created1()}, Output{Results: ok()})
	if why != "" {
		t.Fatal(why)
	}
	claim := Input{Steps: []Step{{Kind: OpUpClaim, TTL: 1000, Lease: LeaseRef{Instance: "up-1"}}}, Clock: Window{10, 10}, WallHi: 10}
	s, why = Transition(s[0], claim, Output{Results: []Result{{Lease: LeaseRef{Attempt: 0, Epoch: 1, ExpiresAt: 1010, Instance: "up-1"}}}})
	if why != "" {
		t.Fatal(why)
	}
	in := Input{Steps: []Step{{Kind: OpUpComplete, Lease: upHandle0()}}, Clock: Window{20, 20}}
	good := &Tx{Lease: []LeaseEvent{upstreamEvent(ff.LeaseRevoked, 20)}, Completions: []CompletionEvent{{Outcome: ff.OutcomeSuccess, AtMs: 20}}}
	n, why := Transition(s[0], in, Output{Results: ok(), Events: good})
	if why != "" {
		t.Fatalf("the events upstream writes: %s", why)
	}
	if got := n[0]; got.Phase != Terminal || got.Outcome != ff.OutcomeSuccess || !got.PublicRunning || got.HasExpiry {
		t.Errorf("after an upstream complete: %s (public running %v)", got, got.PublicRunning)
	}
	missing := &Tx{Lease: []LeaseEvent{upstreamEvent(ff.LeaseRevoked, 20)}}
	if _, why := Transition(s[0], in, Output{Results: ok(), Events: missing}); why == "" {
		t.Error("an upstream complete without its completion event was accepted")
	}
}
