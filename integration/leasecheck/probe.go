package leasecheck

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/actions"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The probes drive, beside the clients, the paths whose defects the
// random histories are unlikely to meet in a short run, and check them on
// the spot (issue 36):
//
//   - incarnation: an execution is claimed, cancelled, removed by
//     execution retention (the retention action itself) and created again
//     with the same id, and claimed again under the same attempt and epoch;
//     every call of the removed incarnation's lease (each plain, ...Tx and
//     batched form) must be refused as stale;
//   - bounds: another session holds some of the probe's executions while
//     the probe ends them all at once (coalesced Completes, the held ones
//     with a short deadline) and runs FinishMany and FinishManyTx batches it
//     builds itself (the same execution twice, a transaction rolled back
//     after the call succeeded). A call returns by its deadline plus
//     probeSlack; once it has returned, no backend waits on the holder's
//     locks on its behalf; a call told a definite failure commits nothing
//     later; a rolled-back FinishManyTx leaves nothing.
//
// The probes' executions are in their own namespace, kept out of the
// histories and the end-state comparison (ReadSnapshot): the probes judge
// them. What they find is reported as violations of the checks
// "incarnation" and "bounds".

// probeNamespace is the namespace of the probes' executions.
const probeNamespace = "leasecheck-probe"

// probeSlack is how much later than its deadline a call may return.
const probeSlack = 2 * time.Second

// heldDeadline is the deadline of the probe's calls on held executions.
const heldDeadline = 600 * time.Millisecond

// probe runs the probes on one application process.
type probe struct {
	w     *Workload
	proc  *AppProcess
	admin *pgxpool.Pool
	rng   *rand.Rand

	mu     sync.Mutex
	found  []Violation
	notes  []string
	rounds map[string]int
	lanes  int
}

// Violations are what the probes found.
func (p *probe) Violations() []Violation {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Violation(nil), p.found...)
}

// Rounds counts the probes' completed rounds, by probe.
func (p *probe) Rounds() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]int{}
	for k, v := range p.rounds {
		out[k] = v
	}
	return out
}

// Notes are rounds the probes could not complete (a fault got in the
// way): not violations.
func (p *probe) Notes() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.notes...)
}

func (p *probe) violation(check, exec, what string, ops ...string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.found = append(p.found, Violation{Check: check, Exec: exec, What: what, Ops: ops})
}

// abandon notes a round a fault cut short.
func (p *probe) abandon(probe string, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.notes) < 10 {
		p.notes = append(p.notes, fmt.Sprintf("probe %s: a round was cut short: %v", probe, err))
	}
}

func (p *probe) done(probe string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.rounds == nil {
		p.rounds = map[string]int{}
	}
	p.rounds[probe]++
}

func (p *probe) lane() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lanes++
	return fmt.Sprintf("probe%d", p.lanes)
}

// run alternates the two probes until the workload stops.
func (p *probe) run(ctx context.Context) {
	time.Sleep(200 * time.Millisecond) // the clients first
	for i := 0; !p.w.stop.Load() && ctx.Err() == nil; i++ {
		var err error
		name := []string{"incarnation", "bounds"}[i%2]
		if i%2 == 0 {
			err = p.incarnation(ctx)
		} else {
			err = p.bounds(ctx)
		}
		if err != nil {
			p.abandon(name, err)
		} else {
			p.done(name)
		}
		time.Sleep(time.Duration(50+p.rng.IntN(200)) * time.Millisecond)
	}
}

// create makes an execution of the probes on lane with id (uuid.Nil: a new
// one).
func (p *probe) create(ctx context.Context, lane string, id ff.ExecutionID) (ff.ExecutionID, error) {
	cctx, cancel := callCtx(ctx)
	defer cancel()
	return p.proc.Store.Create(cctx, executions.CreateParams{ID: id.UUID, Lane: lane, Namespace: probeNamespace,
		RetryPolicy: executions.RetryPolicy{MaxRetries: 3}})
}

// claim claims the n executions of lane with a lease of 5 s (the probes
// end them well before; one a fault strands expires soon after the run).
// A row a long-lock fault holds is skipped by a claim: it tries again.
func (p *probe) claim(ctx context.Context, lane string, n int) ([]executions.Lease, error) {
	cctx, cancel := callCtx(ctx)
	defer cancel()
	var got []executions.Lease
	for range 50 {
		leases, err := p.proc.Store.Claim(cctx, executions.ClaimParams{Lane: lane, WorkerID: "probe", WorkerInstanceID: "probe-1",
			LeaseTTL: 5 * time.Second, Max: n - len(got)})
		if err != nil {
			return nil, err
		}
		if got = append(got, leases...); len(got) == n {
			return got, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil, fmt.Errorf("claimed %d of %d", len(got), n)
}

// staleCalls are the calls of a lease that must be refused once the lease
// is stale: each plain, ...Tx and batched form. The ...Tx forms run in a
// transaction of the caller's, committed when the call returned nil.
func staleCalls(st *executions.Store, pool *pgxpool.Pool, nowMs int64) map[string]func(context.Context, executions.Lease) error {
	inTx := func(ctx context.Context, fn func(pgx.Tx) error) error { return pgx.BeginFunc(ctx, pool, fn) }
	one := func(outs []executions.FinishOutcome, err error) error {
		if err != nil {
			return err
		}
		return outs[0].Err
	}
	later := time.UnixMilli(nowMs).Add(time.Hour)
	return map[string]func(context.Context, executions.Lease) error{
		"Complete": func(ctx context.Context, l executions.Lease) error { return st.Complete(ctx, l, []byte("stale")) },
		"Renew": func(ctx context.Context, l executions.Lease) error {
			_, err := st.Renew(ctx, l, time.Second)
			return err
		},
		"Fail": func(ctx context.Context, l executions.Lease) error {
			_, err := st.Fail(ctx, l, executions.FailParams{Message: "stale"})
			return err
		},
		"Delay":   func(ctx context.Context, l executions.Lease) error { return st.Delay(ctx, l, later) },
		"Release": func(ctx context.Context, l executions.Lease) error { return st.Release(ctx, l) },
		"CompleteTx": func(ctx context.Context, l executions.Lease) error {
			return inTx(ctx, func(tx pgx.Tx) error { return st.CompleteTx(ctx, tx, l, []byte("stale")) })
		},
		"RenewTx": func(ctx context.Context, l executions.Lease) error {
			return inTx(ctx, func(tx pgx.Tx) error {
				_, err := st.RenewTx(ctx, tx, l, time.Second)
				return err
			})
		},
		"FailTx": func(ctx context.Context, l executions.Lease) error {
			return inTx(ctx, func(tx pgx.Tx) error {
				_, err := st.FailTx(ctx, tx, l, executions.FailParams{Permanent: true})
				return err
			})
		},
		"DelayTx": func(ctx context.Context, l executions.Lease) error {
			return inTx(ctx, func(tx pgx.Tx) error { return st.DelayTx(ctx, tx, l, later) })
		},
		"ReleaseTx": func(ctx context.Context, l executions.Lease) error {
			return inTx(ctx, func(tx pgx.Tx) error { return st.ReleaseTx(ctx, tx, l) })
		},
		"FinishMany": func(ctx context.Context, l executions.Lease) error {
			return one(st.FinishMany(ctx, []executions.Finish{{Lease: l, Release: true}}))
		},
		"FinishManyTx": func(ctx context.Context, l executions.Lease) error {
			var err error
			txErr := inTx(ctx, func(tx pgx.Tx) error {
				err = one(st.FinishManyTx(ctx, tx, []executions.Finish{{Lease: l, Result: []byte("stale")}}))
				return err
			})
			return errors.Join(err, txErr)
		},
	}
}

// incarnation is one round of the incarnation probe.
func (p *probe) incarnation(ctx context.Context) error {
	st := p.proc.Store
	lane := p.lane()
	id, err := p.create(ctx, lane, ff.ExecutionID{})
	if err != nil {
		return err
	}
	leases, err := p.claim(ctx, lane, 1)
	if err != nil {
		return err
	}
	old := leases[0]
	cctx, cancel := callCtx(ctx)
	defer cancel()
	if err := st.Cancel(cctx, id, executions.CancelParams{Reason: "probe", By: "probe"}); err != nil {
		return err
	}
	if err := p.remove(cctx, id); err != nil {
		return err
	}
	if _, err := p.create(ctx, lane, id); err != nil {
		return err
	}
	if leases, err = p.claim(ctx, lane, 1); err != nil {
		return err
	}
	live := leases[0]
	if live.AttemptIndex != old.AttemptIndex || live.Epoch != old.Epoch {
		return fmt.Errorf("the new incarnation's lease is a%d e%d, not the old one's a%d e%d", live.AttemptIndex, live.Epoch, old.AttemptIndex, old.Epoch)
	}
	for name, call := range staleCalls(st, p.proc.Pool, p.proc.Clock.NowMs()) {
		err := call(cctx, old)
		switch {
		case errors.Is(err, ff.ErrStaleLease):
		case err == nil:
			p.violation("incarnation", id.String(), fmt.Sprintf("%s with a lease of the removed incarnation (a%d e%d %s) succeeded against the execution created again under the same id (lease %s)",
				name, old.AttemptIndex, old.Epoch, old.LeaseID, live.LeaseID))
			return nil
		case executions.IsFenced(err) || errors.Is(err, ff.ErrValidation):
			p.violation("incarnation", id.String(), fmt.Sprintf("%s with a lease of the removed incarnation: %v, want ErrStaleLease", name, err))
			return nil
		default:
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	// The live lease still completes (unless it ran out meanwhile on a
	// slow machine: every stale call that succeeded is reported above).
	return st.Complete(cctx, live, []byte("live"))
}

// remove removes the terminal execution id as execution retention does
// (the pipeline's own action), retrying while its row is locked.
func (p *probe) remove(ctx context.Context, id ff.ExecutionID) error {
	for range 50 {
		err := pgx.BeginFunc(ctx, p.proc.Pool, func(tx pgx.Tx) error {
			_, err := actions.Of(p.proc.Store.Pipeline()).RemoveExecutions(ctx, tx, actions.RemoveParams{Partition: id.Partition,
				CutoffMs: p.proc.Clock.NowMs() + 1, Filter: ff.Filter{Namespace: probeNamespace}, Limit: 1000})
			return err
		})
		if err != nil {
			return fmt.Errorf("removing %s: %w", id, err)
		}
		var n int
		if err := p.proc.Pool.QueryRow(ctx, `SELECT count(*) FROM ff_exec_core WHERE partition_key = $1 AND execution_id = $2`,
			id.Partition, id.UUID).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("retention did not remove %s", id)
}

// holder is another session's transaction holding execution rows.
type holder struct {
	tx  pgx.Tx
	pid int32
}

func (p *probe) hold(ctx context.Context, leases []executions.Lease) (*holder, error) {
	tx, err := p.admin.Begin(ctx)
	if err != nil {
		return nil, err
	}
	h := &holder{tx: tx}
	if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&h.pid); err != nil {
		_ = tx.Rollback(ctx)
		return nil, err
	}
	for _, l := range leases {
		if _, err := tx.Exec(ctx, `SELECT FROM ff_exec_core WHERE partition_key = $1 AND execution_id = $2 FOR UPDATE`,
			l.ID.Partition, l.ID.UUID); err != nil {
			_ = tx.Rollback(ctx)
			return nil, err
		}
	}
	return h, nil
}

// blocked lists the probe's process's backends waiting for the holder's
// locks (a long-lock fault may wait for them too: it is not the probe's).
func (p *probe) blocked(ctx context.Context, h *holder) ([]string, error) {
	rows, err := p.admin.Query(ctx, `SELECT format('pid %s (%s) waiting %s ms: %s', pid, application_name,
		(extract(epoch FROM clock_timestamp() - query_start) * 1000)::bigint, left(query, 120))
		FROM pg_stat_activity WHERE $1::int = ANY (pg_blocking_pids(pid)) AND application_name = $2`, h.pid, p.proc.AppName)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// bounds is one round of the bounds probe.
func (p *probe) bounds(ctx context.Context) error {
	st := p.proc.Store
	lane := p.lane()
	// Three held and nine free Completes, started interleaved, so that the
	// coalescer puts held and free calls in one batch (a batch of held
	// calls alone is given up whole by its callers).
	const held, free = 3, 9
	const n = held + free + 2
	for range n {
		if _, err := p.create(ctx, lane, ff.ExecutionID{}); err != nil {
			return err
		}
	}
	leases, err := p.claim(ctx, lane, n)
	if err != nil {
		return err
	}
	ends, batch, rolled := leases[:held+free], leases[n-2], leases[n-1]
	isHeld := func(i int) bool { return i%4 == 0 } // 0, 4 and 8 of the ends
	var heldLeases []executions.Lease
	for i, l := range ends {
		if isHeld(i) {
			heldLeases = append(heldLeases, l)
		}
	}
	h, err := p.hold(ctx, heldLeases)
	if err != nil {
		return err
	}
	defer func() { _ = h.tx.Rollback(context.WithoutCancel(ctx)) }()

	errs := make([]error, len(ends))
	var wg sync.WaitGroup
	for i, l := range ends {
		wg.Go(func() {
			within, result := 30*time.Second, "free"
			if isHeld(i) {
				within, result = heldDeadline, heldResult
			}
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), within)
			defer cancel()
			deadline, _ := cctx.Deadline()
			errs[i] = st.Complete(cctx, l, []byte(result))
			if late := time.Since(deadline); late > probeSlack {
				p.violation("bounds", l.ID.String(), fmt.Sprintf("Complete returned %s after its deadline (slack %s): %v", late.Round(time.Millisecond), probeSlack, errs[i]))
			}
		})
	}
	// A batch the caller builds: the same execution twice (the second
	// item is fenced by the first), and a FinishManyTx whose transaction
	// rolls back after the call succeeded.
	var batchOuts []executions.FinishOutcome
	var batchErr, rolledErr error
	wg.Go(func() {
		cctx, cancel := callCtx(ctx)
		defer cancel()
		batchOuts, batchErr = st.FinishMany(cctx, []executions.Finish{{Lease: batch, Result: []byte("first")}, {Lease: batch, Release: true}})
		rolledErr = pgx.BeginFunc(cctx, p.proc.Pool, func(tx pgx.Tx) error {
			outs, err := st.FinishManyTx(cctx, tx, []executions.Finish{{Lease: rolled, Result: []byte(rolledResult)}})
			if err == nil {
				err = outs[0].Err
			}
			if err == nil {
				err = errRollBack
			}
			return err
		})
	})
	wg.Wait()
	if _, err := h.tx.Exec(ctx, `SELECT 1`); err != nil {
		// A fault ended the holder: the held calls may have gone through.
		return fmt.Errorf("the holding session: %w", err)
	}

	// Once every call has returned, none waits on the holder any more.
	var waiting []string
	if !await(ctx, 5*time.Second, func() bool {
		waiting, err = p.blocked(ctx, h)
		return err == nil && len(waiting) == 0
	}) {
		if err != nil {
			return err
		}
		p.violation("bounds", heldLeases[0].ID.String(), "backends still wait on the holder's locks 5 s after every call on its rows returned", waiting...)
	}
	if err := h.tx.Rollback(ctx); err != nil {
		return err
	}
	for i, l := range ends {
		switch {
		case isHeld(i) && errs[i] == nil:
			p.violation("bounds", l.ID.String(), "Complete of an execution another session held succeeded within a deadline shorter than the hold")
		case !isHeld(i) && errs[i] != nil && !executions.IsFenced(errs[i]):
			return fmt.Errorf("Complete of a free execution: %w", errs[i])
		}
	}
	if batchErr != nil {
		return fmt.Errorf("FinishMany: %w", batchErr)
	}
	// The second item is fenced by the first, or by whatever fenced the
	// first (a lease that ran out on a slow machine).
	if (batchOuts[0].Err != nil && !executions.IsFenced(batchOuts[0].Err)) || !executions.IsFenced(batchOuts[1].Err) {
		p.violation("bounds", batch.ID.String(), fmt.Sprintf("FinishMany of one execution twice: %v, %v; want nil (or fenced), then fenced", batchOuts[0].Err, batchOuts[1].Err))
	}
	if !errors.Is(rolledErr, errRollBack) {
		return fmt.Errorf("FinishManyTx: %w", rolledErr)
	}

	// A Complete told a definite failure must not land once the holder let
	// go, nor a rolled-back FinishManyTx: their results must never show.
	// (The executions are then ended, unless their leases ran out.)
	cctx, cancel := callCtx(ctx)
	defer cancel()
	check := func(l executions.Lease, result, what string) error {
		if err := st.Complete(cctx, l, []byte("after")); err != nil && !executions.IsFenced(err) {
			return err
		}
		e, err := st.Get(cctx, l.ID)
		if err != nil {
			return err
		}
		if string(e.Result) == result {
			p.violation("bounds", l.ID.String(), fmt.Sprintf("%s: the execution is %s with that call's result", what, e.PublicState))
		}
		return nil
	}
	for i, l := range ends {
		if !isHeld(i) || errors.Is(errs[i], ff.ErrOutcomeUnknown) {
			continue // free, or it may have landed
		}
		if err := check(l, heldResult, fmt.Sprintf("a Complete whose caller was told it failed (%v) committed after the holder let go", errs[i])); err != nil {
			return err
		}
	}
	return check(rolled, rolledResult, "a FinishManyTx whose transaction rolled back left its Complete")
}

// The results of the bounds probe's Completes that must never land.
const (
	heldResult   = "held"
	rolledResult = "rolled back"
)

// errRollBack rolls back a transaction that succeeded.
var errRollBack = errors.New("leasecheck: rolled back on purpose")
