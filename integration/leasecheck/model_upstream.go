package leasecheck

import (
	"fmt"

	"github.com/ffriver/ffriver/ff"
	"github.com/google/uuid"
)

// The upstream writer's operations in the model: FlowFabric v0.15.0's
// handle-based statements (internal/upstream) on ffriver's schema, as they
// behave with migrations 0009-0012's triggers, beside ffriver's own API and
// scanners on the same executions (upstream.go drives them).
//
// Upstream's fence is the epoch of the attempt its handle names, nothing
// else: it locks that ff_attempt row (not ff_exec_core) and compares
// lease_epoch. What must hold on the shared schema is stronger, and the
// model says so: an upstream call succeeds only with the current lease
// (the handle's attempt is the execution's attempt_index, its epoch the
// row's, the execution active). A handle that any other transition
// superseded (an expiry, a revoke, a cancel, a deadline, a reclaim, another
// claim) must be refused, with upstream's own error (ErrFence, or
// ErrNothing where its attempt row is gone). The writer never uses a
// handle again after it ended its attempt (upstream's own double use
// passes upstream's own fence: not ffriver's to refuse).
//
// Upstream's rows: its lease events carry no lease_id, attempt_index,
// lease_epoch or worker_instance_id (the seed's column list); its claim
// leases the current attempt's row with the row's epoch+1 (1 for a new
// row), keeps the row's lease_id (NULL on a new row), names the holder
// worker_id || '-1', and grants now+ttl without ffriver's deadline cap;
// its renew extends any lease whose epoch matches (no expiry check); its
// complete and fail leave public_state "running"; its retry moves to the
// next attempt at once, whatever the policy; its delay writes the due time
// into deadline_at_ms, which migration 0010's trigger moves to
// delay_until_ms (the execution deadline stays).

// The upstream writer's kinds of steps, after ffriver's.
const (
	// OpUpClaim is upstream.Claim on a shared lane (Lease.Instance: the
	// holder its attempt row will name).
	OpUpClaim Kind = OpRelease + 1 + iota
	// OpUpRenew is upstream.Renew (Lease: the handle's attempt and epoch).
	OpUpRenew
	// OpUpComplete is upstream.Complete.
	OpUpComplete
	// OpUpFail is upstream.Fail: a retry unless Permanent.
	OpUpFail
	// OpUpDelay is upstream.Delay until Until.
	OpUpDelay
)

// upstreamPublicRunning is the public_state upstream's handle-based claim
// writes, and its complete and fail leave.
const upstreamPublicRunning = "running"

func (k Kind) upstream() bool { return k >= OpUpClaim && k <= OpUpDelay }

func upstreamKindName(k Kind) string {
	switch k {
	case OpUpClaim:
		return "UpstreamClaim"
	case OpUpRenew:
		return "UpstreamRenew"
	case OpUpComplete:
		return "UpstreamComplete"
	case OpUpFail:
		return "UpstreamFail"
	case OpUpDelay:
		return "UpstreamDelay"
	}
	return ""
}

// upstreamEvent is a lease event as upstream writes it: the seed's column
// list, no lease identity.
func upstreamEvent(typ string, at int64) LeaseEvent {
	return LeaseEvent{Type: typ, Attempt: -1, Epoch: -1, AtMs: at}
}

func isUpstreamEvent(e LeaseEvent) bool {
	return e.Attempt == -1 && e.Epoch == -1 && e.LeaseID == uuid.Nil && e.Instance == ""
}

// upstreamAlternatives are the events each upstream step writes (witness.go).
func upstreamAlternatives(st Step) []eventAlt {
	switch st.Kind {
	case OpUpClaim:
		return []eventAlt{{lease: ff.LeaseAcquired, pred: isUpstreamEvent}}
	case OpUpRenew:
		return []eventAlt{{lease: ff.LeaseRenewed, pred: isUpstreamEvent}}
	case OpUpComplete:
		return []eventAlt{{lease: ff.LeaseRevoked, pred: isUpstreamEvent, completion: ff.OutcomeSuccess}}
	case OpUpFail:
		if st.Permanent {
			return []eventAlt{{lease: ff.LeaseRevoked, pred: isUpstreamEvent, completion: ff.OutcomeFailed}}
		}
		return []eventAlt{{lease: ff.LeaseRevoked, pred: isUpstreamEvent}}
	case OpUpDelay:
		return []eventAlt{{lease: ff.LeaseRevoked, pred: isUpstreamEvent}}
	}
	return nil
}

// upstreamReconstruct is the result of an upstream step of unknown outcome
// whose transaction, at the reading at, the outbox holds: a claim's handle
// is not in its event (the model takes the attempt and epoch the row had),
// its expiry is the reading plus the TTL.
func upstreamReconstruct(st Step, at int64) Result {
	switch st.Kind {
	case OpUpClaim:
		return Result{Lease: LeaseRef{Attempt: -1, Epoch: -1, ExpiresAt: at + st.TTL, Instance: st.Lease.Instance}}
	case OpUpRenew:
		l := st.Lease
		l.ExpiresAt = at + st.TTL
		return Result{Lease: l}
	}
	return Result{}
}

// upstreamStep is one upstream operation's rule. The writer passes its
// clock reading to the statements, so the call's clock window is that one
// reading, and its events record it.
func upstreamStep(s State, st Step, r Result, in Input, c *cursor) (State, string) {
	at := in.Clock.Lo
	event := func(typ string) string {
		if c == nil {
			return ""
		}
		return c.lease(upstreamEvent(typ, at))
	}
	if st.Kind == OpUpClaim {
		return upstreamClaim(s, st, r, in, at, event)
	}
	current := st.Lease.Attempt == s.Attempt && s.Row && st.Lease.Epoch == s.Epoch && s.Phase == Active && s.HasExpiry
	if !current {
		if r.Err == ErrStale || r.Err == ErrNotFound {
			return s, ""
		}
		return s, fmt.Sprintf("%s with the handle a%d e%d returned %s in state %s: a superseded handle must be refused (upstream's fence: the attempt's epoch)",
			st.Kind, st.Lease.Attempt, st.Lease.Epoch, r.Err, s)
	}
	if r.Err != OK {
		return s, fmt.Sprintf("%s with the current handle a%d e%d returned %s in state %s, want ok", st.Kind, st.Lease.Attempt, st.Lease.Epoch, r.Err, s)
	}
	var n State
	outcome := ""
	switch st.Kind {
	case OpUpRenew:
		if r.Lease.ExpiresAt != 0 && r.Lease.ExpiresAt != at+st.TTL {
			return s, fmt.Sprintf("upstream renew's expiry %d is not its reading %d plus the TTL %d", r.Lease.ExpiresAt, at, st.TTL)
		}
		n = s
		n.Expires = at + st.TTL
		return n, event(ff.LeaseRenewed)
	case OpUpComplete:
		n, outcome = s.closeAttempt(false).terminal(ff.OutcomeSuccess), ff.OutcomeSuccess
		n.PublicRunning = true
	case OpUpFail:
		if st.Permanent {
			n, outcome = s.closeAttempt(false).terminal(ff.OutcomeFailed), ff.OutcomeFailed
			n.PublicRunning = true
		} else {
			// Upstream's retry: the next attempt, eligible at once, whatever
			// the policy says.
			n = s.closeAttempt(false).dropRow()
			n.Attempt = s.Attempt + 1
			n.Phase, n.DelayUntil = Waiting, 0
		}
	case OpUpDelay:
		n = s.closeAttempt(false)
		n.Phase, n.DelayUntil = Delayed, st.Until
	}
	if why := event(ff.LeaseRevoked); why != "" {
		return s, why
	}
	if outcome != "" && c != nil {
		if why := c.completion(outcome, at); why != "" {
			return s, why
		}
	}
	return n, ""
}

// upstreamClaim: the handle-based claim takes a runnable, eligible-now
// execution of the lane (FOR UPDATE SKIP LOCKED: it may find none anywhere)
// whatever its deadline, and leases its current attempt's row: epoch the
// row's+1 (1 for a new row), lease_id kept (NULL on a new row), expiry
// now+ttl uncapped, holder worker_id || '-1'; a lease "acquired".
func upstreamClaim(s State, st Step, r Result, in Input, at int64, event func(string) string) (State, string) {
	if r.Err != OK {
		return s, fmt.Sprintf("upstream claim failed with %s: it has no typed failure", r.Err)
	}
	if r.Empty {
		return s, ""
	}
	switch s.Phase {
	case Waiting:
	case Delayed:
		if s.DelayUntil-promotionSlackMs > in.WallHi {
			return s, fmt.Sprintf("upstream claim while delayed until %d, by a call that returned when a scanner's clock read at most %d: no promotion could have happened",
				s.DelayUntil, in.WallHi)
		}
	default:
		return s, fmt.Sprintf("upstream claim while %s", s.Phase)
	}
	epoch := int64(1)
	n := s
	if s.Row {
		epoch = s.Epoch + 1
	} else {
		n.LeaseID = uuid.Nil
	}
	l := r.Lease
	switch {
	case l.Attempt >= 0 && l.Attempt != s.Attempt:
		return s, fmt.Sprintf("upstream claim leased attempt %d, the current attempt is %d", l.Attempt, s.Attempt)
	case l.Epoch >= 0 && l.Epoch != epoch:
		return s, fmt.Sprintf("upstream claim got epoch %d, want the row's epoch+1 = %d", l.Epoch, epoch)
	case l.ExpiresAt != at+st.TTL:
		return s, fmt.Sprintf("upstream claim's expiry %d is not its reading %d plus the TTL %d", l.ExpiresAt, at, st.TTL)
	}
	n.Phase, n.DelayUntil = Active, 0
	n.Row, n.Epoch, n.MaxEpoch, n.Holder = true, epoch, max(s.MaxEpoch, epoch), st.Lease.Instance
	n.HasExpiry, n.Expires = true, at+st.TTL
	if why := event(ff.LeaseAcquired); why != "" {
		return s, why
	}
	return n, ""
}
