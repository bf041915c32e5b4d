package leasecheck

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/ffriver/ffriver/internal/testdb"
)

// The long run: go test ./integration/leasecheck -run TestLeaseHistories -args -duration 10m -seed N
var (
	flagDuration = flag.Duration("duration", 0, "run one long history of this duration with every fault, instead of the small runs")
	flagSeed     = flag.Uint64("seed", 0, "seed of the run (0: random; with the small runs, replaces the random seed)")
	flagClients  = flag.Int("clients", 0, "application clients (default 8 small, 16 long)")
	flagRunners  = flag.Int("runners", -1, "package runner's Runners on the shared lanes (default 2 small, 4 long)")
	flagNoProbes = flag.Bool("noprobes", false, "run without the probes (probe.go): what the histories alone catch")
	flagUpstream = flag.Int("upstream", -1, "upstream writers (FlowFabric v0.15.0's handle-based statements) on the shared lanes (default: 1 in seeds 1 and 2 and the long run, else 0)")
	flagFaults   = flag.String("faults", "", "comma-separated faults of the long run (default all): kill-worker, kill-scheduler, terminate, long-locks, duplicate-jobs, cancel-jobs, skew (applications' clocks 10 s apart, binaries' 2 s), retention (outbox retention 30 s rotating, idle readers), exec-retention (execution retention 3 s, ids created again), failover (the run on a primary and a synchronous standby of its own, failed over about every minute)")
)

// smallRun is one of the small runs of make test: a fixed seed and the few
// faults it injects.
type smallRun struct {
	seed   uint64
	faults Faults
	// upstream writers (WorkloadConfig.Upstream).
	upstream int
}

// With -seed N only that run is made (a fixed one's faults for its seed).
func smallRuns() []smallRun {
	runs := []smallRun{
		{seed: 1, faults: Faults{TerminateBackends: true, LongLocks: true, ClockSkew: 2 * time.Second, BinaryClockSkew: 2 * time.Second, Every: 700 * time.Millisecond},
			upstream: 1},
		{seed: 2, faults: Faults{KillWorker: true, DuplicateJobs: true, CancelJobs: true, OutboxRetention: 10 * time.Second, IdleReaders: true,
			ExecutionRetention: time.Second, Every: 1500 * time.Millisecond}, upstream: 1},
	}
	seed := *flagSeed
	for _, r := range runs {
		if r.seed == seed {
			return []smallRun{r}
		}
	}
	if seed != 0 {
		return []smallRun{{seed: seed, faults: randomFaults(seed)}}
	}
	seed = 3 + rand.Uint64()%1_000_000
	return append(runs, smallRun{seed: seed, faults: randomFaults(seed)})
}

// randomFaults picks a few faults from the seed.
func randomFaults(seed uint64) Faults {
	rng := rand.New(rand.NewPCG(seed, 99))
	f := Faults{Every: time.Second}
	f.TerminateBackends = rng.IntN(2) == 0
	f.LongLocks = rng.IntN(2) == 0
	f.KillWorker = rng.IntN(3) == 0
	f.DuplicateJobs = rng.IntN(2) == 0
	f.CancelJobs = rng.IntN(2) == 0
	if rng.IntN(2) == 0 {
		f.ClockSkew = time.Duration(1+rng.IntN(10)) * time.Second
		f.BinaryClockSkew = f.ClockSkew / 5
	}
	if rng.IntN(3) == 0 {
		f.ExecutionRetention = time.Second
	}
	return f
}

func allFaults(list string) Faults {
	f := Faults{Every: time.Second}
	if list == "" {
		list = "kill-worker,kill-scheduler,terminate,long-locks,duplicate-jobs,cancel-jobs,skew,retention,exec-retention,failover"
	}
	for _, name := range strings.Split(list, ",") {
		switch strings.TrimSpace(name) {
		case "kill-worker":
			f.KillWorker = true
		case "kill-scheduler":
			f.KillScheduler = true
		case "terminate":
			f.TerminateBackends = true
		case "long-locks":
			f.LongLocks = true
		case "duplicate-jobs":
			f.DuplicateJobs = true
		case "cancel-jobs":
			f.CancelJobs = true
		case "skew":
			f.ClockSkew = 10 * time.Second
			f.BinaryClockSkew = 2 * time.Second
		case "retention":
			f.OutboxRetention, f.IdleReaders = 30*time.Second, true
		case "failover":
			f.Failover = time.Minute
		case "exec-retention":
			f.ExecutionRetention = 3 * time.Second
		}
	}
	return f
}

// TestLeaseHistories checks randomized histories of the lease protocol
// against the model, the outbox and the end state (see the package doc).
// Without flags it runs three small histories (two fixed seeds and a random
// one, printed), a few faults each; with -duration it runs one long history
// with every fault. A failure names the seed: rerun with -seed N.
func TestLeaseHistories(t *testing.T) {
	testdb.Connect(t, "").Close() // skip (fail with CI=true) without a database
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	bins, err := BuildBinaries(ctx, t.TempDir())
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	if *flagDuration > 0 {
		seed := *flagSeed
		if seed == 0 {
			seed = rand.Uint64() % 1_000_000
		}
		clients := *flagClients
		if clients == 0 {
			clients = 16
		}
		runOne(t, Options{Seed: seed, Duration: *flagDuration, Processes: 4, Schedulers: 2, Workers: 2,
			Workload: WorkloadConfig{Clients: clients, HotSet: clients, MaxCallsPerExec: 40, FlowShare: 0.2, Hold: 40 * time.Millisecond,
				SharedShare: 0.25, SharedLanes: 2, Runners: runners(4), NoProbes: *flagNoProbes, Upstream: upstreamWriters(1), UpstreamPaceMs: 40},
			Faults: allFaults(*flagFaults), Bins: bins, Quiesce: 3 * time.Minute})
		return
	}
	clients := *flagClients
	if clients == 0 {
		clients = 8
	}
	for _, r := range smallRuns() {
		t.Run(fmt.Sprintf("seed=%d", r.seed), func(t *testing.T) {
			runOne(t, Options{Seed: r.seed, Duration: 6 * time.Second, Processes: 2, Schedulers: 1, Workers: 1,
				Workload: WorkloadConfig{Clients: clients, HotSet: clients, MaxCallsPerExec: 30, FlowShare: 0.2, Hold: 40 * time.Millisecond,
					SharedShare: 0.3, SharedLanes: 1, Runners: runners(2), NoProbes: *flagNoProbes, Upstream: upstreamWriters(r.upstream), UpstreamPaceMs: 40},
				Faults: r.faults, Bins: bins})
		})
	}
}

func runOne(t *testing.T, o Options) {
	t.Helper()
	o.Logf = t.Logf
	t.Logf("seed %d (rerun: go test ./integration/leasecheck -run 'TestLeaseHistories' -args -seed %d%s)", o.Seed, o.Seed, longArgs())
	rep := Run(t, o)
	t.Logf("%s", rep.Summary())
	for _, n := range rep.Notes {
		t.Logf("note: %s", n)
	}
	if n := len(rep.Verdict.Violations); n > 0 {
		shown := rep.Verdict.Violations
		if len(shown) > 8 {
			shown = shown[:8]
		}
		var b strings.Builder
		for _, v := range shown {
			b.WriteString("\n  " + v.String())
		}
		t.Errorf("seed %d: %d violations (the first %d below); artifacts: %v%s", o.Seed, n, len(shown), rep.Artifacts, b.String())
	}
}

func runners(def int) int {
	if *flagRunners >= 0 {
		return *flagRunners
	}
	return def
}

func upstreamWriters(def int) int {
	if *flagUpstream >= 0 {
		return *flagUpstream
	}
	return def
}

func longArgs() string {
	if *flagDuration > 0 {
		return fmt.Sprintf(" -duration %s", *flagDuration)
	}
	return ""
}
