package leasecheck

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ffriver/ffriver"
	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// AppProcess is one application process: a pool of its own (named, so a
// fault can find its connections) and a Store whose clock is offset from
// the system clock. Its Store comes from ffriver.New, so its terminal
// transitions of flow members enqueue their cascade.
type AppProcess struct {
	Index int
	// AppName is the application_name of the pool's connections.
	AppName string
	Clock   OffsetClock
	Pool    *pgxpool.Pool
	Store   *executions.Store
}

// OpenApp opens an application process on schema.
func OpenApp(ctx context.Context, url, schema, appName string, index int, offset time.Duration, maxConns int32) (*AppProcess, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("app %d: %w", index, err)
	}
	cfg.MaxConns = maxConns
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.ConnConfig.RuntimeParams["application_name"] = appName
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("app %d: %w", index, err)
	}
	clock := OffsetClock{Offset: offset}
	// The server is shared (another suite's faults, a failover of the
	// run's own): a lost connection while the process starts is tried
	// again, as the binaries do (--startup-wait), for up to 30 s.
	var svc *ffriver.Service
	for began := time.Now(); ; {
		svc, err = ffriver.New(ctx, pool, ffriver.Config{Schema: schema, Clock: clock})
		if err == nil || !errors.Is(err, ff.ErrUnavailable) || time.Since(began) > 30*time.Second || ctx.Err() != nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("app %d: %w", index, err)
	}
	store := svc.Store()
	go store.Waker().Run(ctx)
	return &AppProcess{Index: index, AppName: appName, Clock: clock, Pool: pool, Store: store}, nil
}

// WorkloadConfig shapes the random operations.
type WorkloadConfig struct {
	// Clients is the number of application clients (goroutines), spread
	// over the processes.
	Clients int
	// HotSet is how many executions the clients work on at once.
	HotSet int
	// MaxCallsPerExec retires an execution from the hot set after that
	// many calls, keeping each history small enough for porcupine.
	MaxCallsPerExec int
	// FlowShare is the share of creations that make a flow.
	FlowShare float64
	// Hold is the longest a held transaction stays open before COMMIT.
	Hold time.Duration
	// SharedShare is the share of solo executions created in one of
	// SharedLanes shared lanes, claimed with Max 1-3: a claim there returns
	// leases of any of the lane's executions, and only the leases it
	// returns are recorded (each on its execution).
	SharedShare float64
	SharedLanes int
	// Runners is the number of package runner's Runners, run one after
	// another on the shared lanes (runner i on lane i mod SharedLanes, in
	// process i mod the processes), each call of theirs recorded like a
	// client's (runners.go). It needs SharedLanes.
	Runners int
	// NoProbes turns the probes off (probe.go): by default they run on a
	// process of their own, alternating incarnation and bounds rounds.
	NoProbes bool
	// Recreate: execution retention runs (Faults.ExecutionRetention), and
	// the creator creates again, under the same id, solo executions (of
	// lanes of their own or shared ones) that retention removed, while
	// clients go on using the removed incarnations' leases (staleOp).
	Recreate bool
	// Upstream is the number of upstream writers (upstream.go): FlowFabric
	// v0.15.0's handle-based statements on the shared lanes, one call every
	// 10 ms to 10+UpstreamPaceMs ms each. It needs SharedLanes.
	Upstream       int
	UpstreamPaceMs int
}

// execution is one execution the workload made.
type execution struct {
	ID   ff.ExecutionID
	Key  string
	Lane string
	Spec CreateSpec
	// Shared: the lane is a shared lane.
	Shared bool
	// Group is set on a flow downstream.
	Group *Group
	// Inc is the incarnation of the id (1: the first; Key is incKey), prev
	// the incarnation it superseded.
	Inc  int
	prev *execution
	// Solo: no flow (a lane of its own or a shared one): an execution
	// whose id the creator may create again once retention removed it
	// (WorkloadConfig.Recreate).
	Solo  bool
	calls atomic.Int32
	// retired: no client picks it any more.
	retired atomic.Bool
	// guard is held (read) by every call on the execution that names its
	// id without a lease (freeOp): such a call acts on whatever row the id
	// has, so it is made only while the id is this incarnation's. The
	// creator takes it (write) to mark it superseded before it creates the
	// id again; a call that finds it superseded is not made.
	guard      sync.RWMutex
	superseded bool
	// leases are the first leases clients got for it (stale ones, once
	// it is superseded: staleOp).
	leaseMu sync.Mutex
	leases  []executions.Lease
}

// maxNoted bounds execution.leases.
const maxNoted = 4

// firstLease returns the first lease noted for x.
func (x *execution) firstLease() (executions.Lease, bool) {
	x.leaseMu.Lock()
	defer x.leaseMu.Unlock()
	if len(x.leases) == 0 {
		return executions.Lease{}, false
	}
	return x.leases[0], true
}

// note keeps l among the execution's first leases.
func (x *execution) note(l executions.Lease) {
	x.leaseMu.Lock()
	defer x.leaseMu.Unlock()
	if len(x.leases) < maxNoted && !slices.ContainsFunc(x.leases, func(m executions.Lease) bool { return m.LeaseID == l.LeaseID }) {
		x.leases = append(x.leases, l)
	}
}

// Group is a flow downstream's edge group, as AddDependencies fixed it.
type Group struct {
	Flow       uuid.UUID
	Downstream string
	Upstreams  []string
	Policy     executions.EdgePolicy
}

// Workload runs the application clients of a run.
type Workload struct {
	cfg   WorkloadConfig
	procs []*AppProcess
	rec   *Recorder
	tl    Timeline
	rng   *rand.Rand // the creator's

	mu   sync.Mutex
	hot  []*execution
	byID map[uuid.UUID]*execution
	// byLease finds the incarnation a lease was granted on (an id created
	// again has several); all are every incarnation made.
	byLease map[uuid.UUID]*execution
	all     []*execution
	groups  []*Group
	lanes   int

	stop atomic.Bool
	wg   sync.WaitGroup
	// probe checks the incarnation and bounds paths (nil: NoProbes).
	probe *probe
	// sharedOthers counts the leases claims on shared lanes returned for
	// other executions than the one the client had picked.
	sharedOthers atomic.Int64
	// batches counts the FinishMany and FinishManyTx batches clients built
	// (batch.go).
	batches atomic.Int64
	// bounds checks that the clients' calls return by their deadlines
	// (bounds.go).
	bounds callBounds
	harnd  []string // the harness's own errors (a validation error is a bug here)

	// Re-creation (WorkloadConfig.Recreate), under mu: candidates are
	// retired solo executions, gone those of them retention removed, old
	// the incarnations superseded by a new one (their leases are used
	// stale). recreated counts the ids created again.
	candidates, gone, old []*execution
	recreated             atomic.Int64
	// staleOps counts the operations clients made with the leases of
	// superseded incarnations (staleOp).
	staleOps atomic.Int64
}

// maxCandidates bounds Workload.candidates, gone and old;
// recreateExtra is how many executions created again may be in the hot
// set beyond its size.
const (
	maxCandidates = 64
	recreateExtra = 8
)

// CreatorClient is the client id of the goroutine that creates executions.
const CreatorClient = 0

// NewWorkload prepares a workload over procs, recording into rec.
func NewWorkload(cfg WorkloadConfig, procs []*AppProcess, rec *Recorder, tl Timeline, seed uint64) *Workload {
	return &Workload{cfg: cfg, procs: procs, rec: rec, tl: tl, rng: rand.New(rand.NewPCG(seed, 0)), byID: map[uuid.UUID]*execution{},
		byLease: map[uuid.UUID]*execution{}}
}

// Start starts the creator, the clients, the runners and, on probeProc
// (nil: none), the probes; admin is a pool outside the application
// processes', for the probes' holding sessions.
func (w *Workload) Start(ctx context.Context, seed uint64, admin *pgxpool.Pool, probeProc *AppProcess) {
	w.wg.Go(func() { w.creator(ctx) })
	if probeProc != nil {
		w.probe = &probe{w: w, proc: probeProc, admin: admin, rng: rand.New(rand.NewPCG(seed, 0x9b))}
		w.wg.Go(func() { w.probe.run(ctx) })
	}
	for i := range w.cfg.Clients {
		c := &client{w: w, id: i + 1, proc: w.procs[i%len(w.procs)], rng: rand.New(rand.NewPCG(seed, uint64(i+1))),
			leases: map[string]executions.Lease{}}
		c.instance = fmt.Sprintf("p%d-c%d-%d", c.proc.Index, c.id, 0)
		w.wg.Go(func() { c.run(ctx) })
	}
	w.startUpstream(ctx, seed)
	for i := range w.cfg.Runners {
		if w.cfg.SharedLanes == 0 {
			w.harness("runners need shared lanes")
			break
		}
		proc, lane := w.procs[i%len(w.procs)], fmt.Sprintf("shared%d", i%w.cfg.SharedLanes)
		w.wg.Go(func() { w.runnerLoop(ctx, proc, lane, w.RunnerClient(i), seed) })
	}
}

// RunnerClient is the client id of the calls of runner i: after the
// clients' and the scanners' (Clients + 1).
func (w *Workload) RunnerClient(i int) int { return w.cfg.Clients + 2 + i }

// Stop asks every goroutine to finish its current operation and waits.
func (w *Workload) Stop() {
	w.stop.Store(true)
	w.wg.Wait()
}

// Groups returns the flows' edge groups.
func (w *Workload) Groups() []*Group {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.groups)
}

// SharedLanes maps each execution (each incarnation) of a shared lane to
// its lane.
func (w *Workload) SharedLanes() map[string]string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]string{}
	for _, x := range w.all {
		if x.Shared {
			out[x.Key] = x.Lane
		}
	}
	return out
}

func (w *Workload) lookup(u uuid.UUID) *execution {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.byID[u]
}

// leaseOf returns the incarnation lease l was granted on, as recorded when
// a claim returned it, else the id's latest incarnation.
func (w *Workload) leaseOf(l executions.Lease) *execution {
	w.mu.Lock()
	defer w.mu.Unlock()
	if x := w.byLease[l.LeaseID]; x != nil {
		return x
	}
	return w.byID[l.ID.UUID]
}

// granted records that lease l is x's.
func (w *Workload) granted(x *execution, l executions.Lease) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.byLease[l.LeaseID] = x
}

// SharedOthers is how many leases claims on shared lanes returned for
// other executions than the one the client had picked.
func (w *Workload) SharedOthers() int64 { return w.sharedOthers.Load() }

// Batches counts the FinishMany and FinishManyTx batches clients built.
func (w *Workload) Batches() int64 { return w.batches.Load() }

// HarnessErrors are errors that say the workload itself is wrong.
func (w *Workload) HarnessErrors() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.harnd)
}

func (w *Workload) harness(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.harnd) < 20 {
		w.harnd = append(w.harnd, fmt.Sprintf(format, args...))
	}
}

func (w *Workload) newLane() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lanes++
	return fmt.Sprintf("lc%d", w.lanes)
}

func (w *Workload) publish(xs ...*execution) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.hot = append(w.hot, xs...)
	for _, x := range xs {
		w.byID[x.ID.UUID] = x
	}
}

// hotCounts returns how many executions are in the hot set, and how many
// of them are on shared lanes.
func (w *Workload) hotCounts() (hot, shared int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, x := range w.hot {
		if x.Shared {
			shared++
		}
	}
	return len(w.hot), shared
}

// runnerBacklog is how many executions of the shared lanes the creator
// keeps in the hot set per runner, beyond HotSet, so that the runners have
// work while the clients work on the same executions; sweepEvery is how
// often it retires the hot executions that became terminal.
const (
	runnerBacklog = 16
	sweepEvery    = 150 * time.Millisecond
)

func (w *Workload) pick(rng *rand.Rand) *execution {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.hot) == 0 {
		return nil
	}
	return w.hot[rng.IntN(len(w.hot))]
}

func (w *Workload) retire(x *execution) {
	if x.retired.Swap(true) {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.hot = slices.DeleteFunc(w.hot, func(y *execution) bool { return y == x })
	if w.cfg.Recreate && x.Solo {
		w.candidates = capped(append(w.candidates, x))
	}
}

// capped drops the oldest of xs beyond maxCandidates.
func capped(xs []*execution) []*execution {
	if len(xs) > maxCandidates {
		xs = slices.Delete(xs, 0, len(xs)-maxCandidates)
	}
	return xs
}

// Recreated counts the ids the creator created again.
func (w *Workload) Recreated() int64 { return w.recreated.Load() }

// StaleOps counts the operations made with superseded incarnations'
// leases.
func (w *Workload) StaleOps() int64 { return w.staleOps.Load() }

// callCtx bounds one call: long enough for a lock held by a fault.
func callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
}

// creator keeps the hot set full and retires executions that became
// terminal behind the clients' backs (a scanner, another client).
func (w *Workload) creator(ctx context.Context) {
	lastSweep := time.Now()
	for !w.stop.Load() && ctx.Err() == nil {
		hot, shared := w.hotCounts()
		if old := w.goneOne(); old != nil && hot < w.cfg.HotSet+runnerBacklog*w.cfg.Runners+recreateExtra {
			// An id retention removed is created again at once, beyond the
			// hot set if need be: in a short run, few are removed in time.
			if x := w.recreate(ctx, w.procs[w.rng.IntN(len(w.procs))], old); x != nil {
				w.publish(x)
			}
			continue
		}
		if hot < w.cfg.HotSet || shared < runnerBacklog*w.cfg.Runners {
			proc := w.procs[w.rng.IntN(len(w.procs))]
			if hot >= w.cfg.HotSet {
				// The runners' backlog: solo executions of the shared lanes.
				lane := fmt.Sprintf("shared%d", w.rng.IntN(w.cfg.SharedLanes))
				if x := w.create(ctx, proc, uuid.Nil, w.spec(proc, false), lane); x != nil {
					w.publish(x)
				}
			} else if w.rng.Float64() < w.cfg.FlowShare {
				w.createFlow(ctx, proc)
			} else if x := w.create(ctx, proc, uuid.Nil, w.spec(proc, false), w.sharedLane()); x != nil {
				w.publish(x)
			}
			continue
		}
		if time.Since(lastSweep) > sweepEvery {
			w.sweep(ctx)
			lastSweep = time.Now()
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// sweep retires hot executions that are terminal (or already removed by
// execution retention), and finds the candidates for re-creation that
// retention removed.
func (w *Workload) sweep(ctx context.Context) {
	w.mu.Lock()
	ids := make([]uuid.UUID, len(w.hot))
	byID := map[uuid.UUID]*execution{}
	for i, x := range w.hot {
		ids[i] = x.ID.UUID
		byID[x.ID.UUID] = x
	}
	cands := slices.Clone(w.candidates)
	w.mu.Unlock()
	cctx, cancel := callCtx(ctx)
	defer cancel()
	if len(ids) > 0 {
		rows, err := w.procs[0].Pool.Query(cctx, `SELECT u FROM unnest($1::uuid[]) u
			WHERE NOT EXISTS (SELECT 1 FROM ff_exec_core WHERE execution_id = u AND lifecycle_phase <> 'terminal')`, ids)
		if err != nil {
			return // a fault; the next sweep tries again
		}
		done, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
		if err != nil {
			return
		}
		for _, u := range done {
			w.retire(byID[u])
		}
	}
	if len(cands) == 0 {
		return
	}
	cids := make([]uuid.UUID, len(cands))
	for i, x := range cands {
		cids[i] = x.ID.UUID
	}
	rows, err := w.procs[0].Pool.Query(cctx, `SELECT u FROM unnest($1::uuid[]) u WHERE NOT EXISTS (SELECT 1 FROM ff_exec_core WHERE execution_id = u)`, cids)
	if err != nil {
		return
	}
	removed, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, x := range cands {
		if slices.Contains(removed, x.ID.UUID) {
			w.candidates = slices.DeleteFunc(w.candidates, func(y *execution) bool { return y == x })
			w.gone = capped(append(w.gone, x))
		}
	}
}

// goneOne returns a candidate that retention removed (nil: none).
func (w *Workload) goneOne() *execution {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.gone) == 0 {
		return nil
	}
	return w.gone[0]
}

// recreate creates the id of old, which retention removed, again: a new
// incarnation in the same lane with a new policy, recorded as its own
// execution (incKey). old is superseded first (its guard), so no call
// without a lease is made on it any more, while its leases stay in use
// (staleOp). It returns nil when the Create did not commit.
func (w *Workload) recreate(ctx context.Context, proc *AppProcess, old *execution) *execution {
	w.mu.Lock()
	w.gone = slices.DeleteFunc(w.gone, func(y *execution) bool { return y == old })
	w.mu.Unlock()
	if !old.guard.TryLock() {
		// A call on it is in flight: another time.
		w.mu.Lock()
		w.gone = capped(append(w.gone, old))
		w.mu.Unlock()
		return nil
	}
	old.superseded = true
	old.guard.Unlock()
	spec := w.spec(proc, false)
	x := &execution{ID: old.ID, Key: incKey(old.ID.String(), old.Inc+1), Lane: old.Lane, Spec: spec, Inc: old.Inc + 1, Solo: true, Shared: old.Shared,
		prev: old}
	w.remember(x)
	call := &Call{Client: CreatorClient, Process: proc.Index, Exec: x.Key, Steps: []Step{{Kind: OpCreate, Create: spec}}}
	call.Clock.Lo, call.CallNs = proc.Clock.NowMs(), w.tl.Now()
	cctx, cancel := callCtx(ctx)
	defer cancel()
	_, err := proc.Store.Create(cctx, createParams(x.ID.UUID, uuid.Nil, x.Lane, spec))
	if errors.Is(err, ff.ErrValidation) {
		w.harness("creating %s again after retention removed it: %v", x.ID, err)
	}
	if err != nil && !w.exists(cctx, proc, x.ID) {
		w.forget(x)
		w.restore(old)
		return nil
	}
	call.ReturnNs, call.Clock.Hi, call.WallHi = w.tl.Now(), proc.Clock.NowMs(), w.tl.ScannerNowMs()
	call.Results = []Result{{}}
	w.rec.Add(call)
	w.recreated.Add(1)
	w.mu.Lock()
	w.old = capped(append(w.old, old))
	w.mu.Unlock()
	return x
}

// staleLease draws a superseded incarnation and one of its leases (nil:
// none), mostly its first.
func (w *Workload) staleLease(rng *rand.Rand) (*execution, executions.Lease) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.old) == 0 {
		return nil, executions.Lease{}
	}
	for range 4 {
		x := w.old[rng.IntN(len(w.old))]
		x.leaseMu.Lock()
		n := len(x.leases)
		var l executions.Lease
		if n > 0 {
			// Half the time its first lease: attempt 0, epoch 1, as the
			// new incarnation's first claim has.
			l = x.leases[0]
			if rng.IntN(2) == 0 {
				l = x.leases[rng.IntN(n)]
			}
		}
		x.leaseMu.Unlock()
		if n > 0 {
			return x, l
		}
	}
	return nil, executions.Lease{}
}

// spec draws an execution's policy, delay and deadline on proc's clock.
func (w *Workload) spec(proc *AppProcess, downstream bool) CreateSpec {
	now := proc.Clock.NowMs()
	s := CreateSpec{MaxRetries: int32(w.rng.IntN(4))}
	if w.rng.IntN(2) == 0 {
		s.BackoffMs = int64(50 + w.rng.IntN(550))
	}
	if downstream {
		return s
	}
	if w.rng.Float64() < 0.15 {
		s.DelayUntil = now + int64(w.rng.IntN(1500))
	}
	if w.rng.Float64() < 0.25 {
		s.Deadline = now + int64(300+w.rng.IntN(7700))
	}
	return s
}

func createParams(id uuid.UUID, flow uuid.UUID, lane string, s CreateSpec) executions.CreateParams {
	p := executions.CreateParams{ID: id, FlowID: flow, Lane: lane, Namespace: "leasecheck",
		RetryPolicy: executions.RetryPolicy{MaxRetries: int(s.MaxRetries)}}
	if s.BackoffMs > 0 {
		p.RetryPolicy.Backoff = &executions.Backoff{Kind: executions.BackoffFixed, InitialMs: s.BackoffMs}
	}
	if s.DelayUntil != 0 {
		p.DelayUntil = time.UnixMilli(s.DelayUntil)
	}
	if s.Deadline != 0 {
		p.Deadline = time.UnixMilli(s.Deadline)
	}
	return p
}

// sharedLane draws a shared lane for a new solo execution, or "" for a
// lane of its own.
func (w *Workload) sharedLane() string {
	if w.cfg.SharedLanes == 0 || w.rng.Float64() >= w.cfg.SharedShare {
		return ""
	}
	return fmt.Sprintf("shared%d", w.rng.IntN(w.cfg.SharedLanes))
}

// create makes one execution in shared (a shared lane; "": a lane of its
// own) and records its Create; nil when it could not be made (a fault).
func (w *Workload) create(ctx context.Context, proc *AppProcess, flow uuid.UUID, spec CreateSpec, shared string) *execution {
	lane := shared
	if lane == "" {
		lane = w.newLane()
	}
	u := uuid.New()
	id := ff.ExecutionID{Partition: proc.Store.PartitionFor(flow, lane), UUID: u}
	x := &execution{ID: id, Key: id.String(), Lane: lane, Spec: spec, Shared: shared != "", Inc: 1, Solo: flow == uuid.Nil}
	// Known before it exists: a runner polling the shared lane may claim it
	// before Create returns.
	w.remember(x)
	call := &Call{Client: CreatorClient, Process: proc.Index, Exec: id.String(), Steps: []Step{{Kind: OpCreate, Create: spec}}}
	call.Clock.Lo, call.CallNs = proc.Clock.NowMs(), w.tl.Now()
	cctx, cancel := callCtx(ctx)
	defer cancel()
	_, err := proc.Store.Create(cctx, createParams(u, flow, lane, spec))
	if err != nil && !w.exists(cctx, proc, id) {
		w.forget(x)
		return nil
	}
	call.ReturnNs, call.Clock.Hi, call.WallHi = w.tl.Now(), proc.Clock.NowMs(), w.tl.ScannerNowMs()
	call.Results = []Result{{}}
	w.rec.Add(call)
	return x
}

// remember makes x known to lookup (before it is in the hot set).
func (w *Workload) remember(x *execution) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.byID[x.ID.UUID] = x
	w.all = append(w.all, x)
}

// restore makes old the id's latest incarnation again, after a Create of
// the next one that did not commit (forget undid its remember).
func (w *Workload) restore(old *execution) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.byID[old.ID.UUID] = old
}

// forget undoes remember for an execution that was not created.
func (w *Workload) forget(x *execution) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.byID, x.ID.UUID)
	w.all = slices.DeleteFunc(w.all, func(y *execution) bool { return y == x })
}

// exists tells whether a Create whose outcome was unknown committed.
func (w *Workload) exists(ctx context.Context, proc *AppProcess, id ff.ExecutionID) bool {
	for range 5 {
		var ok bool
		err := proc.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM ff_exec_core WHERE partition_key = $1 AND execution_id = $2)`,
			id.Partition, id.UUID).Scan(&ok)
		if err == nil {
			return ok
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// createFlow makes a flow of 2-4 upstreams and one downstream under a
// random policy, and publishes its members once the group is fixed.
func (w *Workload) createFlow(ctx context.Context, proc *AppProcess) {
	cctx, cancel := callCtx(ctx)
	defer cancel()
	flow, err := proc.Store.CreateFlow(cctx, uuid.Nil)
	if err != nil {
		return
	}
	n := 2 + w.rng.IntN(3)
	var ups []*execution
	for range n {
		if x := w.create(ctx, proc, flow, w.spec(proc, false), ""); x != nil {
			ups = append(ups, x)
		}
	}
	if len(ups) == 0 {
		return
	}
	policy := w.policy(len(ups))
	spec := w.spec(proc, true)
	lane := w.newLane()
	u := uuid.New()
	id := ff.ExecutionID{Partition: proc.Store.PartitionFor(flow, lane), UUID: u}
	call := &Call{Client: CreatorClient, Process: proc.Index, Exec: id.String()}
	call.Clock.Lo, call.CallNs = proc.Clock.NowMs(), w.tl.Now()
	_, err = proc.Store.Create(cctx, createParams(u, flow, lane, spec))
	if err != nil && !w.exists(cctx, proc, id) {
		w.publish(ups...)
		return
	}
	upIDs := make([]ff.ExecutionID, len(ups))
	upKeys := make([]string, len(ups))
	for i, x := range ups {
		upIDs[i], upKeys[i] = x.ID, x.Key
	}
	err = proc.Store.AddDependencies(cctx, executions.DependencyParams{FlowID: flow, Downstream: id, Upstreams: upIDs, Policy: policy})
	if err != nil {
		if errors.Is(err, ff.ErrValidation) {
			w.harness("AddDependencies: %v", err)
		}
		// One transaction: the group is fixed if the downstream is blocked.
		var elig string
		if qerr := proc.Pool.QueryRow(cctx, `SELECT eligibility_state FROM ff_exec_core WHERE partition_key = $1 AND execution_id = $2`,
			id.Partition, u).Scan(&elig); qerr != nil {
			w.publish(ups...)
			return // unknown; the downstream is left out of the run's executions
		}
		err = nil
		if elig != ff.EligibleBlockedByDeps {
			err = errors.New("no group")
		}
	}
	spec.Blocked = err == nil
	call.Steps = []Step{{Kind: OpCreate, Create: spec}}
	call.ReturnNs, call.Clock.Hi, call.WallHi = w.tl.Now(), proc.Clock.NowMs(), w.tl.ScannerNowMs()
	call.Results = []Result{{}}
	w.rec.Add(call)
	down := &execution{ID: id, Key: id.String(), Lane: lane, Spec: spec, Inc: 1}
	if spec.Blocked {
		g := &Group{Flow: flow, Downstream: down.Key, Upstreams: upKeys, Policy: policy}
		down.Group = g
		w.mu.Lock()
		w.groups = append(w.groups, g)
		w.mu.Unlock()
	}
	w.publish(append(ups, down)...)
}

func (w *Workload) policy(n int) executions.EdgePolicy {
	on := executions.CancelRemaining
	if w.rng.IntN(3) == 0 {
		on = executions.LetRun
	}
	switch w.rng.IntN(3) {
	case 0:
		return executions.AllOf()
	case 1:
		return executions.AnyOf(on)
	}
	return executions.Quorum(1+w.rng.IntN(n), on)
}

// client is one application worker goroutine.
type client struct {
	w        *Workload
	id       int
	proc     *AppProcess
	rng      *rand.Rand
	instance string
	crashes  int
	// leases it holds, by execution.
	leases map[string]executions.Lease
	// byKey finds a held lease's execution.
	byKey map[string]*execution
	// others are the leases a claim on a shared lane returned for other
	// executions than the one the operation was about.
	others []executions.Lease
	// stale are the last leases it dropped, with their executions: a
	// batch it builds may name one of them beside live ones.
	stale []heldLease
}

// heldLease is a lease with its execution.
type heldLease struct {
	x *execution
	l executions.Lease
}

// maxStale bounds client.stale.
const maxStale = 8

func (c *client) run(ctx context.Context) {
	c.byKey = map[string]*execution{}
	for !c.w.stop.Load() && ctx.Err() == nil {
		if c.w.cfg.Recreate && c.rng.IntN(5) == 0 {
			if x, l := c.w.staleLease(c.rng); x != nil {
				c.staleOp(ctx, x, l)
				continue
			}
		}
		x, held := c.choose()
		if x == nil {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		if held {
			c.leaseOp(ctx, x, c.leases[x.Key])
		} else {
			c.freeOp(ctx, x)
			if _, now := c.leases[x.Key]; now && x.prev != nil && c.rng.IntN(2) == 0 {
				// A worker of the removed incarnation wakes up while the
				// new one is leased, likely under the same attempt and
				// epoch.
				if l, ok := x.prev.firstLease(); ok {
					c.staleOp(ctx, x.prev, l)
				}
			}
		}
		if int(x.calls.Add(1)) >= c.w.cfg.MaxCallsPerExec {
			c.w.retire(x)
		}
		time.Sleep(time.Duration(c.rng.IntN(8000)) * time.Microsecond)
	}
}

// choose picks the next execution: mostly one whose lease it holds.
func (c *client) choose() (*execution, bool) {
	for k, x := range c.byKey {
		if int(x.calls.Load()) >= c.w.cfg.MaxCallsPerExec*3/2 {
			c.drop(k)
		}
	}
	if len(c.leases) > 0 && c.rng.Float64() < 0.65 {
		keys := make([]string, 0, len(c.leases))
		for k := range c.leases {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		k := keys[c.rng.IntN(len(keys))]
		return c.byKey[k], true
	}
	x := c.w.pick(c.rng)
	if x == nil {
		return nil, false
	}
	_, held := c.leases[x.Key]
	return x, held
}

func (c *client) hold(x *execution, l executions.Lease) {
	c.leases[x.Key] = l
	c.byKey[x.Key] = x
	x.note(l)
	c.w.granted(x, l)
}

// staleOp uses lease l of x, an incarnation that retention removed and
// whose id was created again: every call must be refused (ErrStaleLease,
// or ErrNotFound while the id has no row), plain, in a transaction or in a
// batch, as leaseOp draws it. A lease of the removed incarnation may have
// the attempt and epoch of the new one's: only its id tells them apart.
// Clients make one at random (staleLease), and half the time right after
// they claimed the new incarnation, with the old one's first lease.
func (c *client) staleOp(ctx context.Context, x *execution, l executions.Lease) {
	c.w.staleOps.Add(1)
	c.leaseOp(ctx, x, l)
	time.Sleep(time.Duration(c.rng.IntN(8000)) * time.Microsecond)
}

func (c *client) drop(key string) {
	if l, ok := c.leases[key]; ok {
		if len(c.stale) == maxStale {
			c.stale = slices.Delete(c.stale, 0, 1)
		}
		c.stale = append(c.stale, heldLease{c.byKey[key], l})
	}
	delete(c.leases, key)
	delete(c.byKey, key)
}

func (c *client) ttl() time.Duration {
	if c.rng.Float64() < 0.3 {
		return time.Duration(100+c.rng.IntN(200)) * time.Millisecond
	}
	return time.Duration(300+c.rng.IntN(1700)) * time.Millisecond
}

func (c *client) holdFor() time.Duration {
	return time.Duration(3+c.rng.IntN(int(c.w.cfg.Hold/time.Millisecond))) * time.Millisecond
}

func leaseRef(l executions.Lease) LeaseRef {
	return LeaseRef{Attempt: l.AttemptIndex, Epoch: l.Epoch, LeaseID: l.LeaseID, ExpiresAt: l.ExpiresAtMs, Instance: l.WorkerInstanceID}
}

// leaseOp is what a worker does with a lease it holds.
func (c *client) leaseOp(ctx context.Context, x *execution, l executions.Lease) {
	store := c.proc.Store
	ref := leaseRef(l)
	renew := func(ttl time.Duration) (Step, func(context.Context) (Result, error), func(context.Context, pgx.Tx) (Result, error)) {
		st := Step{Kind: OpRenew, Lease: ref, TTL: ttl.Milliseconds()}
		keep := func(nl executions.Lease, err error) (Result, error) {
			if err == nil {
				c.hold(x, nl)
			}
			return Result{Lease: leaseRef(nl)}, err
		}
		return st, func(ctx context.Context) (Result, error) { return keep(store.Renew(ctx, l, ttl)) },
			func(ctx context.Context, tx pgx.Tx) (Result, error) { return keep(store.RenewTx(ctx, tx, l, ttl)) }
	}
	complete := Step{Kind: OpComplete, Lease: ref}
	var call *Call
	switch r := c.rng.Float64(); {
	case r < 0.33:
		st, plain, _ := renew(c.ttl())
		call = c.plain(ctx, x, st, plain)
	case r < 0.40:
		st, _, tx := renew(c.ttl())
		call = c.composite(ctx, x, c.holdFor(), []txStep{{st, tx}})
	case r < 0.50:
		call = c.plain(ctx, x, complete, func(ctx context.Context) (Result, error) { return Result{}, store.Complete(ctx, l, nil) })
	case r < 0.53:
		call = c.composite(ctx, x, c.holdFor(), []txStep{{complete, func(ctx context.Context, tx pgx.Tx) (Result, error) {
			return Result{}, store.CompleteTx(ctx, tx, l, nil)
		}}})
	case r < 0.58:
		st := Step{Kind: OpFail, Lease: ref, Permanent: c.rng.IntN(4) == 0}
		call = c.plain(ctx, x, st, func(ctx context.Context) (Result, error) {
			fr, err := store.Fail(ctx, l, executions.FailParams{Message: "leasecheck", Permanent: st.Permanent})
			return Result{Retried: fr.Retried, NextAttempt: fr.NextAttempt, DelayUntil: fr.DelayUntilMs}, err
		})
	case r < 0.61:
		st := Step{Kind: OpFail, Lease: ref, Permanent: c.rng.IntN(4) == 0}
		call = c.composite(ctx, x, c.holdFor(), []txStep{{st, func(ctx context.Context, tx pgx.Tx) (Result, error) {
			fr, err := store.FailTx(ctx, tx, l, executions.FailParams{Message: "leasecheck", Permanent: st.Permanent})
			return Result{Retried: fr.Retried, NextAttempt: fr.NextAttempt, DelayUntil: fr.DelayUntilMs}, err
		}}})
	case r < 0.65:
		until := c.proc.Clock.NowMs() + int64(c.rng.IntN(1200))
		st := Step{Kind: OpDelay, Lease: ref, Until: until}
		call = c.plain(ctx, x, st, func(ctx context.Context) (Result, error) {
			return Result{}, store.Delay(ctx, l, time.UnixMilli(until))
		})
	case r < 0.67:
		until := c.proc.Clock.NowMs() + int64(c.rng.IntN(1200))
		st := Step{Kind: OpDelay, Lease: ref, Until: until}
		call = c.composite(ctx, x, c.holdFor(), []txStep{{st, func(ctx context.Context, tx pgx.Tx) (Result, error) {
			return Result{}, store.DelayTx(ctx, tx, l, time.UnixMilli(until))
		}}})
	case r < 0.68:
		st := Step{Kind: OpRelease, Lease: ref}
		call = c.plain(ctx, x, st, func(ctx context.Context) (Result, error) { return Result{}, store.Release(ctx, l) })
	case r < 0.69:
		st := Step{Kind: OpRelease, Lease: ref}
		call = c.composite(ctx, x, c.holdFor(), []txStep{{st, func(ctx context.Context, tx pgx.Tx) (Result, error) {
			return Result{}, store.ReleaseTx(ctx, tx, l)
		}}})
	case r < 0.71:
		// The worker crashes: it forgets the lease, which expires.
		c.drop(x.Key)
		c.crashes++
		c.instance = fmt.Sprintf("p%d-c%d-%d", c.proc.Index, c.id, c.crashes)
		return
	case r < 0.74:
		c.batch(ctx, x, l, false)
		return
	case r < 0.76:
		c.batch(ctx, x, l, true)
		return
	case r < 0.83:
		// Work until about the expiry, then renew or complete: the scanner
		// may have expired it meanwhile, or a peer reclaimed it.
		wait := time.Duration(l.ExpiresAtMs-c.proc.Clock.NowMs()+int64(c.rng.IntN(90))-30) * time.Millisecond
		time.Sleep(min(max(wait, 0), 2500*time.Millisecond))
		if c.rng.IntN(3) == 0 {
			call = c.plain(ctx, x, complete, func(ctx context.Context) (Result, error) { return Result{}, store.Complete(ctx, l, nil) })
		} else {
			st, plain, _ := renew(c.ttl())
			call = c.plain(ctx, x, st, plain)
		}
	default:
		st, plain, _ := renew(c.ttl())
		call = c.plain(ctx, x, st, plain)
	}
	c.after(x, call)
}

// after settles what the worker keeps once call on x returned: a live
// lease; not one it finished, lost or could not use. After an unknown
// outcome it may try again.
func (c *client) after(x *execution, call *Call) {
	switch {
	case call.Unknown:
		if c.rng.IntN(2) == 0 {
			c.drop(x.Key)
		}
	case call.failed():
		if cls := call.Results[len(call.Results)-1].Err; cls != ErrExpired || c.rng.IntN(2) == 0 {
			c.drop(x.Key)
		}
	case call.Steps[0].Kind != OpRenew:
		c.drop(x.Key)
	}
}

// freeOp is what a client does to an execution whose lease it does not
// hold: claim it, take it over, or act as an operator.
func (c *client) freeOp(ctx context.Context, x *execution) {
	x.guard.RLock()
	defer x.guard.RUnlock()
	if x.superseded {
		return // the id may be another incarnation's by now
	}
	store := c.proc.Store
	ttl := c.ttl()
	claimMax := 1
	claimParams := func() executions.ClaimParams {
		return executions.ClaimParams{Lane: x.Lane, WorkerID: fmt.Sprintf("client-%d", c.id), WorkerInstanceID: c.instance, LeaseTTL: ttl, Max: claimMax}
	}
	claimStep := Step{Kind: OpClaim, TTL: ttl.Milliseconds(), Instance: c.instance}
	claimed := func(leases []executions.Lease, err error) (Result, error) {
		if err != nil {
			return Result{}, err
		}
		r := Result{Empty: true}
		for _, l := range leases {
			switch {
			case l.ID == x.ID:
				c.hold(x, l)
				r = Result{Lease: leaseRef(l)}
			case x.Shared:
				c.others = append(c.others, l)
			default:
				c.w.harness("a claim of lane %s, the lane of %s alone, returned a lease of %s", x.Lane, x.ID, l.ID)
			}
		}
		return r, nil
	}
	claimTx := txStep{claimStep, func(ctx context.Context, tx pgx.Tx) (Result, error) {
		return claimed(store.ClaimTx(ctx, tx, claimParams()))
	}}
	reclaimStep := Step{Kind: OpReclaim, TTL: ttl.Milliseconds(), Instance: c.instance}
	reclaimed := func(l executions.Lease, err error) (Result, error) {
		if err == nil {
			c.hold(x, l)
		}
		return Result{Lease: leaseRef(l)}, err
	}
	revokeTx := txStep{Step{Kind: OpRevoke}, func(ctx context.Context, tx pgx.Tx) (Result, error) {
		return Result{}, store.RevokeTx(ctx, tx, x.ID, "leasecheck hand-over")
	}}
	cancelParams := executions.CancelParams{Reason: "leasecheck", By: fmt.Sprintf("client-%d", c.id)}
	var call *Call
	c.others = nil
	switch r := c.rng.Float64(); {
	case r < 0.32:
		if x.Shared {
			claimMax = 1 + c.rng.IntN(3)
		}
		call = c.plain(ctx, x, claimStep, func(ctx context.Context) (Result, error) { return claimed(store.Claim(ctx, claimParams())) })
	case r < 0.38:
		call = c.composite(ctx, x, c.holdFor(), []txStep{claimTx})
	case r < 0.46:
		call = c.plain(ctx, x, Step{Kind: OpRevoke}, func(ctx context.Context) (Result, error) {
			return Result{}, store.Revoke(ctx, x.ID, "leasecheck")
		})
	case r < 0.60:
		// Hand-over: one transaction revokes and claims, then holds the
		// row while the previous holder's calls wait for it.
		call = c.composite(ctx, x, c.holdFor(), []txStep{revokeTx, claimTx})
	case r < 0.63:
		call = c.plain(ctx, x, Step{Kind: OpCancel}, func(ctx context.Context) (Result, error) {
			return Result{}, store.Cancel(ctx, x.ID, cancelParams)
		})
	case r < 0.65:
		call = c.composite(ctx, x, c.holdFor(), []txStep{{Step{Kind: OpCancel}, func(ctx context.Context, tx pgx.Tx) (Result, error) {
			return Result{}, store.CancelTx(ctx, tx, x.ID, cancelParams)
		}}})
	case r < 0.77:
		call = c.plain(ctx, x, reclaimStep, func(ctx context.Context) (Result, error) { return reclaimed(store.Reclaim(ctx, x.ID, claimParams())) })
	case r < 0.83:
		call = c.composite(ctx, x, c.holdFor(), []txStep{{reclaimStep, func(ctx context.Context, tx pgx.Tx) (Result, error) {
			return reclaimed(store.ReclaimTx(ctx, tx, x.ID, claimParams()))
		}}})
	default:
		call = c.plain(ctx, x, claimStep, func(ctx context.Context) (Result, error) { return claimed(store.Claim(ctx, claimParams())) })
	}
	c.recordOthers(call)
	if call.Unknown || call.failed() {
		// A lease taken in a transaction that did not commit is no lease.
		c.drop(x.Key)
	}
	if !call.Unknown && !call.failed() && call.Steps[0].Kind == OpCancel {
		c.w.retire(x)
	}
	if len(call.Results) > 0 && call.Results[0].Err == ErrNotActive && call.Steps[0].Kind == OpCancel {
		c.w.retire(x)
	}
}

// recordOthers records, on its own execution, each lease a claim on a
// shared lane returned for another execution than the operation's: a Claim
// with the call's windows (unknown if the call's outcome is), and holds it
// if the call committed.
func (c *client) recordOthers(call *Call) {
	var claim Step
	for _, st := range call.Steps {
		if st.Kind == OpClaim {
			claim = st
		}
	}
	for _, l := range c.others {
		y := c.w.recordLease(call, claim, l)
		if y == nil {
			continue
		}
		c.w.sharedOthers.Add(1)
		if !call.Unknown && !call.failed() {
			c.hold(y, l)
		}
	}
	c.others = nil
}

// recordLease records, on its own execution, a lease l that the claim step
// of call returned: a Claim with call's windows and outcome. It returns the
// execution, nil (a harness error) when the run never created it.
func (w *Workload) recordLease(call *Call, claim Step, l executions.Lease) *execution {
	y := w.lookup(l.ID.UUID)
	if y == nil {
		w.harness("a claim returned a lease of %s, an execution the run never created", l.ID)
		return nil
	}
	w.granted(y, l)
	y.note(l)
	w.rec.Add(&Call{Client: call.Client, Process: call.Process, Exec: y.Key, Steps: []Step{claim}, Results: []Result{{Lease: leaseRef(l)}},
		Unknown: call.Unknown, RolledBack: call.RolledBack, CallNs: call.CallNs, ReturnNs: call.ReturnNs, Clock: call.Clock,
		WallHi: call.WallHi, Err: call.Err, Runner: call.Runner})
	y.calls.Add(1)
	return y
}

// txStep is one ...Tx call of a composite transaction.
type txStep struct {
	st Step
	do func(ctx context.Context, tx pgx.Tx) (Result, error)
}

func (c *client) begin(x *execution, steps []Step) *Call {
	return c.w.begin(c.proc, c.id, x.Key, steps)
}

func (c *client) end(call *Call, unknown bool, err error) *Call {
	return c.w.end(c.proc, call, unknown, err)
}

// returned closes the call's windows now; an unknown outcome has none.
func (w *Workload) returned(proc *AppProcess, call *Call, unknown bool) {
	if unknown {
		call.Unknown, call.ReturnNs, call.Clock.Hi, call.WallHi = true, Unbounded, Unbounded, Unbounded
		return
	}
	call.ReturnNs = w.tl.Now()
	call.Clock.Hi = proc.Clock.NowMs()
	call.WallHi = w.tl.ScannerNowMs()
}

// begin starts a call of client on proc's Store: its windows open now.
func (w *Workload) begin(proc *AppProcess, client int, key string, steps []Step) *Call {
	call := &Call{Client: client, Process: proc.Index, Exec: key, Steps: steps}
	call.Clock.Lo = proc.Clock.NowMs()
	call.CallNs = w.tl.Now()
	return call
}

// end records the call's return; an unknown outcome has none.
func (w *Workload) end(proc *AppProcess, call *Call, unknown bool, err error) *Call {
	w.returned(proc, call, unknown)
	if err != nil {
		call.Err = err.Error()
		if errors.Is(err, ff.ErrValidation) {
			w.harness("%s: %v", Describe(call.input(), call.output()), err)
		}
	}
	w.rec.Add(call)
	return call
}

// plain runs one plain API call. One in ten is impatient: its deadline
// (1-8 ms, about a call's time) may cut it off before, during or after its
// COMMIT, so its outcome is unknown to the client and only the outbox
// tells.
func (c *client) plain(ctx context.Context, x *execution, st Step, do func(context.Context) (Result, error)) *Call {
	call := c.begin(x, []Step{st})
	cctx, cancel := callCtx(ctx)
	defer cancel()
	if c.rng.IntN(10) == 0 {
		var cancelSoon context.CancelFunc
		cctx, cancelSoon = context.WithTimeout(cctx, time.Duration(1000+c.rng.IntN(7000))*time.Microsecond)
		defer cancelSoon()
	}
	r, err := do(cctx)
	c.w.bounds.returned(x.Key, st.Kind.String(), cctx)
	laneWide := ""
	if st.Kind == OpClaim && x.Shared {
		laneWide = x.Lane
	}
	return c.w.settle(c.proc, call, r, err, laneWide)
}

// settle records the outcome of a plain call: unknown after an error that
// is none of the typed ones. A claim of unknown outcome on laneWide (a
// shared lane) may have claimed any of the lane's executions: the checker
// looks for its leases in the outbox, lane-wide.
func (w *Workload) settle(proc *AppProcess, call *Call, r Result, err error, laneWide string) *Call {
	r.Err = Classify(err)
	if r.Err == ErrOther {
		if laneWide != "" {
			call.Exec, call.Lane = "", laneWide
		}
		return w.end(proc, call, true, err)
	}
	if r.Err != OK {
		r = Result{Err: r.Err}
	}
	call.Results = []Result{r}
	return w.end(proc, call, false, err)
}

// composite runs the steps in one transaction and holds it open for hold
// before COMMIT. A failed step rolls it back; an error at COMMIT leaves the
// outcome unknown. One in five whose steps all succeeded is rolled back
// instead of committed (RolledBack): it must leave nothing.
func (c *client) composite(ctx context.Context, x *execution, hold time.Duration, steps []txStep) *Call {
	sts := make([]Step, len(steps))
	for i, s := range steps {
		sts[i] = s.st
	}
	call := c.begin(x, sts)
	cctx, cancel := callCtx(ctx)
	defer cancel()
	tx, err := c.proc.Pool.Begin(cctx)
	if err != nil {
		call.Results = []Result{{Err: ErrOther}}
		return c.end(call, false, err)
	}
	for _, s := range steps {
		r, err := s.do(cctx, tx)
		c.w.bounds.returned(x.Key, s.st.Kind.String()+" (in a transaction)", cctx)
		r.Err = Classify(err)
		if r.Err != OK {
			call.Results = append(call.Results, Result{Err: r.Err})
			_ = tx.Rollback(context.WithoutCancel(cctx))
			return c.end(call, false, err)
		}
		call.Results = append(call.Results, r)
	}
	time.Sleep(hold)
	if c.rng.IntN(5) == 0 {
		// A rollback that fails leaves the connection closed, which rolls
		// the transaction back as well.
		_ = tx.Rollback(context.WithoutCancel(cctx))
		call.RolledBack = true
		return c.end(call, false, nil)
	}
	if err := tx.Commit(cctx); err != nil {
		return c.end(call, true, err)
	}
	return c.end(call, false, nil)
}
