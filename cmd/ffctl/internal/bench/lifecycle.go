package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ffriver/ffriver"
	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/runner"
	"github.com/jackc/pgx/v5/pgxpool"
)

// LifecycleOptions size the lifecycle scenario.
type LifecycleOptions struct {
	// Executions created, then claimed and completed, per run (default 20,000).
	Executions int
	// Workers: one run per count (default 8, 16, 32, 64, 128).
	Workers []int
	// MaxConns of each side's pool (default 64): the worker counts above it
	// share its connections, for ffriver and River alike.
	MaxConns int
	// ClaimsInFlight of the runner (runner.Config; 0: the machine's).
	ClaimsInFlight int
}

// lifecycleLane is the lane every execution of the scenario waits in.
const lifecycleLane = "bench-lifecycle"

// Lifecycle measures the path every application takes through the store:
// N executions created up front, then W goroutines each loop Claim (Max 1)
// → Complete until none is left; beside River working as many no-op jobs
// with W workers, in the same run, on a pool of the same size. Targets
// (issue 26): the plain API ≥ 0.3 of River's jobs/s at 64 workers.
func Lifecycle(ctx context.Context, env *Env, o LifecycleOptions) ([]Result, error) {
	if o.Executions == 0 {
		o.Executions = 20_000
	}
	if len(o.Workers) == 0 {
		o.Workers = []int{8, 16, 32, 64, 128}
	}
	if o.MaxConns == 0 {
		o.MaxConns = 64
	}
	var results []Result
	for _, w := range o.Workers {
		conns := min(w+2, o.MaxConns)
		run, err := lifecycleRunner(ctx, env, o.Executions, w, min(o.ClaimsInFlight, w), int32(conns))
		if err != nil {
			return nil, err
		}
		plain, err := lifecyclePlain(ctx, env, o.Executions, w, int32(conns))
		if err != nil {
			return nil, err
		}
		floor, err := lifecycleRiver(ctx, env, o.Executions, w, int32(conns))
		if err != nil {
			return nil, err
		}
		baseline := fmt.Sprintf("River no-op jobs, %d workers", w)
		rr := Result{Scenario: "lifecycle", Figure: fmt.Sprintf("runner, %d workers", w),
			Value: run, Unit: "execs/s", Baseline: baseline, BaselineValue: floor, Ratio: ratioF(run, floor)}
		pr := Result{Scenario: "lifecycle", Figure: fmt.Sprintf("plain API claim → complete, %d workers", w),
			Value: plain, Unit: "execs/s", Baseline: baseline, BaselineValue: floor, Ratio: ratioF(plain, floor)}
		if w == 64 {
			rr.Target, rr.Met = "≥ 0.50", met(rr.Ratio >= 0.50)
			pr.Target, pr.Met = "≥ 0.30", met(pr.Ratio >= 0.30)
		}
		results = append(results, rr, pr)
		env.Logger.InfoContext(ctx, "bench lifecycle", "workers", w, "runner_per_sec", int(run), "plain_per_sec", int(plain), "river_per_sec", int(floor))
	}
	return results, nil
}

// lifecycleRiver is River's side of one run: the floor with workerCount workers
// on a pool of conns connections, in a scratch schema of its own.
func lifecycleRiver(ctx context.Context, env *Env, n, workerCount int, conns int32) (float64, error) {
	pool, schema, cleanup, err := env.scratch(ctx, "lifecycle_river", conns)
	if err != nil {
		return 0, err
	}
	defer cleanup()
	return riverFloor(ctx, pool, schema, n, workerCount, ffriver.QueueFetchCooldown)
}

// lifecyclePlain is the plain API's side of one run.
func lifecyclePlain(ctx context.Context, env *Env, n, workers int, conns int32) (float64, error) {
	_, st, cleanup, err := lifecycleStore(ctx, env, "lifecycle", n, conns)
	if err != nil {
		return 0, err
	}
	defer cleanup()
	return claimComplete(ctx, st, n, workers)
}

// claimComplete is the plain API's loop: workers goroutines claim (Max 1)
// and complete the executions of the scenario's lane until none is left;
// it returns the executions per second, and fails unless exactly n were.
func claimComplete(ctx context.Context, st *executions.Store, n, workers int) (float64, error) {
	var done atomic.Int64
	start := time.Now()
	err := eachWorker(ctx, workers, func(ctx context.Context, w int) error {
		p := executions.ClaimParams{Lane: lifecycleLane, WorkerID: "bench", WorkerInstanceID: fmt.Sprintf("bench-%d", w),
			LeaseTTL: 5 * time.Minute, Max: 1}
		for {
			ls, err := st.Claim(ctx, p)
			if err != nil {
				return err
			}
			if len(ls) == 0 {
				return nil
			}
			for _, l := range ls {
				if err := st.Complete(ctx, l, nil); err != nil {
					return err
				}
				done.Add(1)
			}
		}
	})
	elapsed := time.Since(start)
	if err != nil {
		return 0, err
	}
	if got := done.Load(); got != int64(n) {
		return 0, fmt.Errorf("bench: lifecycle completed %d of %d executions", got, n)
	}
	return float64(n) / elapsed.Seconds(), nil
}

// lifecycleRunner is the runner's side of one run: a runner.Runner with
// MaxWorkers w and a no-op handler.
func lifecycleRunner(ctx context.Context, env *Env, n, w, claims int, conns int32) (float64, error) {
	pool, st, cleanup, err := lifecycleStore(ctx, env, "lifecycle_runner", n, conns)
	if err != nil {
		return 0, err
	}
	defer cleanup()
	return runLane(ctx, env, pool, st, n, w, claims)
}

// runLane is the runner's loop: a runner.Runner with MaxWorkers w (and
// ClaimsInFlight claims; 0: the machine's) and a no-op handler works the n
// executions waiting in the scenario's lane; it returns the executions per
// second once the last completion committed.
func runLane(ctx context.Context, env *Env, pool *pgxpool.Pool, st *executions.Store, n, w, claims int) (float64, error) {
	var done atomic.Int64
	all := make(chan struct{})
	r, err := runner.New(st, runner.Config{Lane: lifecycleLane, WorkerID: "bench", MaxWorkers: w, ClaimsInFlight: claims, LeaseTTL: 5 * time.Minute,
		FetchCooldown: ffriver.QueueFetchCooldown, Logger: env.Logger},
		func(context.Context, *runner.Execution) ([]byte, error) {
			if done.Add(1) == int64(n) {
				close(all)
			}
			return nil, nil
		})
	if err != nil {
		return 0, err
	}
	start := time.Now()
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	ran := make(chan error, 1)
	go func() { ran <- r.Run(runCtx) }()
	select {
	case <-all:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	// The last handler returned; the run ends when its completion commits.
	var left int
	for {
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM ff_exec_core WHERE lane_id = $1 AND lifecycle_phase <> 'terminal'`, lifecycleLane).Scan(&left); err != nil {
			return 0, err
		}
		if left == 0 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(start)
	stop()
	if err := <-ran; err != nil {
		return 0, err
	}
	return float64(n) / elapsed.Seconds(), nil
}

// lifecycleStore makes a scratch schema named after name with a pool of
// conns connections, opens a store on it and creates n executions.
func lifecycleStore(ctx context.Context, env *Env, name string, n int, conns int32) (*pgxpool.Pool, *executions.Store, func(), error) {
	pool, schema, cleanup, err := env.scratch(ctx, name, conns)
	if err != nil {
		return nil, nil, nil, err
	}
	st, err := executions.Open(ctx, pool, executions.Config{Schema: schema})
	if err == nil {
		err = createExecutions(ctx, pool, st, n)
	}
	if err != nil {
		cleanup()
		return nil, nil, nil, err
	}
	return pool, st, cleanup, nil
}

// createExecutions creates n executions in the scenario's lane, 16 at a
// time, and analyzes the table so the claim's plan is the one a store of
// that size gets.
func createExecutions(ctx context.Context, pool *pgxpool.Pool, st *executions.Store, n int) error {
	var next atomic.Int64
	err := eachWorker(ctx, 16, func(ctx context.Context, _ int) error {
		for next.Add(1) <= int64(n) {
			if _, err := st.Create(ctx, executions.CreateParams{Lane: lifecycleLane}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	_, err = pool.Exec(ctx, `ANALYZE ff_exec_core; ANALYZE ff_attempt`)
	return err
}

// eachWorker runs fn on n goroutines and returns the first error; the
// first error cancels the others.
func eachWorker(ctx context.Context, n int, fn func(ctx context.Context, worker int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for w := range n {
		wg.Go(func() {
			if errs[w] = fn(ctx, w); errs[w] != nil {
				cancel()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
