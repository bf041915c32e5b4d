package leasecheck

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/upstream"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
)

// The upstream writer: FlowFabric v0.15.0's handle-based statements
// (internal/upstream, one transaction per upstream operation) on the run's
// schema, beside ffriver's clients, runners and scanners and under the same
// faults (its process is an application process's pool, which
// pg_terminate_backend reaches). It creates executions upstream-style on
// the shared lanes (published to the hot set, so ffriver's clients revoke,
// cancel, reclaim and claim them too), claims any execution of a shared
// lane with upstream's claim, and renews, completes, fails and delays with
// the handles it holds, whether or not something superseded them
// meanwhile. Every call is recorded with its real-time window and its one
// clock reading (the statements are given it), so porcupine checks it with
// the rest (model_upstream.go).

// upHandle is a handle the writer holds, with its execution.
type upHandle struct {
	x *execution
	h upstream.Handle
	// exp is the lease's expiry as its claim or last renew set it.
	exp int64
}

// upWriter is one upstream writer goroutine.
type upWriter struct {
	w      *Workload
	proc   *AppProcess
	client int
	worker string
	rng    *rand.Rand
	held   []upHandle
}

// maxUpHandles bounds the handles a writer holds at once.
const maxUpHandles = 4

// UpstreamClient is the client id of upstream writer i: after the runners'.
func (w *Workload) UpstreamClient(i int) int { return w.cfg.Clients + 2 + w.cfg.Runners + i }

func (w *Workload) startUpstream(ctx context.Context, seed uint64) {
	if w.cfg.Upstream == 0 {
		return
	}
	if w.cfg.SharedLanes == 0 {
		w.harness("the upstream writer needs shared lanes")
		return
	}
	for i := range w.cfg.Upstream {
		client := w.UpstreamClient(i)
		u := &upWriter{w: w, proc: w.procs[i%len(w.procs)], client: client, worker: fmt.Sprintf("upstream-%d", client),
			rng: rand.New(rand.NewPCG(seed, 0x5e<<8|uint64(i)))}
		w.wg.Go(func() { u.run(ctx) })
	}
}

func (u *upWriter) run(ctx context.Context) {
	for !u.w.stop.Load() && ctx.Err() == nil {
		switch r := u.rng.Float64(); {
		case r < 0.1:
			u.create(ctx)
		case r < 0.4 || len(u.held) == 0:
			if len(u.held) < maxUpHandles {
				u.claim(ctx)
			}
		case r < 0.6:
			// Now and then its own process reclaims a lease of its own
			// through ffriver's API once it ran out, and the handle is
			// used after that: a stale handle every such round.
			u.reclaimRound(ctx, u.rng.IntN(len(u.held)))
		default:
			u.leaseOp(ctx, u.rng.IntN(len(u.held)))
		}
		// A low rate beside the clients: the handles it holds meanwhile
		// are revoked, cancelled, reclaimed and expired by the others.
		sleepCtx(ctx, time.Duration(10+u.rng.IntN(u.w.cfg.UpstreamPaceMs+1))*time.Millisecond)
	}
}

func (u *upWriter) lane() string { return fmt.Sprintf("shared%d", u.rng.IntN(u.w.cfg.SharedLanes)) }

// record records an upstream call made at the clock reading now, begun at
// callNs; err is what it returned (nil, ErrFence, ErrNothing or anything
// else: unknown).
func (u *upWriter) record(key, lane string, st Step, r Result, now, callNs int64, err error) *Call {
	call := &Call{Client: u.client, Process: u.proc.Index, Exec: key, Steps: []Step{st}, Clock: Window{now, now}, CallNs: callNs}
	switch {
	case err == nil:
	case errors.Is(err, upstream.ErrFence):
		r = Result{Err: ErrStale}
	case errors.Is(err, upstream.ErrNothing):
		r = Result{Err: ErrNotFound}
	case isDeadlock(err):
		// Upstream locks the attempt row, then the execution's; ffriver
		// the other way round. Postgres aborted this side: nothing
		// committed.
		r = Result{Err: ErrOther}
	default:
		// A lost connection, a deadlock, a timeout: whether it committed
		// is for the outbox to say.
		call.Unknown, call.ReturnNs, call.WallHi, call.Err = true, Unbounded, Unbounded, err.Error()
		if key == "" {
			call.Lane = lane
		}
		u.w.rec.Add(call)
		return call
	}
	if err != nil {
		call.Err = err.Error()
	}
	call.Results = []Result{r}
	call.ReturnNs, call.WallHi = u.w.tl.Now(), u.w.tl.ScannerNowMs()
	u.w.rec.Add(call)
	return call
}

// isDeadlock reports whether err is Postgres's deadlock_detected (40P01):
// the transaction was aborted, a definite failure.
func isDeadlock(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "40P01"
}

// create inserts an execution of a shared lane the way upstream's tests
// seed claimable rows (runnable, pending_first_attempt), without a policy
// now and then (migration 0009 makes it '{}'), and publishes it.
func (u *upWriter) create(ctx context.Context) {
	now := u.proc.Clock.NowMs()
	lane := u.lane()
	id := ff.ExecutionID{Partition: u.proc.Store.PartitionFor(uuid.Nil, lane), UUID: uuid.New()}
	spec := CreateSpec{MaxRetries: int32(u.rng.IntN(3))}
	var policy []byte
	if u.rng.IntN(3) == 0 {
		spec.MaxRetries = 0
	} else {
		policy = fmt.Appendf(nil, `{"retry_policy": {"max_retries": %d}}`, spec.MaxRetries)
	}
	e := upstream.Exec{ID: upstream.ID{Partition: id.Partition, UUID: id.UUID}, Lane: lane, Policy: policy, Namespace: "leasecheck", Runnable: true}
	if u.rng.IntN(4) == 0 {
		spec.Deadline = now + int64(300+u.rng.IntN(7700))
		e.DeadlineAtMs = &spec.Deadline
	}
	x := &execution{ID: id, Key: id.String(), Lane: lane, Spec: spec, Shared: true}
	u.w.remember(x)
	callNs := u.w.tl.Now()
	cctx, cancel := callCtx(ctx)
	defer cancel()
	if err := upstream.Create(cctx, u.proc.Pool, e, now); err != nil && !u.w.exists(cctx, u.proc, id) {
		u.w.forget(x)
		return
	}
	call := &Call{Client: u.client, Process: u.proc.Index, Exec: x.Key, Steps: []Step{{Kind: OpCreate, Create: spec}},
		Results: []Result{{}}, Clock: Window{now, now}, CallNs: callNs, ReturnNs: u.w.tl.Now(), WallHi: u.w.tl.ScannerNowMs()}
	u.w.rec.Add(call)
	u.w.publish(x)
}

// claim is upstream's handle-based claim on a shared lane: any of its
// eligible executions, ffriver's or upstream's.
func (u *upWriter) claim(ctx context.Context) {
	lane := u.lane()
	part := u.proc.Store.PartitionFor(uuid.Nil, lane)
	ttl := int64(200 + u.rng.IntN(1300))
	st := Step{Kind: OpUpClaim, TTL: ttl, Lease: LeaseRef{Instance: u.worker + "-1"}}
	now, callNs := u.proc.Clock.NowMs(), u.w.tl.Now()
	cctx, cancel := callCtx(ctx)
	defer cancel()
	h, err := upstream.Claim(cctx, u.proc.Pool, part, lane, u.worker, ttl, now)
	switch {
	case errors.Is(err, upstream.ErrNothing), isDeadlock(err):
		return // found nothing, or rolled back: nothing to record
	case err != nil:
		u.record("", lane, st, Result{}, now, callNs, err)
		return
	}
	x := u.w.lookup(h.ID.UUID)
	if x == nil {
		u.w.harness("an upstream claim leased %v, an execution the run never created", h.ID)
		return
	}
	u.record(x.Key, "", st, Result{Lease: LeaseRef{Attempt: h.Attempt, Epoch: h.Epoch, ExpiresAt: now + ttl, Instance: st.Lease.Instance}}, now, callNs, nil)
	x.calls.Add(1)
	u.held = append(u.held, upHandle{x: x, h: h, exp: now + ttl})
}

// leaseOp renews, completes, fails or delays with held handle i. A handle
// is dropped once refused or once its attempt was ended (whatever the
// outcome): upstream's fence would let the same handle end it again.
func (u *upWriter) leaseOp(ctx context.Context, i int) {
	hd := u.held[i]
	ref := LeaseRef{Attempt: hd.h.Attempt, Epoch: hd.h.Epoch}
	now, callNs := u.proc.Clock.NowMs(), u.w.tl.Now()
	cctx, cancel := callCtx(ctx)
	defer cancel()
	var st Step
	var r Result
	var err error
	switch p := u.rng.Float64(); {
	case p < 0.4:
		st = Step{Kind: OpUpRenew, Lease: ref, TTL: int64(200 + u.rng.IntN(1300))}
		err = upstream.Renew(cctx, u.proc.Pool, hd.h, st.TTL, now)
		r.Lease = ref
		r.Lease.ExpiresAt = now + st.TTL
	case p < 0.65:
		st = Step{Kind: OpUpComplete, Lease: ref}
		err = upstream.Complete(cctx, u.proc.Pool, hd.h, now)
	case p < 0.85:
		st = Step{Kind: OpUpFail, Lease: ref, Permanent: u.rng.IntN(2) == 0}
		err = upstream.Fail(cctx, u.proc.Pool, hd.h, !st.Permanent, now)
	default:
		until := now + int64(u.rng.IntN(1200))
		if until == hd.x.Spec.Deadline {
			until++ // upstream's overloaded column: a delay equal to the deadline is no change of it (migration 0010)
		}
		st = Step{Kind: OpUpDelay, Lease: ref, Until: until}
		err = upstream.Delay(cctx, u.proc.Pool, hd.h, until, now)
	}
	u.record(hd.x.Key, "", st, r, now, callNs, err)
	hd.x.calls.Add(1)
	if err != nil && !errors.Is(err, upstream.ErrFence) && !errors.Is(err, upstream.ErrNothing) && st.Kind == OpUpRenew {
		return // unknown: the handle may still be current
	}
	if err != nil || st.Kind != OpUpRenew {
		u.held = slices.Delete(u.held, i, i+1)
		return
	}
	u.held[i].exp = now + st.TTL
}

// reclaimRound waits until held handle i's lease has run out (by the
// process's clock), reclaims its execution through ffriver's API (Reclaim:
// refused while the lease is live, without a retry left, past the deadline
// or once a scanner expired it), and then uses the handle with an upstream
// renew, complete, fail or delay (leaseOp): after a Reclaim that committed
// it is superseded and must be refused. The reclaimed lease is completed through ffriver's API
// or left to run out. Each call is recorded.
func (u *upWriter) reclaimRound(ctx context.Context, i int) {
	hd := u.held[i]
	u.held = slices.Delete(u.held, i, i+1)
	if wait := hd.exp - u.proc.Clock.NowMs(); wait > 1600 {
		u.held = append(u.held, hd) // renewed for long: not this round
		return
	} else if wait >= 0 {
		sleepCtx(ctx, time.Duration(wait+2)*time.Millisecond)
	}
	// Reclaim names the id, not a lease: like a client's freeOp, it is
	// made only while the id is this incarnation's (execution.guard).
	hd.x.guard.RLock()
	if hd.x.superseded {
		hd.x.guard.RUnlock()
		u.held = append(u.held, hd) // its handle is a removed incarnation's: it must be refused
		u.leaseOp(ctx, len(u.held)-1)
		return
	}
	st := Step{Kind: OpReclaim, TTL: int64(300 + u.rng.IntN(1200)), Instance: u.worker + "-r"}
	call := u.w.begin(u.proc, u.client, hd.x.Key, []Step{st})
	cctx, cancel := callCtx(ctx)
	l, err := u.proc.Store.Reclaim(cctx, hd.x.ID, executions.ClaimParams{WorkerID: u.worker, WorkerInstanceID: st.Instance,
		LeaseTTL: time.Duration(st.TTL) * time.Millisecond})
	cancel()
	u.w.settle(u.proc, call, Result{Lease: leaseRef(l)}, err, "")
	hd.x.guard.RUnlock()
	hd.x.calls.Add(1)
	u.held = append(u.held, hd)
	u.leaseOp(ctx, len(u.held)-1)
	if err != nil || u.rng.IntN(2) == 0 {
		return
	}
	st = Step{Kind: OpComplete, Lease: leaseRef(l)}
	call = u.w.begin(u.proc, u.client, hd.x.Key, []Step{st})
	cctx, cancel = callCtx(ctx)
	err = u.proc.Store.Complete(cctx, l, nil)
	cancel()
	u.w.settle(u.proc, call, Result{}, err, "")
	hd.x.calls.Add(1)
}

// UpstreamStats counts the upstream writer's calls by operation: those that
// committed, those refused (upstream's fence, or nothing to act on), those
// Postgres aborted as one side of a deadlock with ffriver's transactions,
// and those of unknown outcome (resolved: the outbox showed them
// committed).
type UpstreamStats struct {
	Committed, Refused, Deadlocked, Unknown, Resolved map[string]int
}

// Total is the number of upstream writes that committed (its reclaim
// rounds' ffriver calls left out).
func (s UpstreamStats) Total() int {
	n := 0
	for k, v := range s.Committed {
		if k == "Create" || strings.HasPrefix(k, "Upstream") {
			n += v
		}
	}
	return n
}

// String renders the counts on one line.
func (s UpstreamStats) String() string {
	var parts []string
	for _, k := range []string{"Create", "UpstreamClaim", "UpstreamRenew", "UpstreamComplete", "UpstreamFail", "UpstreamDelay"} {
		name := strings.TrimPrefix(k, "Upstream")
		parts = append(parts, fmt.Sprintf("%s %d committed/%d refused/%d deadlocked/%d unknown (%d resolved)",
			name, s.Committed[k], s.Refused[k], s.Deadlocked[k], s.Unknown[k], s.Resolved[k]))
	}
	// Its reclaim rounds' calls of ffriver's API.
	for _, k := range []string{"Reclaim", "Complete"} {
		parts = append(parts, fmt.Sprintf("ffriver %s %d committed/%d refused/%d unknown", k, s.Committed[k], s.Refused[k], s.Unknown[k]))
	}
	return strings.Join(parts, "; ")
}

func upstreamStats(w *Workload, calls []*Call) UpstreamStats {
	s := UpstreamStats{Committed: map[string]int{}, Refused: map[string]int{}, Deadlocked: map[string]int{}, Unknown: map[string]int{}, Resolved: map[string]int{}}
	first, last := w.UpstreamClient(0), w.UpstreamClient(w.cfg.Upstream-1)
	for _, c := range calls {
		if c.Client < first || c.Client > last {
			continue
		}
		k := c.Steps[0].Kind.String()
		switch {
		case c.Unknown && c.Resolved:
			s.Resolved[k]++
			s.Committed[k]++
			s.Unknown[k]++
		case c.Unknown:
			s.Unknown[k]++
		case len(c.Results) == 1 && c.Results[0].Err == ErrOther:
			s.Deadlocked[k]++
		case c.failed():
			s.Refused[k]++
		default:
			s.Committed[k]++
		}
	}
	return s
}
