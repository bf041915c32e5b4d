package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ffriver/ffriver/cmd/ffctl/internal/bench"
	"github.com/ffriver/ffriver/cmd/internal/cli"
	"github.com/ffriver/ffriver/outbox"
)

// allScenarios in the order a full run runs them.
var allScenarios = []string{"outbox", "expire", "lag", "idle", "stream", "scaleout", "lifecycle", "retention"}

// namedScenarios run only when named: they take too long for a full run
// (half an hour, an hour or more).
var namedScenarios = []string{"soak", "scale", "tune"}

// benchStdout is where ffctl bench prints its report (a test's buffer in
// tests).
var benchStdout io.Writer = os.Stdout

var benchCommand = command{
	name:    "bench",
	summary: "run the performance scenarios and print the figures with their baselines",
	run:     runBench,
}

func runBench(ctx context.Context, args []string) int {
	fs := cli.NewFlagSet("ffctl bench", "[scenario ...]",
		"Runs performance scenarios, each in a scratch schema of its own (created, then dropped),\n"+
			"and prints each figure beside the baseline measured in the same run, the ratio and the\n"+
			"target. Scenarios: outbox, expire, lag, idle, stream, scaleout, lifecycle, retention (default: all, about 17 minutes on\n"+
			"2 cores), and soak, run only when named: --soak-rate transitions/s for --soak-duration (30 minutes)\n"+
			"with every retention at --soak-retention, sampling sizes, dead tuples and throughput every\n"+
			"--soak-sample. expire, lag, idle and soak run ffriver's pipeline (a scheduler and a worker as the\n"+
			"binaries configure them): expire, lag and soak in this process, idle as the ffscheduler and\n"+
			"ffworker binaries built with `go build` from the module in the working directory (or\n"+
			"in-process, with --idle-inprocess or when they cannot be built). Do not run it against a\n"+
			"production database: it loads the server for minutes. --schema is ignored.\n\n"+
			"scale runs only when named: it builds a store of --scale-executions executions and\n"+
			"--scale-events outbox events by bulk SQL (10,000,000 and 50,000,000 by default; a fifth\n"+
			"of that took 3 minutes on 2 cores, and the build grows faster than the store), then\n"+
			"measures the lifecycle, the expire drain, streams, the operator reads and one retention\n"+
			"pass on it beside an empty store.\n\n"+
			"tune runs only when named: the expire drain of --tune-leases leases once per --tune-rounds\n"+
			"round for every (--tune-lanes, --tune-apply-workers) pair and ffriver's defaults, printing\n"+
			"each setting's leases/s, the best one found and the defaults' ratio to it (default grid:\n"+
			"half, the same and twice the defaults on this machine; about 3 minutes on 2 cores).")
	common := cli.AddCommon(fs)
	format := fs.String("format", "text", "output `format`: text or json")
	keep := fs.Bool("keep", false, "keep the scratch schemas instead of dropping them")
	writers := fs.Int("writers", 32, "outbox: concurrent `writers`")
	duration := fs.Duration("duration", 10*time.Second, "outbox: how long each variant runs")
	leases := fs.Int("leases", 20_000, "expire, scaleout: expired `leases` to drain")
	memLeases := fs.Int("memory-leases", 100_000, "scaleout: `leases` of the drain after which the single ffworker's peak RSS is read again (0: skip)")
	clients := fs.Int("clients", 32, "expire: `clients` of the raw pipelined ceiling")
	applyWorkers := fs.Int("apply-workers", 0, "expire, lag, idle with --idle-inprocess: apply `workers` of the pipeline's worker process (default: ffworker's)")
	groupSize := fs.Int("group-size", 0, "expire, lag: most item jobs of one kind per transaction in the worker (default: ffriver's; 1: no grouping)")
	groupLanes := fs.Int("group-lanes", 0, "expire, lag: group transactions per kind at once in the worker (default: ffriver's)")
	fetchCooldown := fs.Duration("fetch-cooldown", 0, "expire, lag, idle with --idle-inprocess: override River's fetch cooldown of the pipeline's processes (default: ffriver's)")
	fetchPoll := fs.Duration("fetch-poll-interval", 0, "expire, lag, idle with --idle-inprocess: override River's fetch poll interval of the pipeline's processes (default: ffriver's)")
	expiriesPerSec := fs.String("expiries-per-sec", "1000,3000", "lag: lease expiries per second, one run per comma-separated `rate`")
	lagDuration := fs.Duration("lag-duration", 30*time.Second, "lag: how long leases keep expiring")
	idleDuration := fs.Duration("idle-duration", 60*time.Second, "idle: how long the idle pipeline is measured (after a warm-up)")
	idleInProcess := fs.Bool("idle-inprocess", false, "idle: measure in-process River clients instead of building and running the ffscheduler and ffworker binaries")
	eventsPerSec := fs.Int("events-per-sec", 1000, "stream: lease events committed per second in the latency runs")
	streamDuration := fs.Duration("stream-duration", 30*time.Second, "stream: how long the latency run with the Waker lasts (the poll-only run: a third, at least 5s)")
	catchUp := fs.Int("catchup-events", 1_000_000, "stream: backlog of `events` the catch-up run drains")
	wakeInterval := fs.Duration("wake-interval", outbox.DefaultWakeInterval, "stream: least time between two wake-up NOTIFYs of the Waker")
	lcExecs := fs.Int("lifecycle-executions", 20_000, "lifecycle: `executions` created, then claimed and completed, per run")
	retEvents := fs.Int("retention-events", 1_000_000, "retention: lease `events` removed by each way, a partition dropped and the row trim")
	scaleExecs := fs.Int("scale-executions", 10_000_000, "scale: `executions` in the big store")
	scaleEvents := fs.Int("scale-events", 50_000_000, "scale: outbox `events` in the big store")
	scaleWorkers := fs.Int("scale-workers", 64, "scale: `workers` of the lifecycle runs (each holds a connection)")
	lcWorkers := fs.String("lifecycle-workers", "8,16,32,64,128", "lifecycle: worker counts, one run per comma-separated `count`")
	lcClaims := fs.Int("lifecycle-claims", 0, "lifecycle: the runner's claims in flight (runner.Config.ClaimsInFlight; 0: the machine's)")
	lcPlot := fs.String("lifecycle-plot", "", "lifecycle: also draw the figures as an SVG plot into `file` (docs/performance.md's is docs/lifecycle.svg)")
	soakDuration := fs.Duration("soak-duration", bench.DefaultSoakDuration, "soak: how long the load runs")
	soakRate := fs.Int("soak-rate", bench.DefaultSoakRate, "soak: transitions per second asked of the load (create, claim, complete: 3 per execution)")
	soakRetention := fs.Duration("soak-retention", bench.DefaultSoakRetention, "soak: retention of the outbox, of terminal executions and of River's completed jobs")
	soakSample := fs.Duration("soak-sample", bench.DefaultSoakSample, "soak: time between two samples of sizes, dead tuples and throughput")
	soakVacuum := fs.Duration("soak-vacuum", 0, "soak: on a server with autovacuum off, vacuum and analyze the scratch tables autovacuum would, every `interval` (1m: autovacuum's naptime; 0: none)")
	soakPlot := fs.String("soak-plot", "", "soak: also draw the samples as an SVG plot into `file` (docs/performance.md's is docs/soak.svg)")
	// The timers' lag (issue 38, item 3).
	lagKinds := fs.String("lag-kinds", strings.Join(bench.LagKinds, ","), "lag: the timers measured, one run each per rate: expiry, promotion, deadline, comma-separated")
	tuneLeases := fs.Int("tune-leases", 10_000, "tune: expired `leases` per drain")
	tuneLanesDef, tuneApplyDef := bench.TuneGrid()
	tuneLanes := fs.String("tune-lanes", joinInts(tuneLanesDef), "tune: group lanes tried, comma-separated `counts` (default: half, the same and twice the machine's)")
	tuneApply := fs.String("tune-apply-workers", joinInts(tuneApplyDef), "tune: apply workers tried, comma-separated `counts` (default: half, the same and twice the machine's)")
	tuneRounds := fs.Int("tune-rounds", 2, "tune: drains of each setting, interleaved; a setting's figure is their mean")
	noWake := fs.Bool("no-wake", false, "expire, lag: run the scheduler without its wake loop (the scanners tick only every interval)")
	wakeSpacing := fs.Duration("wake-spacing", 0, "expire, lag: least time between two wake ticks of one scanner (default: ffriver's, ffriver.WakeOptions.Spacing)")
	var lagRates, lcWorkerCounts, tuneLaneCounts, tuneApplyCounts []int
	fs.AfterParse(func() error {
		lagRates, lcWorkerCounts = nil, nil // flags and scenario names may alternate: AfterParse runs after each part
		var err error
		if tuneLaneCounts, err = parseCounts("tune-lanes", *tuneLanes, 1000); err != nil {
			return err
		}
		if tuneApplyCounts, err = parseCounts("tune-apply-workers", *tuneApply, 10000); err != nil {
			return err
		}
		if err := cli.FirstError(cli.CheckInt("tune-leases", *tuneLeases, 1, 10_000_000), cli.CheckInt("tune-rounds", *tuneRounds, 1, 100)); err != nil {
			return err
		}
		if *format != "text" && *format != "json" {
			return cli.Usagef("--format %q: want text or json", *format)
		}
		if *memLeases < 0 {
			return cli.Usagef("--memory-leases must not be negative")
		}
		if *writers < 1 || *leases < 1 || *clients < 1 || *duration <= 0 {
			return cli.Usagef("--writers, --leases, --clients and --duration must be positive")
		}
		for _, r := range strings.Split(*expiriesPerSec, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(r))
			if err != nil || n < 1 || n > 1_000_000 {
				return cli.Usagef("--expiries-per-sec %q: want rates in 1..1000000, comma-separated", *expiriesPerSec)
			}
			lagRates = append(lagRates, n)
		}
		for _, k := range strings.Split(*lagKinds, ",") {
			if !slices.Contains(bench.LagKinds, strings.TrimSpace(k)) {
				return cli.Usagef("--lag-kinds %q: want some of %s, comma-separated", *lagKinds, strings.Join(bench.LagKinds, ","))
			}
		}
		if lcWorkerCounts, err = parseCounts("lifecycle-workers", *lcWorkers, 1024); err != nil {
			return err
		}
		if *scaleExecs < 1000 || *scaleEvents < 0 || *scaleWorkers < 1 || *scaleWorkers > 1024 {
			return cli.Usagef("--scale-executions must be at least 1000, --scale-events not negative, --scale-workers in 1..1024")
		}
		if *retEvents < 1 {
			return cli.Usagef("--retention-events must be positive")
		}
		if err := cli.FirstError(
			cli.CheckDuration("soak-duration", *soakDuration, time.Second, 24*time.Hour),
			cli.CheckInt("soak-rate", *soakRate, 1, 1_000_000),
			cli.CheckDuration("soak-retention", *soakRetention, time.Second, 24*time.Hour),
			cli.CheckDuration("soak-sample", *soakSample, time.Second, 24*time.Hour),
			cli.CheckDuration("soak-vacuum", *soakVacuum, 0, 24*time.Hour),
		); err != nil {
			return err
		}
		if *lcExecs < 1 {
			return cli.Usagef("--lifecycle-executions must be positive")
		}
		if *lagDuration <= 0 || *idleDuration <= 0 {
			return cli.Usagef("--lag-duration and --idle-duration must be positive")
		}
		if *groupSize < 0 || *groupSize > 10000 || *groupLanes < 0 || *groupLanes > 1000 {
			return cli.Usagef("--group-size must be in 0..10000 and --group-lanes in 0..1000 (0: ffriver's default)")
		}
		if err := cli.FirstError(
			cli.CheckInt("apply-workers", *applyWorkers, 0, 10000),
			cli.CheckDuration("fetch-cooldown", *fetchCooldown, 0, time.Minute),
			cli.CheckDuration("fetch-poll-interval", *fetchPoll, 0, time.Hour),
		); err != nil {
			return err
		}
		if *eventsPerSec < 1 || *streamDuration <= 0 || *catchUp < 1 || *wakeInterval <= 0 {
			return cli.Usagef("--events-per-sec, --stream-duration, --catchup-events and --wake-interval must be positive")
		}
		return nil
	})
	// Scenario names and flags may be interleaved: parse, take the names up
	// to the next flag, parse again.
	var scenarios []string
	for rest := args; ; {
		if err := fs.Parse(rest); err != nil {
			return cli.Report(os.Stderr, fs.Name(), err)
		}
		rest = fs.Args()
		for len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
			scenarios, rest = append(scenarios, rest[0]), rest[1:]
		}
		if len(rest) == 0 {
			break
		}
	}
	if len(scenarios) == 0 {
		scenarios = allScenarios
	}
	for _, s := range scenarios {
		if !slices.Contains(allScenarios, s) && !slices.Contains(namedScenarios, s) {
			return cli.Report(os.Stderr, fs.Name(), cli.Usagef("unknown scenario %q (known: %s)", s,
				strings.Join(slices.Concat(allScenarios, namedScenarios), ", ")))
		}
	}
	logger := common.Logger(os.Stderr)
	pool, err := common.OpenPool(ctx, cli.PoolOptions{AppName: "ffctl bench", MaxConns: 2})
	if err != nil {
		return cli.Report(os.Stderr, fs.Name(), err)
	}
	machine := bench.Machine(ctx, pool)
	pool.Close()

	pipe := bench.PipelineOptions{ApplyWorkers: *applyWorkers, GroupSize: *groupSize, GroupLanes: *groupLanes, FetchCooldown: *fetchCooldown, FetchPollInterval: *fetchPoll}
	pipe.Wake.Disabled = *noWake
	pipe.Wake.Spacing = *wakeSpacing
	env := &bench.Env{URL: common.DatabaseURL, Logger: logger, Keep: *keep}
	var results []bench.Result
	for _, s := range scenarios {
		var rs []bench.Result
		switch s {
		case "outbox":
			rs, err = bench.Outbox(ctx, env, bench.OutboxOptions{Writers: *writers, Duration: *duration})
		case "expire":
			rs, err = bench.Expire(ctx, env, bench.ExpireOptions{Leases: *leases, Clients: *clients, Pipeline: pipe})
		case "lag":
			for _, rate := range lagRates {
				var r []bench.Result
				if r, err = bench.Lag(ctx, env, bench.LagOptions{ExpiriesPerSec: rate, Duration: *lagDuration, Pipeline: pipe,
					Kinds: strings.Split(strings.ReplaceAll(*lagKinds, " ", ""), ",")}); err != nil {
					break
				}
				rs = append(rs, r...)
			}
		case "idle":
			rs, err = bench.Idle(ctx, env, bench.IdleOptions{Duration: *idleDuration, InProcess: *idleInProcess, Pipeline: pipe})
		case "stream":
			rs, err = bench.Stream(ctx, env, bench.StreamOptions{EventsPerSec: *eventsPerSec, Duration: *streamDuration,
				CatchUp: *catchUp, WakeInterval: *wakeInterval})
		case "lifecycle":
			rs, err = bench.Lifecycle(ctx, env, bench.LifecycleOptions{Executions: *lcExecs, Workers: lcWorkerCounts, ClaimsInFlight: *lcClaims})
		case "scale":
			rs, err = bench.Scale(ctx, env, bench.ScaleOptions{Executions: *scaleExecs, Events: *scaleEvents, Workers: *scaleWorkers})
		case "retention":
			rs, err = bench.Retention(ctx, env, bench.RetentionOptions{Events: *retEvents})
		case "soak":
			rs, err = runSoak(ctx, env, machine, *soakPlot, bench.SoakOptions{Duration: *soakDuration, Rate: *soakRate,
				Retention: *soakRetention, Sample: *soakSample, Vacuum: *soakVacuum})
		case "tune":
			rs, err = bench.Tune(ctx, env, bench.TuneOptions{Leases: *tuneLeases, Lanes: tuneLaneCounts, ApplyWorkers: tuneApplyCounts, Rounds: *tuneRounds})
		case "scaleout":
			rs, err = bench.ScaleOut(ctx, env, bench.ScaleOutOptions{Leases: *leases, MemLeases: *memLeases, NoMemory: *memLeases == 0})
		}
		if err != nil {
			return cli.Report(os.Stderr, fs.Name(), fmt.Errorf("scenario %s: %w", s, err))
		}
		results = append(results, rs...)
	}
	if *lcPlot != "" && slices.Contains(scenarios, "lifecycle") {
		if err := writePlot(*lcPlot, machine, results); err != nil {
			return cli.Report(os.Stderr, fs.Name(), err)
		}
	}
	if *format == "json" {
		err = bench.WriteJSON(benchStdout, machine, results)
	} else {
		err = bench.WriteTable(benchStdout, machine, results)
	}
	return cli.Report(os.Stderr, fs.Name(), err)
}

// writePlot draws the lifecycle figures of results into an SVG file.
func writePlot(path, machine string, results []bench.Result) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--lifecycle-plot: %w", err)
	}
	err = bench.WriteSVG(f, "Claim → complete of executions beside River's no-op jobs", machine, "workers", "executions or jobs per second",
		bench.LifecycleSeries(results))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// runSoak runs the soak scenario, drawing its plot into the file at path
// when one is given.
func runSoak(ctx context.Context, env *bench.Env, machine, path string, o bench.SoakOptions) ([]bench.Result, error) {
	if path == "" {
		return bench.Soak(ctx, env, o)
	}
	// Created before the run, so that a path that cannot be written fails
	// now rather than after half an hour.
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--soak-plot: %w", err)
	}
	o.Plot, o.PlotSubtitle = f, machine
	rs, err := bench.Soak(ctx, env, o)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("--soak-plot: %w", cerr)
	}
	if err != nil {
		_ = os.Remove(path) // no empty or partial plot
	}
	return rs, err
}

// joinInts writes counts comma-separated, as parseCounts reads them.
func joinInts(counts []int) string {
	s := make([]string, len(counts))
	for i, n := range counts {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

// parseCounts reads comma-separated counts in 1..most of the flag name.
func parseCounts(name, list string, most int) ([]int, error) {
	var counts []int
	for _, r := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(r))
		if err != nil || n < 1 || n > most {
			return nil, cli.Usagef("--%s %q: want counts in 1..%d, comma-separated", name, list, most)
		}
		counts = append(counts, n)
	}
	return counts, nil
}
