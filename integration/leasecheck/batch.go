package leasecheck

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/jackc/pgx/v5"
)

// batchItem is one item of a batch a client builds, with the call it is
// recorded as (nil for a second item on an execution already in the batch:
// it must write nothing, which batch checks itself).
type batchItem struct {
	x    *execution
	it   executions.Finish
	call *Call
}

// batch ends leases with one FinishMany (or, with inTx, one FinishManyTx
// in a transaction of the client's, rolled back one time in five after it
// succeeded) that the client builds itself: x's lease l; up to two other
// leases it holds; sometimes a lease it dropped (stale, or still live after
// an unknown outcome); sometimes l a second time. Every item but the second
// on an execution is recorded as a call of its own on its execution, over
// the batch's windows; the items commit in one transaction, each fenced on
// its own, so the checker sees them as concurrent calls that all commit at
// the same instant. A second item on an execution is fenced against what
// the first left, so it must fail: a nil outcome is a harness error, since
// the history of that execution cannot show it.
func (c *client) batch(ctx context.Context, x *execution, l executions.Lease, inTx bool) {
	c.w.batches.Add(1)
	in := map[string]bool{x.Key: true}
	items := []*batchItem{c.item(x, l)}
	keys := slices.Sorted(maps.Keys(c.leases))
	for _, k := range keys {
		if len(items) == 3 {
			break
		}
		if !in[k] && c.rng.IntN(2) == 0 {
			in[k] = true
			items = append(items, c.item(c.byKey[k], c.leases[k]))
		}
	}
	if len(c.stale) > 0 && c.rng.IntN(3) == 0 {
		s := c.stale[c.rng.IntN(len(c.stale))]
		if !in[s.x.Key] {
			in[s.x.Key] = true
			items = append(items, c.item(s.x, s.l))
		}
	}
	twice := c.rng.IntN(5) == 0
	if twice {
		items = append(items, &batchItem{x: x, it: executions.Finish{Lease: l, Release: c.rng.IntN(2) == 0}})
	}
	fin := make([]executions.Finish, len(items))
	for i, b := range items {
		fin[i] = b.it
		if b.call != nil {
			b.call = c.begin(b.x, b.call.Steps)
		}
	}
	cctx, cancel := callCtx(ctx)
	defer cancel()
	var outs []executions.FinishOutcome
	var err error
	rolledBack, commitErr := false, error(nil)
	if inTx {
		var tx pgx.Tx
		tx, err = c.proc.Pool.Begin(cctx)
		if err == nil {
			outs, err = c.proc.Store.FinishManyTx(cctx, tx, fin)
			c.w.bounds.returned(x.Key, "FinishManyTx", cctx)
			switch {
			case err != nil:
				_ = tx.Rollback(context.WithoutCancel(cctx))
			case c.rng.IntN(5) == 0:
				time.Sleep(c.holdFor())
				_ = tx.Rollback(context.WithoutCancel(cctx))
				rolledBack = true
			default:
				time.Sleep(c.holdFor())
				commitErr = tx.Commit(cctx)
			}
		}
	} else {
		outs, err = c.proc.Store.FinishMany(cctx, fin)
		c.w.bounds.returned(x.Key, "FinishMany", cctx)
	}
	if err == nil && len(outs) != len(items) {
		c.w.harness("FinishMany returned %d outcomes for %d items", len(outs), len(items))
		err = fmt.Errorf("FinishMany returned %d outcomes for %d items", len(outs), len(items))
	}
	for i, b := range items {
		if b.call == nil {
			if err == nil && outs[i].Err == nil && !rolledBack && commitErr == nil {
				c.w.harness("a batch finished %s twice with one lease (%s): the second item committed", b.x.ID, leaseRef(b.it.Lease))
			}
			continue
		}
		call := b.call
		switch {
		case err != nil && inTx:
			// Nothing of a failed FinishManyTx is kept: its transaction
			// was rolled back.
			call.Results = []Result{{Err: ErrOther}}
			c.end(call, false, err)
		case err != nil:
			c.end(call, true, err)
		case outs[i].Err != nil:
			call.Results = []Result{{Err: Classify(outs[i].Err)}}
			c.end(call, false, outs[i].Err)
		default:
			fr := outs[i].Fail
			call.Results = []Result{{Retried: fr.Retried, NextAttempt: fr.NextAttempt, DelayUntil: fr.DelayUntilMs}}
			call.RolledBack = rolledBack
			c.end(call, commitErr != nil, commitErr)
		}
		c.after(b.x, call)
	}
}

// item draws how a batch ends x's lease l: completed, failed (one in four
// permanently) or released.
func (c *client) item(x *execution, l executions.Lease) *batchItem {
	ref := leaseRef(l)
	b := &batchItem{x: x, it: executions.Finish{Lease: l}}
	var st Step
	switch r := c.rng.IntN(10); {
	case r < 5:
		st = Step{Kind: OpComplete, Lease: ref}
	case r < 8:
		st = Step{Kind: OpFail, Lease: ref, Permanent: c.rng.IntN(4) == 0}
		b.it.Fail = &executions.FailParams{Message: "leasecheck batch", Permanent: st.Permanent}
	default:
		st = Step{Kind: OpRelease, Lease: ref}
		b.it.Release = true
	}
	b.call = &Call{Steps: []Step{st}}
	return b
}
