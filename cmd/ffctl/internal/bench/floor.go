package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

// The floor of a design with one River job per execution: River itself
// working no-op jobs, completed by its batch completer, on the same machine
// and database in the same run. Measured once with the pipeline's apply
// worker count and once with 64 workers, so the expire figure reads as a
// share of what River alone reaches.

// noopArgs is the floor's job: it does nothing.
type noopArgs struct {
	N int `json:"n"`
}

func (noopArgs) Kind() string { return "ffbench.noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
}

func (noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

// riverFloor inserts n no-op jobs into River's tables of schema, then starts
// one client with workers workers and River's default fetch settings but
// ffriver's fetch cooldown, and returns the jobs completed per second, from
// the start of the client to the last completion.
func riverFloor(ctx context.Context, pool *pgxpool.Pool, schema string, n, workers int, fetchCooldown time.Duration) (float64, error) {
	if _, err := pool.Exec(ctx, `DELETE FROM river_job WHERE kind = $1`, noopArgs{}.Kind()); err != nil {
		return 0, err
	}
	ws := river.NewWorkers()
	river.AddWorker(ws, noopWorker{})
	const queue = "ffbench_noop"
	cfg := &river.Config{Schema: schema, Workers: ws, Queues: map[string]river.QueueConfig{queue: {MaxWorkers: workers}},
		FetchCooldown: fetchCooldown, Logger: slog.New(slog.DiscardHandler)}
	client, err := river.NewClient(riverpgxv5.New(pool), cfg)
	if err != nil {
		return 0, fmt.Errorf("bench: River floor client: %w", err)
	}
	params := make([]river.InsertManyParams, 0, n)
	for i := range n {
		params = append(params, river.InsertManyParams{Args: noopArgs{N: i}, InsertOpts: &river.InsertOpts{Queue: queue}})
	}
	for len(params) > 0 {
		k := min(len(params), 5000)
		if _, err := client.InsertManyFast(ctx, params[:k]); err != nil {
			return 0, fmt.Errorf("bench: inserting the floor's jobs: %w", err)
		}
		params = params[k:]
	}
	if _, err := pool.Exec(ctx, `ANALYZE river_job`); err != nil {
		return 0, err
	}
	var start time.Time // by the database's clock, as finalized_at
	if err := pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&start); err != nil {
		return 0, err
	}
	if err := client.Start(ctx); err != nil {
		return 0, err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = client.Stop(stopCtx)
	}()
	deadline := time.Now().Add(10*time.Minute + time.Duration(n)*time.Millisecond)
	for {
		var left bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM river_job WHERE kind = $1 AND state <> 'completed')`,
			noopArgs{}.Kind()).Scan(&left); err != nil {
			return 0, err
		}
		if !left {
			break
		}
		if time.Now().After(deadline) {
			return 0, errors.New("bench: River did not work the no-op jobs in time")
		}
		time.Sleep(10 * time.Millisecond)
	}
	var last time.Time
	if err := pool.QueryRow(ctx, `SELECT max(finalized_at) FROM river_job WHERE kind = $1`, noopArgs{}.Kind()).Scan(&last); err != nil {
		return 0, err
	}
	_, _ = pool.Exec(ctx, `DELETE FROM river_job WHERE kind = $1`, noopArgs{}.Kind())
	return float64(n) / last.Sub(start).Seconds(), nil
}
