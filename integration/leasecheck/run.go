package leasecheck

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ffriver/ffriver/internal/pgcluster"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/ffriver/ffriver/jobs"
)

// Options describe one run.
type Options struct {
	// Seed drives every random choice of the run (operations, faults,
	// clocks); timing does not repeat, the choices do.
	Seed uint64
	// Duration the clients work for.
	Duration time.Duration
	// Processes is the number of application processes (Stores).
	Processes int
	Workload  WorkloadConfig
	// Schedulers and Workers are the ffscheduler and ffworker processes.
	Schedulers, Workers int
	Faults              Faults
	Bins                Binaries
	// Quiesce bounds the wait for the scanners to finish the due work once
	// the clients stopped (default 60 s).
	Quiesce time.Duration
	// CheckTimeout bounds porcupine (default 2 min).
	CheckTimeout time.Duration
	// Logf reports progress (default: none).
	Logf func(format string, args ...any)
}

// Report is what one run did and found.
type Report struct {
	Seed    uint64
	Verdict *Verdict
	// Calls recorded, and how many of them had an unknown outcome
	// (resolved: found in the outbox).
	Calls, Unknown, Resolved int
	// RolledBack counts the transactions whose calls all succeeded and
	// that their clients rolled back.
	RolledBack int
	// SharedOthers counts the leases claims on shared lanes returned for
	// other executions than the one the client had picked.
	SharedOthers int64
	// Batches counts the FinishMany and FinishManyTx batches the clients
	// built themselves (live, stale and repeated items together).
	Batches int64
	// Recreated counts the ids the workload created again after execution
	// retention removed them (Faults.ExecutionRetention), StaleOps the
	// operations clients then made with the removed incarnations' leases.
	Recreated, StaleOps int64
	// Bounds says how late the clients' calls returned after their
	// deadlines (bounds.go).
	Bounds string
	// RetentionPasses counts the outbox retention jobs completed
	// (Faults.OutboxRetention), RetentionRemoved the events they removed.
	RetentionPasses  int
	RetentionRemoved int64
	// Runner counts the runners' calls (package runner's own loop): see
	// RunnerStats.
	Runner RunnerStats
	// Upstream counts the upstream writers' calls by operation
	// (WorkloadConfig.Upstream).
	Upstream *UpstreamStats
	// Faults injected, by kind.
	Faults map[string]int
	// Probes counts the probes' completed rounds, by probe (probe.go).
	Probes map[string]int
	// Offsets of the application processes' clocks, and of the binaries'
	// (ffscheduler and ffworker, in start order).
	Offsets, BinaryOffsets []time.Duration
	// Notes: binaries that exited on their own, faults that failed,
	// harness errors.
	Notes     []string
	Artifacts []string
	// Elapsed: the whole run; Checked: the checks alone.
	Elapsed, Checked time.Duration
	// FirstViolation is how long after the clients started the earliest
	// offending operation began (0: no violation, or none dated).
	FirstViolation time.Duration
}

// Summary is the report's counts on a few lines.
func (r *Report) Summary() string {
	var b strings.Builder
	v := r.Verdict
	fmt.Fprintf(&b, "seed %d: %d operations checked (%d calls, %d of unknown outcome, %d resolved by the outbox; %d leases from shared-lane claims), %d histories (incarnations of executions), %d outbox transactions\n",
		r.Seed, v.Ops, r.Calls, r.Unknown, r.Resolved, r.SharedOthers, v.Histories, v.Txs)
	if r.Runner.Calls > 0 {
		fmt.Fprintf(&b, "runners: %s\n", r.Runner)
	}
	if v.Removed > 0 || v.Incarnations > 0 || r.Recreated > 0 {
		fmt.Fprintf(&b, "incarnations: %d histories removed by execution retention, %d of ids created again (%d re-creations, then %d operations with the leases of the removed ones); "+
			"calls with a removed incarnation's lease: %d refused as stale, %d as not found\n",
			v.Removed, v.Incarnations, r.Recreated, r.StaleOps, v.RemovedStale, v.RemovedNotFound)
	}
	if r.Upstream != nil {
		fmt.Fprintf(&b, "upstream writer: %d writes committed; %s\n", r.Upstream.Total(), r.Upstream)
	}
	fmt.Fprintf(&b, "faults injected: %s; clock offsets %v, binaries' %v\n", formatCounts(r.Faults), r.Offsets, r.BinaryOffsets)
	fmt.Fprintf(&b, "transactions rolled back after every call in them succeeded: %d\n", r.RolledBack)
	fmt.Fprintf(&b, "FinishMany and FinishManyTx batches built by clients: %d\n", r.Batches)
	fmt.Fprintf(&b, "bounds: %s\n", r.Bounds)
	fmt.Fprintf(&b, "streams: a committed call's events delivered at most %s after it returned; outbox retention: %d passes, %d events removed\n",
		v.MaxDeliveryLag.Round(time.Millisecond), r.RetentionPasses, r.RetentionRemoved)
	if len(r.Probes) > 0 {
		fmt.Fprintf(&b, "probe rounds: %s\n", formatCounts(r.Probes))
	}
	byCheck := map[string]int{}
	for _, vi := range v.Violations {
		byCheck[vi.Check]++
	}
	fmt.Fprintf(&b, "violations: %d (%s)", len(v.Violations), formatCounts(byCheck))
	if r.FirstViolation > 0 {
		fmt.Fprintf(&b, ", the first in an operation begun %s after the clients started", r.FirstViolation.Round(time.Millisecond))
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "run %s, checks %s", r.Elapsed.Round(100*time.Millisecond), r.Checked.Round(10*time.Millisecond))
	return b.String()
}

func formatCounts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// Run runs one randomized history on a schema of its own (testdb): the
// real binaries run the scanners, the clients drive the API, the faults
// fire; then the clients stop, the scanners quiesce, and every check runs.
func Run(tb testing.TB, o Options) *Report {
	tb.Helper()
	began := time.Now()
	logf := o.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if o.Quiesce == 0 {
		o.Quiesce = 60 * time.Second
	}
	if o.CheckTimeout == 0 {
		o.CheckTimeout = 2 * time.Minute
	}
	ctx := tb.Context()
	dbURL := testdb.URL()
	var repl *pgcluster.Replication
	if o.Faults.Failover == 0 {
		// The binaries, the applications' pools, the probes and the
		// streams (about 40 at once in the small runs).
		testdb.Reserve(tb, 35)
	} else {
		// A primary and a synchronous standby of the run's own: every
		// process is given both, and the injector fails over between
		// them (faults.go).
		repl = pgcluster.NewReplication(ctx, tb, true, "max_connections = 300\n")
		dbURL = repl.URL
	}
	db := testdb.New(tb, &testdb.Options{MaxConns: 8, URL: dbURL})
	tag := "lc" + db.Schema[len(db.Schema)-8:]
	rep := &Report{Seed: o.Seed}
	if err := InstallCommitOrder(ctx, db.Pool); err != nil {
		tb.Fatal(err)
	}
	tl := NewTimeline().WithScannerSkew(o.Faults.BinaryClockSkew / 2)
	streams, err := StartStreams(ctx, db.Pool, db.Schema, "leasecheck-stream", tl)
	if err != nil {
		tb.Fatal(err)
	}
	defer streams.Stop()

	cluster := NewCluster(o.Bins, dbURL, db.Schema, tag)
	if o.Faults.BinaryClockSkew > 0 {
		cluster.Skew(o.Faults.BinaryClockSkew, o.Seed)
	}
	cluster.OutboxRetention(o.Faults.OutboxRetention)
	cluster.ExecutionRetention(o.Faults.ExecutionRetention)
	if o.Faults.ExecutionRetention > 0 {
		o.Workload.Recreate = true
	}
	defer cluster.Stop(30 * time.Second)
	for range o.Schedulers {
		if _, err := cluster.Start(true); err != nil {
			tb.Fatal(err)
		}
	}
	for range o.Workers {
		if _, err := cluster.Start(false); err != nil {
			tb.Fatal(err)
		}
	}
	if !await(ctx, 60*time.Second, func() bool { return Leader(ctx, db.Pool) != "" }) {
		tb.Fatalf("no River leader within 60 s:\n%s", strings.Join(cluster.Notes(), "\n"))
	}

	rng := rand.New(rand.NewPCG(o.Seed, 1))
	var procs []*AppProcess
	// A runner's calls take up to two connections more of its process
	// (a claim or renewal, and a batch of ends).
	perProc := int32((o.Workload.Clients+2*o.Workload.Runners)/max(o.Processes, 1) + 3)
	for i := range o.Processes {
		var offset time.Duration
		if o.Faults.ClockSkew > 0 && i > 0 {
			offset = time.Duration(rng.Int64N(int64(o.Faults.ClockSkew))) - o.Faults.ClockSkew/2
		}
		offset = offset.Round(time.Millisecond)
		p, err := OpenApp(ctx, dbURL, db.Schema, fmt.Sprintf("%s-app%d", tag, i), i, offset, perProc)
		if err != nil {
			tb.Fatal(err)
		}
		defer p.Pool.Close()
		procs = append(procs, p)
		rep.Offsets = append(rep.Offsets, offset)
	}

	rec := &Recorder{}
	w := NewWorkload(o.Workload, procs, rec, tl, o.Seed)
	inj := newInjector(o.Faults, db.Pool, cluster, tag, o.Seed)
	inj.repl = repl
	faultCtx, stopFaults := context.WithCancel(ctx)
	faultsDone := make(chan struct{})
	go func() {
		inj.run(faultCtx)
		close(faultsDone)
	}()
	started := tl.Now()
	var probeProc *AppProcess
	if !o.Workload.NoProbes {
		// The probes' own process: its calls are not among those
		// terminateCalls cuts off (it names the clients' processes), so
		// that its rounds finish; the other faults reach it.
		p, err := OpenApp(ctx, dbURL, db.Schema, tag+"-probe", len(procs), 0, 8)
		if err != nil {
			tb.Fatal(err)
		}
		defer p.Pool.Close()
		probeProc = p
	}
	w.Start(ctx, o.Seed, db.Pool, probeProc)
	logf("seed %d: %d clients on %d processes (clocks %v), %d schedulers, %d workers, faults: %s, for %s",
		o.Seed, o.Workload.Clients, o.Processes, rep.Offsets, o.Schedulers, o.Workers, o.Faults, o.Duration)
	select {
	case <-ctx.Done():
	case <-time.After(o.Duration):
	}
	stopFaults()
	<-faultsDone
	w.Stop()
	stopped := time.Now()
	appNames := make([]string, 0, len(procs))
	for _, p := range procs {
		appNames = append(appNames, p.AppName)
	}
	w.bounds.idle(ctx, db.Pool, appNames)
	if err := cluster.Restore(); err != nil {
		tb.Fatal(err)
	}
	logf("seed %d: clients stopped after %d calls; waiting for the scanners to quiesce", o.Seed, len(rec.Calls()))

	// Quiesce: a snapshot in which nothing is overdue and nothing is active
	// or delayed any more (the leases the clients left behind ran out and
	// were expired), whose events the streams have all delivered. No fixed
	// sleeps: each is a condition. The condition is polled with a small
	// read (ReadQuiesce); the full snapshot, which reads every event of the
	// run and takes minutes after a long one, is read once that says quiet
	// (its overdue list is as of its start: read as the poll, it would
	// report what was overdue minutes before).
	var snap *Snapshot
	said := time.Now()
	quiet := await(ctx, o.Quiesce, func() bool {
		q, err := ReadQuiesce(ctx, db.Pool)
		if err != nil {
			return false
		}
		if len(q.Overdue) > 0 || q.Pending > 0 {
			if time.Since(said) >= 10*time.Second {
				said = time.Now()
				logf("seed %d: still quiescing after %s: %d executions active or delayed, overdue: %v", o.Seed, time.Since(stopped).Round(time.Second), q.Pending, q.Overdue)
			}
			return false
		}
		s, err := ReadSnapshot(ctx, db.Pool)
		if err != nil {
			return false
		}
		snap = s
		return len(s.Overdue) == 0 && s.Pending == 0
	})
	if snap == nil {
		s, err := ReadSnapshot(ctx, db.Pool)
		if err != nil {
			tb.Fatalf("no snapshot could be read after %s: %v", o.Quiesce, err)
		}
		snap = s
	}
	if !quiet {
		logf("seed %d: after %s, %d executions still active or delayed, overdue: %v", o.Seed, o.Quiesce, snap.Pending, snap.Overdue)
	}
	await(ctx, 30*time.Second, func() bool { return streams.missing(snap) == 0 })
	logf("seed %d: quiesced %s after the clients stopped", o.Seed, time.Since(stopped).Round(10*time.Millisecond))
	if o.Faults.OutboxRetention > 0 {
		// A short run may end before retention dropped anything: wait
		// (the streams still attached, caught up) until it has removed
		// some of the run's events, which must all have been delivered.
		removed := func() int64 {
			var n int64
			_ = db.Pool.QueryRow(ctx, `SELECT coalesce(sum(events), 0) FROM ff_outbox_trim`).Scan(&n)
			return n
		}
		waited := time.Now()
		if !await(ctx, 3*o.Faults.OutboxRetention+10*time.Second, func() bool { return removed() > 0 }) {
			rep.Notes = append(rep.Notes, fmt.Sprintf("outbox retention (%s) removed no event within %s of the quiesce", o.Faults.OutboxRetention, 3*o.Faults.OutboxRetention+10*time.Second))
		}
		logf("seed %d: outbox retention removed events %s after the quiesce", o.Seed, time.Since(waited).Round(10*time.Millisecond))
	}

	checkStart := time.Now()
	calls := rec.Calls()
	rep.Verdict = Judge(tl, calls, snap, streams, w.Groups(), w.SharedLanes(), o.Workload.Clients+1, o.CheckTimeout)
	if w.probe != nil {
		rep.Verdict.Violations = append(rep.Verdict.Violations, w.probe.Violations()...)
	}
	rep.Verdict.Violations = append(rep.Verdict.Violations, w.bounds.violations()...)
	if d := rep.Verdict.MaxDeliveryLag; o.Faults.OutboxRetention > 0 && d > maxDeliveryLag {
		rep.Verdict.add("stream", "", fmt.Sprintf("a committed call's events waited %s after it returned for the streams to deliver them "+
			"(outbox retention %s rotating, idle readers: the bound is %s)", d.Round(time.Millisecond), o.Faults.OutboxRetention, maxDeliveryLag))
	}
	if o.Faults.OutboxRetention > 0 {
		if err := db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM river_job WHERE kind = $1 AND state = 'completed'),
			(SELECT coalesce(sum(events), 0) FROM ff_outbox_trim)`, jobs.KindTrimOutbox).Scan(&rep.RetentionPasses, &rep.RetentionRemoved); err != nil {
			rep.Notes = append(rep.Notes, "reading outbox retention's work: "+err.Error())
		}
	}
	rep.Bounds = w.bounds.String()
	if w.probe != nil {
		rep.Probes = w.probe.Rounds()
		rep.Notes = append(rep.Notes, w.probe.Notes()...)
	}
	rep.Checked = time.Since(checkStart)
	if at := rep.Verdict.FirstAt(); at > 0 {
		rep.FirstViolation = time.Duration(max(at-started, 0))
	}
	rep.Calls = len(calls)
	for _, c := range calls {
		if c.Unknown {
			rep.Unknown++
		}
		if c.RolledBack {
			rep.RolledBack++
		}
	}
	rep.Resolved = rep.Verdict.Resolved
	if n, first := streams.Reorders(snap); n > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%d executions' events were streamed out of commit order inside a batch (documented); the first: %s", n, first))
	}
	rep.SharedOthers = w.SharedOthers()
	rep.Batches = w.Batches()
	rep.Recreated = w.Recreated()
	rep.StaleOps = w.StaleOps()
	rep.BinaryOffsets = cluster.Offsets()
	rep.Runner = runnerStats(calls, snap)
	if o.Workload.Upstream > 0 {
		up := upstreamStats(w, calls)
		rep.Upstream = &up
	}
	rep.Faults = inj.Counts()
	if p := inj.Promotions(); len(p) > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%d failovers to the synchronous standby (promotions took %v)", len(p), p))
	}
	rep.Notes = slices.Concat(rep.Notes, cluster.Notes(), inj.Errors(), w.HarnessErrors())
	if len(rep.Verdict.Violations) > 0 {
		files, err := rep.Verdict.WriteArtifacts(ArtifactsDir(), o.Seed, 10)
		if err != nil {
			rep.Notes = append(rep.Notes, "writing the artifacts: "+err.Error())
		}
		rep.Artifacts = files
	}
	rep.Elapsed = time.Since(began)
	return rep
}

// await polls cond every 100 ms until it holds or within has passed.
func await(ctx context.Context, within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}
