package bench

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/scanners"
)

// ScaleOutOptions size the scaleout scenario.
type ScaleOutOptions struct {
	// Leases drained per worker count (default 20,000).
	Leases int
	// Workers are the ffworker process counts to run (default 1, 2, 4).
	Workers []int
	// MemLeases is the drain after which the single ffworker's peak RSS is
	// read again (default 100,000; 0 with NoMemory).
	MemLeases int
	// NoMemory skips the memory figure.
	NoMemory bool
}

// ScaleOut runs the real binaries, one ffscheduler and N ffworkers with
// their default flags, on a scratch schema per N, and drains Leases
// expired leases (as the expire scenario's pipeline drain, after a warm-up)
// with each N; the figure is compared with one worker's. On the single
// worker it then drains MemLeases more and compares the worker's peak RSS
// (VmHWM) after that with its peak after the first drain: a worker's
// memory must not grow with the backlog it works through.
func ScaleOut(ctx context.Context, env *Env, o ScaleOutOptions) ([]Result, error) {
	if o.Leases == 0 {
		o.Leases = 20_000
	}
	if len(o.Workers) == 0 {
		o.Workers = []int{1, 2, 4}
	}
	if o.MemLeases == 0 && !o.NoMemory {
		o.MemLeases = 100_000
	}
	if o.Leases < 0 || o.MemLeases < 0 {
		return nil, ff.Validationf("scaleout bench", "sizes must be positive")
	}
	for _, n := range o.Workers {
		if n < 1 || n > 16 {
			return nil, ff.Validationf("scaleout bench", "worker count %d is outside 1..16", n)
		}
	}
	dir, err := buildBinaries(ctx, env)
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }()

	var results []Result
	var one float64
	for _, n := range o.Workers {
		r, mem, err := scaleOutRun(ctx, env, dir, n, o)
		if err != nil {
			return nil, fmt.Errorf("scaleout bench (%d ffworkers): %w", n, err)
		}
		res := Result{Scenario: "scaleout", Figure: fmt.Sprintf("%d leases drained by ffscheduler + %d ffworker processes (binaries, defaults)", o.Leases, n),
			Value: r.rate, Unit: "leases/s",
			Note: fmt.Sprintf("%d leases, all expiring at one instant, after a warm-up drain of %d (%s); the next attempt_timeout tick started %.0f ms after the expiry; the figure is leases / (last expired event committed − start of that tick) = %.2f s.",
				r.leases, r.warmup, r.cfg, float64(r.tickWait)/1e6, r.drain.Seconds())}
		if n == 1 {
			one = r.rate
		} else if one > 0 {
			res.Baseline, res.BaselineValue, res.Ratio = "one ffworker", one, r.rate/one
			res.Target, res.Met = "no drop (≥ 0.90)", met(r.rate/one >= 0.9)
		}
		results = append(results, res)
		if mem != nil {
			results = append(results, *mem)
		}
	}
	return results, nil
}

// scaleOutRun is one worker count's run; with one worker (and a memory
// drain asked for) it also returns the memory figure.
func scaleOutRun(ctx context.Context, env *Env, dir string, workers int, o ScaleOutOptions) (pipelineDrain, *Result, error) {
	pool, schema, cleanup, err := env.scratch(ctx, fmt.Sprintf("scale%d", workers), 4)
	if err != nil {
		return pipelineDrain{}, nil, err
	}
	defer cleanup()
	ps, err := startProcs(env, dir, schema, workers)
	if err != nil {
		return pipelineDrain{}, nil, err
	}
	defer ps.stop()
	if err := awaitTick(ctx, pool, scanners.AttemptTimeout, 60*time.Second); err != nil {
		return pipelineDrain{}, nil, err
	}
	warm := min(max(o.Leases/10, 1), 2000)
	if _, err := drainOnce(ctx, env, pool, warm); err != nil {
		return pipelineDrain{}, nil, fmt.Errorf("warm-up: %w", err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE river_job; ANALYZE ff_exec_core; ANALYZE ff_attempt; ANALYZE ff_lease_event; ANALYZE ff_completion_event`); err != nil {
		return pipelineDrain{}, nil, err
	}
	env.Logger.InfoContext(ctx, "bench scaleout: draining", "ffworkers", workers, "leases", o.Leases)
	d, err := drainOnce(ctx, env, pool, o.Leases)
	if err != nil {
		return pipelineDrain{}, nil, err
	}
	d.leases, d.warmup, d.cfg = o.Leases, warm, fmt.Sprintf("ffscheduler + %d ffworker binaries, default flags", workers)
	if workers != 1 || o.NoMemory || o.MemLeases == 0 {
		return d, nil, nil
	}
	before, err := ps.peakRSS(1)
	if err != nil {
		return d, nil, err
	}
	env.Logger.InfoContext(ctx, "bench scaleout: memory drain", "leases", o.MemLeases)
	if _, err := drainOnce(ctx, env, pool, o.MemLeases); err != nil {
		return d, nil, fmt.Errorf("memory drain: %w", err)
	}
	after, err := ps.peakRSS(1)
	if err != nil {
		return d, nil, err
	}
	mib := func(b int64) float64 { return float64(b) / (1 << 20) }
	mem := &Result{Scenario: "scaleout", Figure: fmt.Sprintf("ffworker peak RSS after a %d-lease drain", o.MemLeases), Value: mib(after), Unit: "MiB",
		Baseline: fmt.Sprintf("its peak after the %d-lease drain", o.Leases), BaselineValue: mib(before), Ratio: float64(after) / float64(before),
		Target: "flat (≤ 1.5×)", Met: met(float64(after) <= 1.5*float64(before)),
		Note: strings.TrimSpace(fmt.Sprintf("VmHWM of the ffworker process (%s) read after each drain; the %d leases all expired at one instant, so the whole backlog was due at once.",
			"default flags", o.MemLeases))}
	return d, mem, nil
}
