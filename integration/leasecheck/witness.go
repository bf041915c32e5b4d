package leasecheck

import (
	"fmt"
	"slices"

	"github.com/ffriver/ffriver/ff"
)

// The outbox as the witness: every call that committed has exactly one
// transaction with exactly its events, a call that failed has none, every
// other transaction is one of a scanner's or the flow engine's, and the
// commit order agrees with the real-time order of calls that did not
// overlap. This file matches calls to transactions; check.go judges.

// eventAlt is one way a step may show in the outbox: at most one lease
// event (of type lease, satisfying pred) and at most one completion.
type eventAlt struct {
	lease      string
	pred       func(LeaseEvent) bool
	completion string
}

func sameLease(l LeaseRef) func(LeaseEvent) bool {
	return func(e LeaseEvent) bool { return e.LeaseID == l.LeaseID && e.Attempt == l.Attempt && e.Epoch == l.Epoch }
}

func anyLease(LeaseEvent) bool { return true }

// alternatives are the ways step st, which returned r (nil: unknown), may
// have written its events. The model judges whether the events are right
// for the state; this only attributes them: a lease-bearing call's events
// name its lease, a claim's its new lease (or, unknown, its instance).
func alternatives(st Step, r *Result) []eventAlt {
	switch st.Kind {
	case OpCreate:
		return []eventAlt{{}}
	case OpClaim, OpReclaim:
		typ := ff.LeaseAcquired
		if st.Kind == OpReclaim {
			typ = ff.LeaseReclaimed
		}
		switch {
		case r != nil && r.Empty:
			return []eventAlt{{}}
		case r != nil:
			id := r.Lease.LeaseID
			return []eventAlt{{lease: typ, pred: func(e LeaseEvent) bool { return e.LeaseID == id }}}
		}
		return []eventAlt{{lease: typ, pred: func(e LeaseEvent) bool { return e.Instance == st.Instance }}}
	case OpRenew:
		same := sameLease(st.Lease)
		if r != nil {
			// The new expiry is the reading plus the TTL, or the deadline
			// (capped: after the reading, within the TTL); the model checks
			// which against the execution's deadline.
			exp := r.Lease.ExpiresAt
			return []eventAlt{{lease: ff.LeaseRenewed, pred: func(e LeaseEvent) bool {
				return same(e) && e.AtMs < exp && exp <= e.AtMs+st.TTL
			}}}
		}
		return []eventAlt{{lease: ff.LeaseRenewed, pred: same}}
	case OpComplete:
		return []eventAlt{{lease: ff.LeaseRevoked, pred: sameLease(st.Lease), completion: ff.OutcomeSuccess}}
	case OpFail:
		retry := eventAlt{lease: ff.LeaseRevoked, pred: sameLease(st.Lease)}
		failed := eventAlt{lease: ff.LeaseRevoked, pred: sameLease(st.Lease), completion: ff.OutcomeFailed}
		switch {
		case r == nil:
			return []eventAlt{retry, failed}
		case r.Retried:
			return []eventAlt{retry}
		}
		return []eventAlt{failed}
	case OpDelay, OpRelease:
		return []eventAlt{{lease: ff.LeaseRevoked, pred: sameLease(st.Lease)}}
	case OpRevoke:
		return []eventAlt{{lease: ff.LeaseRevoked, pred: anyLease}}
	case OpCancel:
		return []eventAlt{{completion: ff.OutcomeCancelled}, {lease: ff.LeaseRevoked, pred: anyLease, completion: ff.OutcomeCancelled}}
	}
	return upstreamAlternatives(st)
}

// fits reports whether tx can be c's transaction: it committed after c was
// called, its events are c's steps' events in order and nothing else, and
// each records a reading of c's store clock inside c's window.
func fits(c *Call, tx *Tx) bool {
	if tx.RecvNs != 0 && tx.RecvNs < c.CallNs {
		return false
	}
	for _, e := range tx.Lease {
		if !c.Clock.contains(e.AtMs) {
			return false
		}
	}
	for _, e := range tx.Completions {
		if !c.Clock.contains(e.AtMs) {
			return false
		}
	}
	return fitFrom(c, 0, tx, 0, 0)
}

func fitFrom(c *Call, i int, tx *Tx, li, ci int) bool {
	if i == len(c.Steps) {
		return li == len(tx.Lease) && ci == len(tx.Completions)
	}
	var r *Result
	if i < len(c.Results) {
		r = &c.Results[i]
	}
	for _, a := range alternatives(c.Steps[i], r) {
		l, k := li, ci
		if a.lease != "" {
			if l >= len(tx.Lease) || tx.Lease[l].Type != a.lease || !a.pred(tx.Lease[l]) {
				continue
			}
			l++
		}
		if a.completion != "" {
			if k >= len(tx.Completions) || tx.Completions[k].Outcome != a.completion {
				continue
			}
			k++
		}
		if fitFrom(c, i+1, tx, l, k) {
			return true
		}
	}
	return false
}

// scannerShaped reports whether tx may be a scanner's or the flow engine's
// transaction: attempt expiry, deadline expiry, sibling cancel or skip.
// Acquired, renewed and reclaimed events, and a "revoked" without a
// cancel, only a call writes.
func scannerShaped(tx *Tx) bool {
	var outcome string
	switch len(tx.Completions) {
	case 0:
	case 1:
		outcome = tx.Completions[0].Outcome
	default:
		return false
	}
	if len(tx.Lease) > 1 {
		return false
	}
	lease := ""
	if len(tx.Lease) == 1 {
		lease = tx.Lease[0].Type
	}
	switch outcome {
	case "", ff.OutcomeExpired:
		return lease == ff.LeaseExpired || (lease == "" && outcome != "")
	case ff.OutcomeCancelled:
		return lease == "" || lease == ff.LeaseRevoked
	case ff.OutcomeSkipped:
		return lease == ""
	}
	return false
}

// matching is the attribution of one execution's transactions.
type matching struct {
	calls  []*Call // candidates: calls that may have committed events
	txs    []*Tx
	adj    [][]int // call → transactions that fit
	txOf   []int   // call → transaction, -1
	callOf []int   // transaction → call, -1
}

// match attributes txs to the calls that may have committed them: a
// maximum bipartite matching that first covers the calls known to have
// committed, then extends to those of unknown outcome (an augmenting path
// never unmatches a call), and finally reorders interchangeable pairs to
// follow real time.
func match(calls []*Call, txs []*Tx) *matching {
	m := &matching{txs: txs, callOf: make([]int, len(txs))}
	for i := range m.callOf {
		m.callOf[i] = -1
	}
	for _, c := range calls {
		if c.writes() && !c.failed() && c.Steps[0].Kind != OpCreate {
			m.calls = append(m.calls, c)
		}
	}
	m.adj = make([][]int, len(m.calls))
	m.txOf = make([]int, len(m.calls))
	for i, c := range m.calls {
		m.txOf[i] = -1
		for j, tx := range txs {
			if fits(c, tx) {
				m.adj[i] = append(m.adj[i], j)
			}
		}
	}
	for _, unknown := range []bool{false, true} {
		for i, c := range m.calls {
			if c.Unknown == unknown {
				m.augment(i, make([]bool, len(txs)))
			}
		}
	}
	m.followRealTime()
	return m
}

// augment is Kuhn's augmenting path from call i.
func (m *matching) augment(i int, seen []bool) bool {
	for _, j := range m.adj[i] {
		if seen[j] {
			continue
		}
		seen[j] = true
		if m.callOf[j] < 0 || m.augment(m.callOf[j], seen) {
			m.txOf[i], m.callOf[j] = j, i
			return true
		}
	}
	return false
}

// followRealTime swaps the transactions of two matched calls when the
// first returned before the second was called but got the later
// transaction, and each fits the other's: the attribution between
// interchangeable calls is then the one real time allows.
func (m *matching) followRealTime() {
	for range len(m.calls) + 1 {
		swapped := false
		for a, ca := range m.calls {
			for b, cb := range m.calls {
				ta, tb := m.txOf[a], m.txOf[b]
				if ta < 0 || tb < 0 || ca.ReturnNs >= cb.CallNs || m.txs[ta].Seq < m.txs[tb].Seq {
					continue
				}
				if fits(ca, m.txs[tb]) && fits(cb, m.txs[ta]) {
					m.txOf[a], m.txOf[b] = tb, ta
					m.callOf[ta], m.callOf[tb] = b, a
					swapped = true
				}
			}
		}
		if !swapped {
			return
		}
	}
}

// reconstruct returns the results a call of unknown outcome had if tx was
// its transaction: a plain call's rebuilt from the events (a composite's
// steps had all returned before its COMMIT failed: their results are
// known), with the execution's spec: a granted lease's expiry is the
// reading plus the TTL capped at its deadline, a retry's delay its backoff.
func reconstruct(c *Call, tx *Tx, spec CreateSpec) []Result {
	if c.Results != nil {
		return c.Results
	}
	st := c.Steps[0]
	var r Result
	var at int64
	if len(tx.Lease) > 0 {
		at = tx.Lease[0].AtMs
	} else if len(tx.Completions) > 0 {
		at = tx.Completions[0].AtMs
	}
	exp := at + st.TTL
	if spec.Deadline != 0 {
		exp = min(exp, spec.Deadline)
	}
	switch st.Kind {
	case OpClaim, OpReclaim:
		e := tx.Lease[0]
		r.Lease = LeaseRef{Attempt: e.Attempt, Epoch: e.Epoch, LeaseID: e.LeaseID, ExpiresAt: exp, Instance: e.Instance}
	case OpRenew:
		r.Lease = st.Lease
		r.Lease.ExpiresAt = exp
	case OpFail:
		if len(tx.Completions) == 0 {
			r.Retried, r.NextAttempt = true, st.Lease.Attempt+1
			if spec.BackoffMs > 0 {
				r.DelayUntil = at + spec.BackoffMs
			}
		}
	default:
		r = upstreamReconstruct(st, at)
	}
	return []Result{r}
}

// ambiguity are the transactions of one execution that more than one call
// of unknown outcome could have made (or that could be one of several for
// such a call), and those calls. A renewed, revoked or acquired event does
// not record the TTL or the delay of its call, so two such calls that fit
// the same transaction leave different states: both readings stay open.
type ambiguity struct {
	// cands are, per ambiguous transaction, the unknown calls that fit it.
	cands map[*Tx][]*Call
	// maybe are, per unknown call of an ambiguity, the transactions it fits.
	maybe map[*Call][]*Tx
}

// ambiguities finds them after the matching: a transaction not made by a
// call known to have committed is resolved to an unknown call only when
// that call fits it alone and no other unknown call fits it.
func ambiguities(m *matching) ambiguity {
	a := ambiguity{cands: map[*Tx][]*Call{}, maybe: map[*Call][]*Tx{}}
	byKnown := make([]bool, len(m.txs))
	for i, c := range m.calls {
		if !c.Unknown && m.txOf[i] >= 0 {
			byKnown[m.txOf[i]] = true
		}
	}
	fitsOf := map[*Call][]*Tx{}
	users := map[*Tx][]*Call{}
	for i, c := range m.calls {
		if !c.Unknown {
			continue
		}
		for _, j := range m.adj[i] {
			if !byKnown[j] {
				fitsOf[c] = append(fitsOf[c], m.txs[j])
				users[m.txs[j]] = append(users[m.txs[j]], c)
			}
		}
	}
	for tx, cs := range users {
		if len(cs) == 1 && len(fitsOf[cs[0]]) == 1 {
			continue
		}
		a.cands[tx] = cs
		for _, c := range cs {
			a.maybe[c] = fitsOf[c]
		}
	}
	return a
}

// bounds returns when a transaction committed at the earliest and latest
// on the run's timeline: inside its call (and before the streams delivered
// it), or for a scanner's after the reading its events record.
func bounds(tl Timeline, c *Call, tx *Tx) (lo, hi int64) {
	hi = Unbounded
	if tx.RecvNs != 0 {
		hi = tx.RecvNs
	}
	if c != nil {
		return c.CallNs, min(hi, c.ReturnNs)
	}
	var at int64
	if len(tx.Lease) > 0 {
		at = tx.Lease[0].AtMs
	} else {
		at = tx.Completions[0].AtMs
	}
	return tl.FromScannerMs(at), hi
}

// orderViolations returns the pairs of transactions whose commit order
// contradicts real time: x committed (at the latest) before y was made (at
// the earliest), yet y is earlier in commit order.
func orderViolations(tl Timeline, txs []*Tx, callOf func(*Tx) *Call) []string {
	type iv struct {
		tx     *Tx
		lo, hi int64
	}
	ivs := make([]iv, len(txs))
	for i, tx := range txs {
		lo, hi := bounds(tl, callOf(tx), tx)
		ivs[i] = iv{tx, lo, hi}
	}
	var out []string
	for _, x := range ivs {
		for _, y := range ivs {
			if x.hi < y.lo && x.tx.Seq > y.tx.Seq {
				out = append(out, fmt.Sprintf("%s committed by %s, before %s began at %s, yet after it in commit order",
					x.tx, ns(x.hi), y.tx, ns(y.lo)))
			}
		}
	}
	slices.Sort(out)
	return out
}
