package leasecheck

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/runner"
)

// The runners of a run: package runner's own loop (claims in batches,
// background renewals, ends through the Store's coalesced Complete, Fail
// and Release) on the shared lanes, beside the clients that revoke, cancel,
// reclaim and claim the same executions. Every call a runner makes goes
// through a recordingStore, so it is checked like a client's: a stale lease
// never completes, whatever batch its Complete rode in.

// runnerLoop runs one runner after another on lane in proc until the
// workload stops: each runs for 0.5-3 s and is then stopped, with
// executions in hand (they are finished or released), under a new
// instance.
func (w *Workload) runnerLoop(ctx context.Context, proc *AppProcess, lane string, client int, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, uint64(client)))
	h := &runnerHandler{rng: rng}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for round := 0; !w.stop.Load() && ctx.Err() == nil; round++ {
		ttl := time.Duration(300+rng.IntN(1200)) * time.Millisecond
		cfg := runner.Config{Lane: lane, WorkerID: fmt.Sprintf("runner-%d", client),
			WorkerInstanceID: fmt.Sprintf("p%d-r%d-%d", proc.Index, client, round),
			MaxWorkers:       4 + rng.IntN(13), LeaseTTL: ttl, FetchPollInterval: 20 * time.Millisecond,
			FetchCooldown: time.Duration(rng.IntN(5)) * time.Millisecond,
			StopTimeout:   time.Duration(rng.IntN(200)) * time.Millisecond, Logger: quiet}
		h.ttl = ttl
		st := &recordingStore{w: w, proc: proc, client: client}
		r, err := runner.New(st, cfg, h.handle)
		if err != nil {
			w.harness("runner.New: %v", err)
			return
		}
		rctx, cancel := context.WithTimeout(ctx, time.Duration(500+rng.IntN(2500))*time.Millisecond)
		err = r.Run(rctx)
		cancel()
		if err != nil {
			time.Sleep(50 * time.Millisecond) // a fault took the lane registration; try again
		}
	}
}

// runnerHandler draws what each execution's handler does: return at once
// or after a while (renewals keep its lease), fail (now and then
// permanently), panic, or work until its lease is lost.
type runnerHandler struct {
	mu  sync.Mutex
	rng *rand.Rand
	ttl time.Duration
}

func (h *runnerHandler) draw() (kind int, d time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.rng.IntN(100), time.Duration(h.rng.Float64() * float64(h.ttl))
}

func (h *runnerHandler) handle(ctx context.Context, ex *runner.Execution) ([]byte, error) {
	kind, d := h.draw()
	switch {
	case kind < 40: // quick: many ends commit together
		sleepCtx(ctx, d/500)
		return []byte(`"ok"`), nil
	case kind < 55: // longer than the lease: renewals keep it
		sleepCtx(ctx, h.ttl/2+d)
		return nil, ctx.Err()
	case kind < 60: // ignores its context, then completes
		time.Sleep(d / 2)
		return nil, nil
	case kind < 75:
		sleepCtx(ctx, d/10)
		return nil, errors.New("handler failed")
	case kind < 80:
		return nil, runner.Permanent(errors.New("handler failed for good"))
	case kind < 85:
		panic("handler panicked")
	default: // works until the lease is lost or the runner stops
		sleepCtx(ctx, 2*h.ttl+d)
		return nil, context.Cause(ctx)
	}
}

// sleepCtx waits d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// recordingStore is the runner.Store a runner of the run is given: each
// call goes to the process's Store and is recorded, with its windows, on
// the execution it is about (a claim, on each execution it returned).
type recordingStore struct {
	w      *Workload
	proc   *AppProcess
	client int
}

var (
	_ runner.Store       = (*recordingStore)(nil)
	_ runner.LeaseReader = (*recordingStore)(nil)
)

// LeaseStates passes the runner's lease checks (a read) through, unrecorded:
// they change nothing, and what the runner does on them (a handler
// cancelled, an end of unknown outcome committed again) is recorded.
func (s *recordingStore) LeaseStates(ctx context.Context, leases []executions.Lease) ([]executions.LeaseState, error) {
	return s.proc.Store.LeaseStates(ctx, leases)
}

func (s *recordingStore) RegisterLane(ctx context.Context, lane, by string) error {
	return s.proc.Store.RegisterLane(ctx, lane, by)
}

func (s *recordingStore) Claim(ctx context.Context, p executions.ClaimParams) ([]executions.Lease, error) {
	st := Step{Kind: OpClaim, TTL: p.LeaseTTL.Milliseconds(), Instance: p.WorkerInstanceID}
	call := s.w.begin(s.proc, s.client, "", []Step{st})
	call.Runner = true
	leases, err := s.proc.Store.Claim(ctx, p)
	if err != nil {
		if Classify(err) != ErrOther {
			s.w.harness("a runner's Claim failed with a typed error: %v", err)
			return nil, err
		}
		s.w.settle(s.proc, call, Result{}, err, p.Lane)
		return nil, err
	}
	if len(leases) == 0 {
		return leases, nil // an empty claim is legal in every state: nothing to record
	}
	s.w.returned(s.proc, call, false)
	for _, l := range leases {
		s.w.recordLease(call, st, l)
	}
	return leases, nil
}

// leaseCall records one fenced call of the runner on its lease's execution.
func (s *recordingStore) leaseCall(l executions.Lease, st Step, do func() (Result, error)) error {
	x := s.w.leaseOf(l)
	if x == nil {
		s.w.harness("a runner called %s on %s, an execution the run never created", st.Kind, l.ID)
		_, err := do()
		return err
	}
	st.Lease = leaseRef(l)
	call := s.w.begin(s.proc, s.client, x.Key, []Step{st})
	call.Runner = true
	r, err := do()
	s.w.settle(s.proc, call, r, err, "")
	x.calls.Add(1)
	return err
}

func (s *recordingStore) Renew(ctx context.Context, l executions.Lease, ttl time.Duration) (executions.Lease, error) {
	var nl executions.Lease
	err := s.leaseCall(l, Step{Kind: OpRenew, TTL: ttl.Milliseconds()}, func() (Result, error) {
		var err error
		nl, err = s.proc.Store.Renew(ctx, l, ttl)
		return Result{Lease: leaseRef(nl)}, err
	})
	return nl, err
}

func (s *recordingStore) Complete(ctx context.Context, l executions.Lease, result []byte) error {
	return s.leaseCall(l, Step{Kind: OpComplete}, func() (Result, error) {
		return Result{}, s.proc.Store.Complete(ctx, l, result)
	})
}

func (s *recordingStore) Fail(ctx context.Context, l executions.Lease, p executions.FailParams) (executions.FailResult, error) {
	var fr executions.FailResult
	err := s.leaseCall(l, Step{Kind: OpFail, Permanent: p.Permanent}, func() (Result, error) {
		var err error
		fr, err = s.proc.Store.Fail(ctx, l, p)
		return Result{Retried: fr.Retried, NextAttempt: fr.NextAttempt, DelayUntil: fr.DelayUntilMs}, err
	})
	return fr, err
}

func (s *recordingStore) Release(ctx context.Context, l executions.Lease) error {
	return s.leaseCall(l, Step{Kind: OpRelease}, func() (Result, error) {
		return Result{}, s.proc.Store.Release(ctx, l)
	})
}

// RunnerStats counts what the runners' calls did, so that a run shows the
// runner's paths were taken: ends that committed in one transaction with
// other executions' ends (a coalesced batch), and ends the fence refused.
type RunnerStats struct {
	// Calls recorded (a claim counts once per lease it returned).
	Calls int
	// Ends: Complete, Fail and Release calls; Committed: those that
	// committed; Batched: those whose transaction holds other executions'
	// events too; Fenced: those refused with a typed lease error (stale,
	// expired, not active); Unknown: outcome unknown.
	Ends, Committed, Batched, Fenced, Unknown int
	// Released: Release calls that committed (a runner stopped with the
	// execution in hand).
	Released int
}

// String renders the counts on one line.
func (s RunnerStats) String() string {
	return fmt.Sprintf("%d calls; %d ends: %d committed (%d in a transaction with other executions' ends, %d releases), %d refused by the fence, %d of unknown outcome",
		s.Calls, s.Ends, s.Committed, s.Batched, s.Released, s.Fenced, s.Unknown)
}

func runnerStats(calls []*Call, snap *Snapshot) RunnerStats {
	perXact := map[int64]int{}
	for _, txs := range snap.Txs {
		for _, tx := range txs {
			perXact[tx.Xact]++
		}
	}
	var s RunnerStats
	for _, c := range calls {
		if !c.Runner {
			continue
		}
		s.Calls++
		switch c.Steps[0].Kind {
		case OpComplete, OpFail, OpRelease:
		default:
			continue
		}
		s.Ends++
		switch {
		case c.Unknown:
			s.Unknown++
		case c.failed():
			s.Fenced++
		default:
			s.Committed++
			if c.Tx != nil && perXact[c.Tx.Xact] > 1 {
				s.Batched++
			}
			if c.Steps[0].Kind == OpRelease {
				s.Released++
			}
		}
	}
	return s
}
