package leasecheck

import (
	"testing"

	"github.com/ffriver/ffriver/ff"
)

// Two renews of the same lease whose outcome is unknown, one "renewed"
// event: either may have made it, and they leave different expiries (the
// event does not record the TTL). Neither is resolved; each may have taken
// effect, and the replay keeps both readings.
func TestAmbiguousUnknownCallsStayOpen(t *testing.T) {
	l := lease1()
	renew := func(id int, ttl int64) *Call {
		return &Call{ID: id, Client: 1, Exec: x, Steps: []Step{{Kind: OpRenew, Lease: l, TTL: ttl}}, Unknown: true,
			CallNs: 100, ReturnNs: Unbounded, Clock: Window{100, Unbounded}, WallHi: Unbounded}
	}
	short, long := renew(1, 100), renew(2, 1000)
	renewed := &Tx{Seq: 2, RecvNs: 300, Lease: []LeaseEvent{{Type: ff.LeaseRenewed, Attempt: 0, Epoch: 1, LeaseID: leaseID(1), Instance: w1, AtMs: 200}}}
	m := match([]*Call{short, long}, []*Tx{renewed})
	a := ambiguities(m)
	if len(a.cands[renewed]) != 2 || len(a.maybe[short]) != 1 || len(a.maybe[long]) != 1 {
		t.Fatalf("ambiguity = %+v, want both calls candidates of the one transaction", a)
	}
	// With the short TTL the lease expires at 300, and the scanner's expiry
	// at 301 is legal; with the long one it is not. The replay must keep
	// the reading that explains the outbox.
	s := created(CreateSpec{MaxRetries: 2})
	s.Phase, s.Row, s.Epoch, s.MaxEpoch, s.LeaseID, s.Holder, s.HasExpiry, s.Expires = Active, true, 1, 1, leaseID(1), w1, true, 1010
	var states []State
	for _, c := range a.cands[renewed] {
		n, _ := Transition(s, c.input(), Output{Results: reconstruct(c, renewed, CreateSpec{}), Unknown: true, Resolved: true, Events: renewed})
		states = append(states, n...)
	}
	expired := &Tx{Seq: 3, Lease: []LeaseEvent{{Type: ff.LeaseExpired, Attempt: 0, Epoch: 1, LeaseID: leaseID(1), Instance: w1, AtMs: 301}}}
	legal := 0
	for _, st := range states {
		if _, why := Transition(st, Input{Exec: x, Derived: true}, Output{Events: expired}); why == "" {
			legal++
		}
	}
	if len(states) != 2 || legal != 1 {
		t.Errorf("%d readings of the renew, %d of which explain the expiry; want 2 and 1", len(states), legal)
	}
}
