package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Lanes of the workload. Nobody serves archive: its executions wait until
// their deadline expires them.
const (
	laneEmail   = "email"
	laneRender  = "render"
	laneBilling = "billing"
	laneSearch  = "search"
	laneMerge   = "merge"
	laneBuild   = "build"
	laneArchive = "archive"
)

// servedLanes are the lanes the simulated workers claim from.
func servedLanes() []string {
	return []string{laneEmail, laneRender, laneBilling, laneSearch, laneMerge, laneBuild}
}

// namespaces of the workload.
func namespaces() []string { return []string{"tenant-a", "tenant-b", "tenant-c"} }

// appWorkers is the number of simulated application workers.
const appWorkers = 8

// Behaviours of a task: what the simulated worker that claims it does.
const (
	// behaveOK works, renewing its lease when the work outlasts a third
	// of the TTL, then completes.
	behaveOK = "ok"
	// behaveFlaky fails its first FailFirst attempts (transient: retried
	// after the policy's backoff), then completes.
	behaveFlaky = "flaky"
	// behavePoison fails every attempt until the retries run out: failed.
	behavePoison = "poison"
	// behaveDoomed fails permanently at once: failed, no retry.
	behaveDoomed = "doomed"
	// behaveCrashOnce: the worker crashes on attempt 0 (stops renewing and
	// restarts under a new instance id); the lease expires, the
	// attempt_timeout scanner retries the execution, the retry completes.
	behaveCrashOnce = "crash_once"
	// behaveCrash: the worker crashes on every attempt; once the retries
	// are spent the scanner expires the execution.
	behaveCrash = "crash"
	// behaveCrashReclaim: the worker crashes on attempt 0 and a peer that
	// noticed reclaims the expired lease (Store.Reclaim) before the
	// scanner does, then completes the execution.
	behaveCrashReclaim = "crash_reclaim"
	// behaveRateLimited: the first lease is handed back with Delay (no
	// retry spent); the delayed_promoter scanner makes it eligible again.
	behaveRateLimited = "rate_limited"
	// behaveRevokeOnce: an operator revokes the first lease while the
	// worker holds it (Store.Revoke); the worker notices at its next renew.
	behaveRevokeOnce = "revoke_once"
)

// task is an execution's payload: how the simulated worker behaves.
type task struct {
	Behaviour string `json:"behaviour"`
	WorkMs    int    `json:"work_ms"`
	// FailFirst: a flaky task fails attempts below this index.
	FailFirst int32 `json:"fail_first,omitempty"`
}

// WorkloadStats are what the simulated workers did, as they saw it. The
// event counts themselves come from the streams.
type WorkloadStats struct {
	Flows           int64
	Crashes         int64
	PeerReclaims    int64
	OperatorRevokes int64
	// Fenced counts leases a worker found taken away at its next renew or
	// completion (expired, revoked, cancelled, deadline): ff.ErrStaleLease
	// or ff.ErrLeaseExpired.
	Fenced int64
}

// workload creates executions and flows and runs the simulated workers, a
// peer that reclaims expired leases and an operator that revokes leases.
type workload struct {
	store  *executions.Store
	pool   *pgxpool.Pool
	log    *slog.Logger
	ttl    time.Duration
	rescue chan executions.Lease
	revoke chan ff.ExecutionID

	mu   sync.Mutex
	once map[string]bool

	flows, crashes, reclaims, revokes, fenced atomic.Int64
}

func newWorkload(ctx context.Context, store *executions.Store, pool *pgxpool.Pool, log *slog.Logger) (*workload, error) {
	for _, lane := range append(servedLanes(), laneArchive) {
		if err := store.RegisterLane(ctx, lane, "ffctl demo"); err != nil {
			return nil, fmt.Errorf("registering lane %s: %w", lane, err)
		}
	}
	return &workload{store: store, pool: pool, log: log, ttl: LeaseTTL,
		rescue: make(chan executions.Lease, 64), revoke: make(chan ff.ExecutionID, 64), once: map[string]bool{}}, nil
}

func (w *workload) describe() string {
	return fmt.Sprintf("%d simulated app workers (lease TTL %s, renewed every %s) on lanes %s\n"+
		"              (and archive, served by nobody), namespaces %s; worker crashes, a peer reclaiming\n"+
		"              expired leases, an operator revoking leases, delays, deadlines, retries with backoff,\n"+
		"              flows (any-of and quorum with cancel_remaining, an impossible all-of)",
		appWorkers, w.ttl, w.renewEvery().Round(time.Millisecond), strings.Join(servedLanes(), ", "), strings.Join(namespaces(), ", "))
}

func (w *workload) stats() WorkloadStats {
	return WorkloadStats{Flows: w.flows.Load(), Crashes: w.crashes.Load(),
		PeerReclaims: w.reclaims.Load(), OperatorRevokes: w.revokes.Load(), Fenced: w.fenced.Load()}
}

func (w *workload) renewEvery() time.Duration { return w.ttl / 3 }

// first reports whether key is seen for the first time.
func (w *workload) first(key string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.once[key] {
		return false
	}
	w.once[key] = true
	return true
}

// run runs the generator, the workers, the peer and the operator until ctx
// is done.
func (w *workload) run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { w.generate(ctx) })
	for n := range appWorkers {
		wg.Go(func() { w.worker(ctx, n) })
	}
	wg.Go(func() { w.peer(ctx, &wg) })
	wg.Go(func() { w.operator(ctx, &wg) })
	wg.Wait()
}

// warn logs an unexpected error unless the workload is stopping.
func (w *workload) warn(ctx context.Context, msg string, err error, args ...any) {
	if ctx.Err() != nil || errors.Is(err, context.Canceled) {
		return
	}
	w.log.Warn("demo workload: "+msg, append(args, "error", err)...)
}

// ---------------------------------------------------------------- generator

// generate creates a wave of executions every second. The first wave holds
// one of every scenario, so every event type shows up within seconds; the
// later ones rotate through them.
func (w *workload) generate(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for i := 0; ; i++ {
		w.wave(ctx, i)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (w *workload) wave(ctx context.Context, i int) {
	due := func(period, offset int) bool { return i == 0 || i%period == offset }
	nss := namespaces()
	ns := func(k int) string { return nss[(i+k)%len(nss)] }
	standard := executions.RetryPolicy{MaxRetries: 3,
		Backoff: &executions.Backoff{Kind: executions.BackoffExponential, InitialMs: 200, MaxMs: 2000}}
	fixed := func(retries int, ms int64) executions.RetryPolicy {
		return executions.RetryPolicy{MaxRetries: retries, Backoff: &executions.Backoff{Kind: executions.BackoffFixed, InitialMs: ms}}
	}
	type spec struct {
		lane     string
		t        task
		policy   executions.RetryPolicy
		delay    time.Duration
		deadline time.Duration
	}
	var specs []spec
	for _, lane := range []string{laneEmail, laneRender, laneBilling} {
		t := task{Behaviour: behaveOK, WorkMs: 150 + rand.IntN(1200)}
		if rand.IntN(4) == 0 {
			t = task{Behaviour: behaveFlaky, WorkMs: 100 + rand.IntN(300), FailFirst: 1 + int32(rand.IntN(2))}
		}
		specs = append(specs, spec{lane: lane, t: t, policy: standard})
	}
	if due(2, 0) {
		specs = append(specs, spec{lane: laneBilling, t: task{Behaviour: behavePoison, WorkMs: 100}, policy: fixed(2, 400)})
	}
	if due(3, 0) {
		specs = append(specs, spec{lane: laneRender, t: task{Behaviour: behaveCrashOnce, WorkMs: 300}, policy: fixed(2, 300)})
	}
	if due(4, 1) {
		specs = append(specs, spec{lane: laneRender, t: task{Behaviour: behaveCrash, WorkMs: 300}, policy: fixed(1, 300)})
	}
	if due(3, 1) {
		specs = append(specs, spec{lane: laneEmail, t: task{Behaviour: behaveCrashReclaim, WorkMs: 400}, policy: fixed(2, 300)})
	}
	if due(4, 2) {
		specs = append(specs, spec{lane: laneEmail, t: task{Behaviour: behaveOK, WorkMs: 300}, policy: standard, delay: 2 * time.Second})
	}
	if due(4, 3) {
		specs = append(specs, spec{lane: laneBilling, t: task{Behaviour: behaveRateLimited, WorkMs: 200}, policy: standard})
	}
	if due(4, 0) {
		specs = append(specs, spec{lane: laneRender, t: task{Behaviour: behaveRevokeOnce, WorkMs: 2500}, policy: standard})
	}
	if due(5, 4) {
		// Still working when its deadline passes: fenced by execution_deadline.
		specs = append(specs, spec{lane: laneRender, t: task{Behaviour: behaveOK, WorkMs: 5000}, policy: standard, deadline: 1500 * time.Millisecond})
		// Nobody serves archive: it expires while waiting.
		specs = append(specs, spec{lane: laneArchive, t: task{Behaviour: behaveOK, WorkMs: 100}, policy: standard, deadline: time.Second})
	}
	now := time.Now()
	for k, s := range specs {
		p := executions.CreateParams{Lane: s.lane, Namespace: ns(k), Tags: tags(i + k), RetryPolicy: s.policy, Payload: mustJSON(s.t)}
		if s.delay > 0 {
			p.DelayUntil = now.Add(s.delay)
		}
		if s.deadline > 0 {
			p.Deadline = now.Add(s.deadline)
		}
		if _, err := w.store.Create(ctx, p); err != nil {
			w.warn(ctx, "creating an execution", err, "lane", s.lane)
		}
	}
	if due(5, 1) {
		w.flow(ctx, "any-of", ns(0), w.anyOfFlow)
	}
	if due(5, 2) {
		w.flow(ctx, "quorum", ns(1), w.quorumFlow)
	}
	if due(5, 3) {
		w.flow(ctx, "impossible all-of", ns(2), w.impossibleFlow)
	}
}

func tags(k int) map[string]string {
	return map[string]string{ff.InstanceTagKey: fmt.Sprintf("i-%d", k%3+1)}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // the payloads are plain structs
	}
	return b
}

// flow creates a flow and, in one transaction, its members and edges, so no
// worker can claim a downstream before its dependencies exist.
func (w *workload) flow(ctx context.Context, what, ns string, build func(ctx context.Context, b *flowBuilder) error) {
	flowID, err := w.store.CreateFlow(ctx, uuid.Nil)
	if err != nil {
		w.warn(ctx, "creating a flow", err, "flow", what)
		return
	}
	tx, err := w.pool.Begin(ctx)
	if err != nil {
		w.warn(ctx, "creating a flow", dbutil.MapErr(err, "begin"), "flow", what)
		return
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	b := &flowBuilder{w: w, tx: tx, flow: flowID, ns: ns}
	if err := build(ctx, b); err != nil {
		w.warn(ctx, "creating a flow", err, "flow", what)
		return
	}
	if err := tx.Commit(ctx); err != nil {
		w.warn(ctx, "creating a flow", dbutil.MapErr(err, "commit"), "flow", what)
		return
	}
	w.flows.Add(1)
}

// flowBuilder adds members and edges to one flow inside a transaction.
type flowBuilder struct {
	w       *workload
	tx      pgx.Tx
	flow    uuid.UUID
	ns      string
	members int
}

func (b *flowBuilder) add(ctx context.Context, lane string, t task, retries int, delay time.Duration) (ff.ExecutionID, error) {
	p := executions.CreateParams{FlowID: b.flow, Lane: lane, Namespace: b.ns, Tags: tags(b.members), Payload: mustJSON(t),
		RetryPolicy: executions.RetryPolicy{MaxRetries: retries}}
	if delay > 0 {
		p.DelayUntil = time.Now().Add(delay)
	}
	id, err := b.w.store.CreateTx(ctx, b.tx, p)
	if err == nil {
		b.members++
	}
	return id, err
}

func (b *flowBuilder) depend(ctx context.Context, down ff.ExecutionID, policy executions.EdgePolicy, ups ...ff.ExecutionID) error {
	return b.w.store.AddDependenciesTx(ctx, b.tx, executions.DependencyParams{FlowID: b.flow, Downstream: down, Upstreams: ups, Policy: policy})
}

// anyOfFlow: three searches, one fast and two slow; merge runs once one
// succeeded and the two slow ones are cancelled (edge_cancel_dispatcher),
// lease fenced while they work.
func (w *workload) anyOfFlow(ctx context.Context, b *flowBuilder) error {
	fast, err := b.add(ctx, laneSearch, task{Behaviour: behaveOK, WorkMs: 300}, 1, 0)
	if err != nil {
		return err
	}
	slow1, err := b.add(ctx, laneSearch, task{Behaviour: behaveOK, WorkMs: 8000}, 1, 0)
	if err != nil {
		return err
	}
	slow2, err := b.add(ctx, laneSearch, task{Behaviour: behaveOK, WorkMs: 8000}, 1, 0)
	if err != nil {
		return err
	}
	merge, err := b.add(ctx, laneMerge, task{Behaviour: behaveOK, WorkMs: 300}, 1, 0)
	if err != nil {
		return err
	}
	return b.depend(ctx, merge, executions.AnyOf(executions.CancelRemaining), fast, slow1, slow2)
}

// quorumFlow: report needs 2 of 4 searches; two are fast, one slow and one
// delayed, and those two are cancelled once the quorum is reached.
func (w *workload) quorumFlow(ctx context.Context, b *flowBuilder) error {
	var ups []ff.ExecutionID
	for _, m := range []struct {
		t     task
		delay time.Duration
	}{
		{task{Behaviour: behaveOK, WorkMs: 300}, 0},
		{task{Behaviour: behaveOK, WorkMs: 500}, 0},
		{task{Behaviour: behaveOK, WorkMs: 8000}, 0},
		{task{Behaviour: behaveOK, WorkMs: 300}, 5 * time.Second},
	} {
		id, err := b.add(ctx, laneSearch, m.t, 1, m.delay)
		if err != nil {
			return err
		}
		ups = append(ups, id)
	}
	report, err := b.add(ctx, laneMerge, task{Behaviour: behaveOK, WorkMs: 200}, 1, 0)
	if err != nil {
		return err
	}
	return b.depend(ctx, report, executions.Quorum(2, executions.CancelRemaining), ups...)
}

// impossibleFlow: publish needs both builds, one of which fails
// permanently, so publish is skipped, and so is notify, which needs publish.
func (w *workload) impossibleFlow(ctx context.Context, b *flowBuilder) error {
	ok, err := b.add(ctx, laneBuild, task{Behaviour: behaveOK, WorkMs: 300}, 1, 0)
	if err != nil {
		return err
	}
	doomed, err := b.add(ctx, laneBuild, task{Behaviour: behaveDoomed, WorkMs: 200}, 0, 0)
	if err != nil {
		return err
	}
	publish, err := b.add(ctx, laneBuild, task{Behaviour: behaveOK, WorkMs: 200}, 1, 0)
	if err != nil {
		return err
	}
	notify, err := b.add(ctx, laneEmail, task{Behaviour: behaveOK, WorkMs: 100}, 1, 0)
	if err != nil {
		return err
	}
	if err := b.depend(ctx, publish, executions.AllOf(), ok, doomed); err != nil {
		return err
	}
	return b.depend(ctx, notify, executions.AllOf(), publish)
}

// ---------------------------------------------------------------- workers

// worker is one simulated application worker: it claims from every served
// lane in turn, one execution at a time.
func (w *workload) worker(ctx context.Context, n int) {
	id := fmt.Sprintf("app-%d", n+1)
	generation := 1
	instance := fmt.Sprintf("%s/%d", id, generation)
	idle := 0
	lanes := servedLanes()
	for ctx.Err() == nil {
		claimed := false
		for k := range lanes {
			lane := lanes[(n+k)%len(lanes)]
			leases, err := w.store.Claim(ctx, executions.ClaimParams{Lane: lane, WorkerID: id, WorkerInstanceID: instance, LeaseTTL: w.ttl})
			if err != nil {
				w.warn(ctx, "claiming", err, "lane", lane)
				sleep(ctx, time.Second)
				continue
			}
			for _, l := range leases {
				claimed = true
				if w.work(ctx, l) {
					// Crashed: back after a moment as a new instance.
					generation++
					instance = fmt.Sprintf("%s/%d", id, generation)
					sleep(ctx, 200*time.Millisecond)
				}
			}
		}
		if claimed {
			idle = 0
			continue
		}
		idle = min(idle+1, 4)
		sleep(ctx, time.Duration(50*idle)*time.Millisecond)
	}
}

// work runs one leased attempt. It reports whether the worker crashed.
func (w *workload) work(ctx context.Context, l executions.Lease) (crashed bool) {
	var t task
	if err := json.Unmarshal(l.Payload, &t); err != nil {
		w.warn(ctx, "reading a payload", err, "execution", l.ID)
		t = task{Behaviour: behaveOK}
	}
	first := l.AttemptIndex == 0
	switch {
	case t.Behaviour == behaveCrash,
		t.Behaviour == behaveCrashOnce && first:
		w.crashes.Add(1)
		return true
	case t.Behaviour == behaveCrashReclaim && first:
		w.crashes.Add(1)
		select {
		case w.rescue <- l: // a peer notices the missed heartbeats
		default:
		}
		return true
	case t.Behaviour == behaveRateLimited && w.first("delay "+l.ID.String()):
		w.done(ctx, l, w.store.Delay(ctx, l, time.Now().Add(time.Second)), "delaying")
		return false
	case t.Behaviour == behaveRevokeOnce:
		select {
		case w.revoke <- l.ID:
		default:
		}
	}
	l, ok := w.hold(ctx, l, time.Duration(t.WorkMs)*time.Millisecond)
	if !ok {
		return false
	}
	switch {
	case t.Behaviour == behavePoison, t.Behaviour == behaveFlaky && l.AttemptIndex < t.FailFirst:
		_, err := w.store.Fail(ctx, l, executions.FailParams{Message: "simulated transient failure"})
		w.done(ctx, l, err, "failing")
	case t.Behaviour == behaveDoomed:
		_, err := w.store.Fail(ctx, l, executions.FailParams{Message: "simulated permanent failure", Permanent: true})
		w.done(ctx, l, err, "failing")
	default:
		w.done(ctx, l, w.store.Complete(ctx, l, []byte(`{"ok":true}`)), "completing")
	}
	return false
}

// hold works for d, renewing the lease every third of its TTL. It returns
// false when the lease was taken away (fenced) or the workload stops.
func (w *workload) hold(ctx context.Context, l executions.Lease, d time.Duration) (executions.Lease, bool) {
	end := time.Now().Add(d)
	for {
		left := time.Until(end)
		if left <= 0 {
			return l, true
		}
		if !sleep(ctx, min(left, w.renewEvery())) {
			return l, false
		}
		if time.Until(end) <= 0 {
			return l, true
		}
		nl, err := w.store.Renew(ctx, l, w.ttl)
		if err != nil {
			w.done(ctx, l, err, "renewing")
			return l, false
		}
		l = nl
	}
}

// done counts a fenced lease, or logs an unexpected error.
func (w *workload) done(ctx context.Context, l executions.Lease, err error, doing string) {
	switch {
	case err == nil:
	case errors.Is(err, ff.ErrStaleLease), errors.Is(err, ff.ErrLeaseExpired), errors.Is(err, ff.ErrNotActive):
		w.fenced.Add(1)
	default:
		w.warn(ctx, doing, err, "execution", l.ID)
	}
}

// peer reclaims the leases of crashed workers as soon as they expire,
// before the attempt_timeout scanner gets to them, and finishes the work.
func (w *workload) peer(ctx context.Context, wg *sync.WaitGroup) {
	for {
		select {
		case <-ctx.Done():
			return
		case l := <-w.rescue:
			wg.Go(func() { w.reclaim(ctx, l) })
		}
	}
}

func (w *workload) reclaim(ctx context.Context, l executions.Lease) {
	if !sleep(ctx, time.Until(time.UnixMilli(l.ExpiresAtMs+1))) {
		return
	}
	for ctx.Err() == nil {
		nl, err := w.store.Reclaim(ctx, l.ID, executions.ClaimParams{WorkerID: "peer", WorkerInstanceID: "peer/1", LeaseTTL: w.ttl})
		switch {
		case err == nil:
			w.reclaims.Add(1)
			w.work(ctx, nl)
			return
		case errors.Is(err, ff.ErrLeaseHeld) && time.Now().UnixMilli() < l.ExpiresAtMs+200:
			sleep(ctx, 5*time.Millisecond) // not expired by the store's clock yet
		case errors.Is(err, ff.ErrLeaseHeld), errors.Is(err, ff.ErrNotActive), errors.Is(err, ff.ErrStaleLease):
			return // the scanner got there first; the retry is someone else's
		default:
			w.warn(ctx, "reclaiming", err, "execution", l.ID)
			return
		}
	}
}

// operator revokes a lease once per execution it is told about, while the
// worker holds it.
func (w *workload) operator(ctx context.Context, wg *sync.WaitGroup) {
	for {
		select {
		case <-ctx.Done():
			return
		case id := <-w.revoke:
			if !w.first("revoke " + id.String()) {
				continue
			}
			wg.Go(func() {
				if !sleep(ctx, 700*time.Millisecond) {
					return
				}
				err := w.store.Revoke(ctx, id, "demo operator: rebalancing")
				switch {
				case err == nil:
					w.revokes.Add(1)
				case errors.Is(err, ff.ErrNotActive), errors.Is(err, ff.ErrStaleLease):
				default:
					w.warn(ctx, "revoking", err, "execution", id)
				}
			})
		}
	}
}

// sleep waits d or until ctx is done; it reports whether d elapsed.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
