// Package runner is a worker runtime for the execution store: it claims
// executions of a lane in batches, runs a handler for each, renews their
// leases in the background, and completes and fails them without holding a
// handler's slot, through the Store's Complete, Fail and Release, which
// commit concurrent calls together (several executions per transaction,
// each still fenced and with its own outbox rows). It is to the store what River's
// producer, executor and batch completer are to River's jobs, and it is
// where the store's speed comes from: the hand-written Claim → Complete
// loop costs two transactions per execution and many concurrent claimers.
//
// # Semantics
//
//   - A handler returns the execution's result, or an error: the attempt
//     fails and is retried by the execution's retry policy, unless the error
//     wraps Permanent. A handler that panics fails its attempt the same way
//     (the panic and its stack are logged).
//   - A handler's context is cancelled with cause ErrLeaseLost when its
//     lease is gone (revoked, cancelled, reclaimed, expired, or its
//     execution's deadline passed); whatever it returns then is dropped:
//     another worker, or nobody, owns the execution now. The runner learns
//     it within LeaseCheckInterval (1 s by default) and a query, whatever
//     LeaseTTL is: every interval it reads the states of all the leases it
//     holds, in one query (executions.Store.LeaseStates); a renewal that is
//     refused tells it too.
//   - Leases are renewed once a third of LeaseTTL is left, by a background
//     loop. A renewal that fails for a reason other than fencing (the
//     database is away) is tried again until the lease runs out.
//   - Run returns once its context is done and everything it held is
//     finished or released: it stops claiming, waits up to StopTimeout for
//     running handlers, then cancels their contexts with cause ErrStopping;
//     a handler that returns an error after that is released (runnable at
//     once, without using a retry) instead of failed. Run then waits for
//     every end to be committed (or given up, below).
//   - An end whose commit failed for a reason other than its lease (the
//     database was away, or the connection was lost with the COMMIT's
//     answer: ff.ErrOutcomeUnknown) is resolved, not abandoned: the runner
//     reads the lease's state (executions.Store.LeaseStates), counts the
//     end as committed when the lease's own end is there, and commits it
//     again when the lease still holds, backing off from 50 ms to 1 s
//     between tries, until the lease runs out, or until StopTimeout after
//     Run's context is done. So a handler that succeeded ends completed,
//     without a retry spent, as long as the database is back before its
//     lease runs out (renewals stop when the handler returns, with at
//     least about a sixth of LeaseTTL left, usually a third or more).
//   - An end the runner could not commit before then leaves the lease to
//     run out, and the attempt_timeout scanner expires or retries the
//     execution, as for a worker that died. Nothing is carried only by the
//     runner.
//   - The lease checks and the resolution of ends need a Store that is
//     also a LeaseReader (*executions.Store is); without one, lost leases
//     are noticed at renewal, and ends that failed are left to run out.
package runner

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/metric"
)

// ErrLeaseLost is the cause of a handler's context when its lease no longer
// holds the execution.
var ErrLeaseLost = errors.New("runner: the lease no longer holds the execution")

// maxClaimBackoff bounds the wait between claims that keep failing (the
// database is away).
const maxClaimBackoff = 5 * time.Second

// ErrStopping is the cause of a handler's context when Run is stopping and
// StopTimeout has passed.
var ErrStopping = errors.New("runner: stopping")

// permanentError marks a handler error that must not be retried.
type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// Permanent wraps err so that the attempt fails without a retry, whatever
// the execution's retry policy allows.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return permanentError{err}
}

// Store is what a Runner needs of the execution store: *executions.Store
// implements it, and that is what a Runner is normally given. It is an
// interface so that a wrapper can observe or instrument every call the
// runner makes (the lease checker records them to check its histories);
// a wrapper must pass each call through to one Store, whose Complete, Fail
// and Release commit concurrent calls together.
type Store interface {
	RegisterLane(ctx context.Context, lane, by string) error
	Claim(ctx context.Context, p executions.ClaimParams) ([]executions.Lease, error)
	Renew(ctx context.Context, lease executions.Lease, ttl time.Duration) (executions.Lease, error)
	Complete(ctx context.Context, lease executions.Lease, result []byte) error
	Fail(ctx context.Context, lease executions.Lease, p executions.FailParams) (executions.FailResult, error)
	Release(ctx context.Context, lease executions.Lease) error
}

var _ Store = (*executions.Store)(nil)

// LeaseReader is what a Store may offer besides Store, as *executions.Store
// does: the states of many leases in one query (see
// executions.Store.LeaseStates). A Runner whose Store is a LeaseReader
// checks the leases it holds every LeaseCheckInterval, and resolves the
// ends it could not commit (see the package doc). A wrapper that passes
// Store's calls through should pass this one through too.
type LeaseReader interface {
	LeaseStates(ctx context.Context, leases []executions.Lease) ([]executions.LeaseState, error)
}

var _ LeaseReader = (*executions.Store)(nil)

// Execution is what a handler works on: the execution's lease (ID,
// attempt, epoch) and its payload.
type Execution struct {
	executions.Lease
}

// Handler runs one execution and returns its result.
type Handler func(ctx context.Context, ex *Execution) (result []byte, err error)

// Config says what a Runner claims and how.
type Config struct {
	// Lane the runner claims from. Required.
	Lane string
	// WorkerID names the worker in the attempts it opens (default
	// "runner"); WorkerInstanceID names this process (default WorkerID
	// and a random suffix).
	WorkerID, WorkerInstanceID string
	// Capabilities the runner offers (see executions.ClaimParams).
	Capabilities []string
	// MaxWorkers is how many handlers run at once. Required, 1..10,000.
	MaxWorkers int
	// LeaseTTL of each claim; the runner renews before it runs out.
	// Required, at least 100 ms.
	LeaseTTL time.Duration
	// FetchPollInterval is how long the runner waits before asking again
	// after a claim found fewer executions than it had room for. 0 means
	// the default, 100 ms (0 itself would be a busy loop).
	FetchPollInterval time.Duration
	// FetchCooldown is the least time between two claims, so that slots
	// freed one by one are claimed together; after a claim that took
	// longer than it, the runner also waits, up to FetchCooldown from the
	// claim's return, for a claim's share of slots to be free (or all
	// those the claims in flight leave) before it claims fewer. 0 claims
	// as soon as a slot is free.
	FetchCooldown time.Duration
	// ClaimsInFlight is how many claims may run at once, each asking for
	// its share of the free slots (MaxWorkers/ClaimsInFlight, at least
	// 64). 0 means the machine's and the workers': runtime.GOMAXPROCS/4
	// and one per 64 MaxWorkers, whichever is less, at least 1 and at most
	// 4 (1 up to 7 cores or 127 workers; 4 on 16 cores with 256 workers).
	// On 16 cores one claim's round trip bounded a runner of 256 workers
	// while the server had cores to spare.
	ClaimsInFlight int
	// StopTimeout is how long Run waits for running handlers once its
	// context is done before it cancels their contexts. 0 cancels them at
	// once. It also bounds, from the same moment, how long ends whose
	// commit failed are still resolved.
	StopTimeout time.Duration
	// LeaseCheckInterval is how often the runner reads the states of the
	// leases it holds, in one query, to cancel the handlers whose lease is
	// gone (with a LeaseReader store). 0 means the default, 1 s; otherwise
	// at least 10 ms.
	LeaseCheckInterval time.Duration
	// Logger receives the runner's warnings (default slog.Default()).
	Logger *slog.Logger
	// MeterProvider, when set, receives the runner's metrics (see
	// MetricExecutions and the others).
	MeterProvider metric.MeterProvider
}

// Defaults of the Config fields whose zero value cannot mean itself.
const (
	DefaultFetchPollInterval  = 100 * time.Millisecond
	DefaultLeaseCheckInterval = time.Second
)

// Resolving an end whose commit failed: the wait before the first read of
// its lease, doubling with each try up to maxResolveBackoff.
const (
	minResolveBackoff = 50 * time.Millisecond
	maxResolveBackoff = time.Second
)

func (c *Config) check() error {
	if err := ff.CheckText("lane", c.Lane, true, ff.MaxName); err != nil {
		return err
	}
	if c.WorkerID == "" {
		c.WorkerID = "runner"
	}
	if c.WorkerInstanceID == "" {
		c.WorkerInstanceID = c.WorkerID + "-" + uuid.NewString()[:8]
	}
	switch {
	case c.MaxWorkers < 1 || c.MaxWorkers > 10_000:
		return ff.Validationf("max_workers", "%d is outside 1..10000", c.MaxWorkers)
	case c.LeaseTTL < 100*time.Millisecond:
		return ff.Validationf("lease_ttl", "%s: want at least 100ms", c.LeaseTTL)
	case c.FetchPollInterval < 0 || c.FetchCooldown < 0 || c.StopTimeout < 0:
		return ff.Validationf("runner", "negative FetchPollInterval, FetchCooldown or StopTimeout")
	case c.ClaimsInFlight < 0 || c.ClaimsInFlight > c.MaxWorkers:
		return ff.Validationf("claims_in_flight", "%d is outside 0..MaxWorkers (%d)", c.ClaimsInFlight, c.MaxWorkers)
	case c.LeaseCheckInterval != 0 && c.LeaseCheckInterval < 10*time.Millisecond:
		return ff.Validationf("lease_check_interval", "%s: want at least 10ms (0 means the default, %s)",
			c.LeaseCheckInterval, DefaultLeaseCheckInterval)
	}
	if c.FetchPollInterval == 0 {
		c.FetchPollInterval = DefaultFetchPollInterval
	}
	if c.LeaseCheckInterval == 0 {
		c.LeaseCheckInterval = DefaultLeaseCheckInterval
	}
	if c.ClaimsInFlight == 0 {
		c.ClaimsInFlight = defaultClaims(runtime.GOMAXPROCS(0), c.MaxWorkers)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return nil
}

// defaultClaims is ClaimsInFlight's default for a machine of procs
// threads and maxWorkers slots: procs/4 and a claim per 64 slots, at least
// 1 and at most 4. ffctl bench lifecycle on 16 cores: with 256 workers,
// four claims side by side ran 9,900 executions/s where one ran 4,762
// (0.79 and 0.35 of River's no-op jobs); with 16 and 64 workers, slots
// split four ways made claims too small (715 and 2,914/s against 2,854
// and 4,746).
func defaultClaims(procs, maxWorkers int) int {
	return min(max(min(procs/4, maxWorkers/minClaimShare), 1), 4)
}

// minClaimShare is the least slots a claim asks for when that many are
// free (see fetch).
const minClaimShare = 64

// Runner claims and runs executions of one lane. Create it with New and
// call Run once.
type Runner struct {
	st      Store
	lr      LeaseReader // st, when it is one; else nil
	cfg     Config
	handler Handler
	m       *metrics

	active atomic.Int64
	freed  chan struct{} // a handler slot was freed (buffered 1)
	mu     sync.Mutex
	// held are the running handlers by lease id: an execution whose lease
	// was lost may be claimed again while the first handler still runs.
	held map[uuid.UUID]*running
	ran  atomic.Bool
	// resolving bounds the resolution of ends whose commit failed: done
	// StopTimeout after Run's context. Set by Run before it starts any
	// goroutine.
	resolving context.Context
}

// running is one execution in a handler.
type running struct {
	lease  executions.Lease
	cancel context.CancelCauseFunc
	ctx    context.Context
	ex     *Execution // the handler's, never written after start
}

// New returns a Runner of store's executions in cfg.Lane, running h.
func New(store Store, cfg Config, h Handler) (*Runner, error) {
	if store == nil || h == nil {
		return nil, ff.Validationf("runner", "a store and a handler are required")
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.MeterProvider, cfg.Lane)
	if err != nil {
		return nil, err
	}
	lr, _ := store.(LeaseReader)
	return &Runner{st: store, lr: lr, cfg: cfg, handler: h, m: m,
		freed: make(chan struct{}, 1), held: make(map[uuid.UUID]*running)}, nil
}

// Run registers the lane (so that a runner may start before the first
// execution of its lane is created), claims and runs executions until ctx
// is done, then stops gracefully (see the package doc) and returns nil. It
// returns an error only when it was already run or could not register the
// lane.
func (r *Runner) Run(ctx context.Context) error {
	if !r.ran.CompareAndSwap(false, true) {
		return errors.New("runner: Run was already called")
	}
	if err := r.st.RegisterLane(ctx, r.cfg.Lane, "runner "+r.cfg.WorkerInstanceID); err != nil {
		return fmt.Errorf("runner: registering lane %s: %w", ff.Excerpt(r.cfg.Lane), err)
	}
	// Handlers and the ends they hand on outlive ctx until they are done.
	base := context.WithoutCancel(ctx)
	var handlers, ends, loops sync.WaitGroup
	resolving, stopResolving := context.WithCancel(base)
	defer stopResolving()
	r.resolving = resolving
	renewCtx, stopRenew := context.WithCancel(base)
	loops.Go(func() { r.renew(renewCtx) })
	if r.lr != nil {
		loops.Go(func() { r.watch(renewCtx) })
	}

	r.fetch(ctx, base, &handlers, &ends)
	resolveTimer := time.AfterFunc(r.cfg.StopTimeout, stopResolving)
	defer resolveTimer.Stop()

	// Stopping: wait for the handlers, then cancel what is left.
	waited := make(chan struct{})
	go func() {
		handlers.Wait()
		close(waited)
	}()
	timer := time.NewTimer(r.cfg.StopTimeout)
	select {
	case <-waited:
		timer.Stop()
	case <-timer.C:
		r.mu.Lock()
		for _, h := range r.held {
			h.cancel(ErrStopping)
		}
		r.mu.Unlock()
		<-waited
	}
	ends.Wait()
	stopRenew()
	loops.Wait()
	return nil
}

// claimed is what a claim in flight brought back.
type claimed struct {
	asked  int
	leases []executions.Lease
	err    error
}

// fetch is the claim loop: it claims as many executions as there are free
// slots and starts their handlers, until ctx is done. Up to
// ClaimsInFlight claims run at once (each FetchCooldown after the one
// before), each asking for its share of the free slots: one claim's round
// trip (its rows, its events, its commit) then no longer bounds the rate
// at which slots fill.
func (r *Runner) fetch(ctx, base context.Context, handlers, ends *sync.WaitGroup) {
	p := executions.ClaimParams{Lane: r.cfg.Lane, WorkerID: r.cfg.WorkerID, WorkerInstanceID: r.cfg.WorkerInstanceID,
		LeaseTTL: r.cfg.LeaseTTL, Capabilities: r.cfg.Capabilities}
	more := true // the lane may have more: the last claim filled its ask (with claims side by side, found any)
	var last time.Time
	wait := r.cfg.FetchPollInterval // after an empty claim; grows while claims fail
	claims := r.cfg.ClaimsInFlight
	// Each claim asks for at most its share of the slots, and never for
	// fewer than minClaimShare when that many are free: with a cooldown
	// between claims, smaller ones would cap the rate (16 workers in four
	// claims of 4 ran a quarter of what one claim of 16 ran).
	share := max(r.cfg.MaxWorkers/claims, minClaimShare)
	done := make(chan claimed, claims)
	inFlight, asked := 0, 0 // claims in flight, and the slots they asked for
	var returned time.Time  // when the last claim returned
	got := func(c claimed) {
		returned = time.Now()
		inFlight--
		asked -= c.asked
		if c.err != nil {
			if ctx.Err() == nil {
				wait = min(2*wait, max(maxClaimBackoff, r.cfg.FetchPollInterval))
				r.cfg.Logger.WarnContext(ctx, "runner: claim failed; trying again", "lane", r.cfg.Lane, "in", wait, "error", c.err)
			}
			more = false
			return
		}
		wait = r.cfg.FetchPollInterval
		// One claim at a time: fewer than it asked for means the lane has
		// no more now. Claims side by side skip each other's rows at the
		// head of the lane, so only an empty one means that.
		more = len(c.leases) == c.asked || (claims > 1 && len(c.leases) > 0)
		r.m.claimed(ctx, len(c.leases))
		for _, l := range c.leases {
			r.start(base, l, handlers, ends)
		}
	}
	// A claim in flight when ctx ends still commits, and its executions
	// are run or released like the others: cut off, they would wait for
	// their leases to expire.
	defer func() {
		for ; inFlight > 0; got(<-done) {
		}
	}()
	for ctx.Err() == nil {
		free := r.cfg.MaxWorkers - int(r.active.Load()) - asked
		claimable := free > 0 && more && inFlight < claims
		var gather <-chan time.Time
		var gt *time.Timer
		if claimable {
			if cool := r.cfg.FetchCooldown - time.Since(last); cool > 0 {
				if !sleep(ctx, cool) {
					return
				}
				continue
			}
			// The handlers a claim started free their slots one by one.
			// After a claim that outlasted the cooldown, the first slot
			// freed would start the next claim at once, a whole round
			// trip for a few slots while the others free: it waits instead,
			// at most FetchCooldown from the claim's return, for a claim's
			// share (or all the slots the claims in flight leave). At 64
			// workers on 2 cores, where a claim took 5.5 ms, a fifth of
			// the claims asked for 1 to 7 slots; waiting for half a share
			// ran 0.81-0.87 of River's no-op jobs, for all of it 0.89-1.00,
			// against 0.71-0.77 (ffctl bench lifecycle).
			if wait := r.cfg.FetchCooldown - time.Since(returned); wait > 0 && free < min(share, r.cfg.MaxWorkers-asked) {
				gt = time.NewTimer(wait)
				gather = gt.C
			}
		}
		if claimable && gather == nil {
			last = time.Now()
			ask := p
			ask.Max = min(free, share)
			inFlight++
			asked += ask.Max
			go func() {
				// Bounded by the lease TTL, past which its leases would be
				// worthless.
				claimCtx, cancel := context.WithTimeout(base, r.cfg.LeaseTTL)
				defer cancel()
				leases, err := r.st.Claim(claimCtx, ask)
				done <- claimed{asked: ask.Max, leases: leases, err: err}
			}()
			continue
		}
		var poll <-chan time.Time
		var t *time.Timer
		if !more && inFlight == 0 {
			t = time.NewTimer(wait)
			poll = t.C
		}
		select {
		case <-ctx.Done():
		case <-r.freed:
		case c := <-done:
			got(c)
		case <-poll:
			more = true
		case <-gather:
		}
		if t != nil {
			t.Stop()
		}
		if gt != nil {
			gt.Stop()
		}
	}
}

// start runs l's handler in a goroutine of its own. The handler's slot is
// free as soon as it returns; its end is committed by a goroutine of ends.
func (r *Runner) start(base context.Context, l executions.Lease, handlers, ends *sync.WaitGroup) {
	hctx, cancel := context.WithCancelCause(base)
	h := &running{lease: l, cancel: cancel, ctx: hctx, ex: &Execution{Lease: l}}
	r.mu.Lock()
	r.held[l.LeaseID] = h
	r.mu.Unlock()
	r.active.Add(1)
	r.m.activeAdd(base, 1)
	handlers.Go(func() {
		defer func() {
			r.mu.Lock()
			delete(r.held, l.LeaseID)
			r.mu.Unlock()
			cancel(nil)
			r.active.Add(-1)
			r.m.activeAdd(base, -1)
			select {
			case r.freed <- struct{}{}:
			default:
			}
		}()
		if it, ok := r.runOne(h); ok {
			ends.Go(func() { r.finish(base, it) })
		}
	})
}

// runOne runs the handler of h and returns how its attempt ends, or false
// when the lease was lost (there is nothing to commit).
func (r *Runner) runOne(h *running) (executions.Finish, bool) {
	started := time.Now()
	result, err := r.call(h)
	r.m.handled(h.ctx, time.Since(started))
	r.mu.Lock()
	it := executions.Finish{Lease: h.lease, Result: result}
	r.mu.Unlock()
	switch cause := context.Cause(h.ctx); {
	case errors.Is(cause, ErrLeaseLost):
		r.m.finished(h.ctx, outcomeLost)
		return it, false
	case err == nil:
	case errors.Is(cause, ErrStopping):
		it.Release = true
	default:
		it.Fail = &executions.FailParams{Message: message(err), Permanent: errors.As(err, new(permanentError))}
	}
	return it, true
}

// call runs the handler, turning a panic into an error.
func (r *Runner) call(h *running) (result []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			r.cfg.Logger.ErrorContext(h.ctx, "runner: handler panicked; the attempt fails", "execution", h.lease.ID.String(),
				"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			result, err = nil, fmt.Errorf("panic: %v", p)
		}
	}()
	return r.handler(h.ctx, h.ex)
}

// message is err's text as a failure message: valid UTF-8, at most
// ff.MaxMessage bytes.
func message(err error) string {
	s := strings.ToValidUTF8(err.Error(), "\uFFFD")
	if len(s) > ff.MaxMessage {
		s = strings.ToValidUTF8(s[:ff.MaxMessage-3], "") + "..."
	}
	return s
}

// finish commits how an attempt ended through the Store's Complete, Fail
// or Release, which commit concurrent calls together (one FinishMany per
// batch, each call fenced on its own; a call whose execution another
// transaction holds is finished alone so that it holds up no other). An end
// whose commit failed for a reason other than its lease is resolved
// (resolve).
func (r *Runner) finish(ctx context.Context, it executions.Finish) {
	fr, err := r.commit(ctx, it)
	resolved := false
	if err != nil && r.lr != nil && resolvable(err) {
		r.cfg.Logger.WarnContext(ctx, "runner: an execution's end may not have committed; resolving it while its lease lasts",
			"execution", it.Lease.ID.String(), "error", err)
		fr, err = r.resolve(it, err)
		resolved = err == nil
	}
	switch {
	case err == nil && it.Release:
		r.m.finished(ctx, outcomeReleased)
	case err == nil && it.Fail == nil:
		r.m.finished(ctx, outcomeCompleted)
	case err == nil && fr.Retried:
		r.m.finished(ctx, outcomeRetried)
	case err == nil:
		r.m.finished(ctx, outcomeFailed)
	case executions.IsFenced(err):
		r.m.finished(ctx, outcomeLost)
		r.cfg.Logger.InfoContext(ctx, "runner: an execution's lease was lost before its end was committed",
			"execution", it.Lease.ID.String(), "error", err)
	default:
		r.m.finished(ctx, outcomeError)
		r.cfg.Logger.ErrorContext(ctx, "runner: could not commit an execution's end; its lease will run out and the attempt_timeout scanner takes it over",
			"execution", it.Lease.ID.String(), "error", err)
	}
	if resolved {
		r.cfg.Logger.InfoContext(ctx, "runner: an execution's end is committed after all", "execution", it.Lease.ID.String())
	}
}

// commit sends the end it through the Store once.
func (r *Runner) commit(ctx context.Context, it executions.Finish) (executions.FailResult, error) {
	switch {
	case it.Release:
		return executions.FailResult{}, r.st.Release(ctx, it.Lease)
	case it.Fail != nil:
		return r.st.Fail(ctx, it.Lease, *it.Fail)
	default:
		return executions.FailResult{}, r.st.Complete(ctx, it.Lease, it.Result)
	}
}

// resolvable reports whether an end that failed with err may still be
// committed under its lease: the failure was not the lease's (fenced) nor
// the input's (validation), so the database was away or the answer to the
// end's COMMIT was lost (ff.ErrOutcomeUnknown).
func resolvable(err error) bool {
	return !executions.IsFenced(err) && !errors.Is(err, ff.ErrValidation)
}

// resolve finds out whether the end it, whose commit failed with err (see
// resolvable), committed after all, and commits it again while its lease
// still holds, backing off between tries, until the lease runs out or
// Run's stop bound (r.resolving) ends. It returns nil once the end is
// committed (its FailResult says only whether a Fail was retried), a fenced
// error once the lease is known to have ended otherwise, or the last error
// when it gave up.
func (r *Runner) resolve(it executions.Finish, err error) (executions.FailResult, error) {
	ctx, cancel := context.WithDeadline(r.resolving, time.UnixMilli(it.Lease.ExpiresAtMs))
	defer cancel()
	wait := minResolveBackoff
	recommitted := false // the last commit was refused by the fence
	for {
		if !recommitted {
			if !sleep(ctx, wait) {
				return executions.FailResult{}, err
			}
			wait = min(2*wait, maxResolveBackoff)
		}
		states, rerr := r.lr.LeaseStates(ctx, []executions.Lease{it.Lease})
		if rerr != nil {
			if ctx.Err() == nil {
				err = rerr
			}
			recommitted = false
			continue
		}
		st := states[0]
		switch {
		case st.Status == executions.LeaseEnded:
			return executions.FailResult{Retried: st.Outcome == "retry"}, nil
		case st.Status == executions.LeaseHeld && !recommitted:
			fr, cerr := r.commit(ctx, it)
			if cerr == nil || errors.Is(cerr, ff.ErrValidation) {
				return fr, cerr
			}
			// Refused by the fence: an earlier try may have committed
			// meanwhile (its COMMIT was still on its way); read once more.
			recommitted, err = executions.IsFenced(cerr), cerr
		case st.Status == executions.LeaseExpired:
			return executions.FailResult{}, fmt.Errorf("execution %s: resolving its end: the lease ran out: %w", it.Lease.ID, ff.ErrLeaseExpired)
		default:
			if recommitted {
				return executions.FailResult{}, err
			}
			return executions.FailResult{}, fmt.Errorf("execution %s: resolving its end: the lease is %s (execution %s): %w",
				it.Lease.ID, st.Status, st.PublicState, ff.ErrStaleLease)
		}
	}
}

// watch reads the states of the leases of the running handlers every
// LeaseCheckInterval, all in one query, until ctx is done, and cancels
// with ErrLeaseLost the handlers whose lease no longer holds (or whose
// execution's deadline has passed). A check that fails (the database is
// away) is logged once and tried again at the next tick; each is bounded by
// four intervals.
func (r *Runner) watch(ctx context.Context) {
	every := r.cfg.LeaseCheckInterval
	tick := time.NewTicker(every)
	defer tick.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		var hs []*running
		var leases []executions.Lease
		r.mu.Lock()
		for _, h := range r.held {
			if h.ctx.Err() == nil {
				hs, leases = append(hs, h), append(leases, h.lease)
			}
		}
		r.mu.Unlock()
		if len(hs) == 0 {
			continue
		}
		checkCtx, cancel := context.WithTimeout(ctx, 4*every)
		states, err := r.lr.LeaseStates(checkCtx, leases)
		cancel()
		if err != nil {
			if !failing && ctx.Err() == nil {
				r.cfg.Logger.WarnContext(ctx, "runner: checking the leases in hand failed; trying again each interval",
					"leases", len(leases), "error", err)
			}
			failing = true
			continue
		}
		failing = false
		for i, st := range states {
			if st.Status != executions.LeaseHeld || st.DeadlinePassed {
				hs[i].cancel(ErrLeaseLost)
			}
		}
	}
}

// renew renews the held leases that have less than a third of LeaseTTL
// left, until ctx is done, and cancels the handlers whose lease is lost.
func (r *Runner) renew(ctx context.Context) {
	ttl := r.cfg.LeaseTTL
	tick := time.NewTicker(max(ttl/6, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now().UnixMilli()
		var due []*running
		r.mu.Lock()
		for _, h := range r.held {
			if h.lease.ExpiresAtMs-now < ttl.Milliseconds()/3 && h.ctx.Err() == nil {
				due = append(due, h)
			}
		}
		r.mu.Unlock()
		for _, h := range due {
			l, err := r.st.Renew(ctx, h.lease, ttl)
			switch {
			case err == nil:
				r.mu.Lock()
				h.lease = l
				r.mu.Unlock()
			case executions.IsFenced(err):
				h.cancel(ErrLeaseLost)
			case time.Now().UnixMilli() >= h.lease.ExpiresAtMs:
				h.cancel(ErrLeaseLost)
			default:
				if ctx.Err() == nil {
					r.cfg.Logger.WarnContext(ctx, "runner: a lease renewal failed; trying again", "execution", h.lease.ID.String(), "error", err)
				}
			}
		}
	}
}

// sleep waits d or until ctx is done, and says whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
