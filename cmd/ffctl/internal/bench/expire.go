package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ffriver/ffriver"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/apply"
	"github.com/ffriver/ffriver/jobs"
	"github.com/ffriver/ffriver/scanners"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ExpireOptions size the expire scenario.
type ExpireOptions struct {
	Leases  int // expired leases to drain (default 20,000)
	Clients int // clients of the raw ceiling (default 32)
	// Pipeline sizes the River pipeline's processes (default: the
	// binaries' defaults).
	Pipeline PipelineOptions
	// NoPipeline skips the pipeline's figure (only the two baselines run).
	NoPipeline bool
}

// seedExpired inserts n active executions, spread over 256 partitions, whose
// leases expired a second ago. Half have a retry left, half go terminal.
func seedExpired(ctx context.Context, pool *pgxpool.Pool, n int) error {
	return seedLeases(ctx, pool, n, time.Now().UnixMilli()-1000, 0)
}

// seedLeases inserts n active executions with one leased attempt each,
// spread round-robin over 256 partitions; lease i (0-based) expires at
// firstMs + i*spanMs/n. Half have a retry left, half go terminal when their
// lease expires. The tables are analyzed afterwards.
func seedLeases(ctx context.Context, pool *pgxpool.Pool, n int, firstMs, spanMs int64) error {
	now := time.Now().UnixMilli()
	_, err := pool.Exec(ctx, `
		WITH ids AS (
		  SELECT i, (i % 256)::smallint AS p, gen_random_uuid() AS id,
		         $3::bigint + ((i - 1)::bigint * $4::bigint) / $1::bigint AS exp
		  FROM generate_series(1, $1) i
		), core AS (
		  INSERT INTO ff_exec_core (partition_key, execution_id, lane_id, lifecycle_phase, ownership_state,
		    eligibility_state, public_state, attempt_state, policy, raw_fields, started_at_ms)
		  SELECT p, id, 'bench', 'active', 'leased', 'not_applicable', 'active', 'running_attempt',
		         jsonb_build_object('retry_policy', jsonb_build_object('max_retries', i % 2)),
		         '{"namespace":"bench","tags":{"cairn.instance_id":"b-1"}}', $2::bigint - 60000
		  FROM ids RETURNING partition_key, execution_id)
		INSERT INTO ff_attempt (partition_key, execution_id, attempt_index, worker_id, worker_instance_id,
		  lease_id, lease_epoch, lease_expires_at_ms, started_at_ms)
		SELECT core.partition_key, core.execution_id, 0, 'bench', 'bench-1', gen_random_uuid(), 1, ids.exp, $2::bigint - 60000
		FROM core JOIN ids ON ids.id = core.execution_id`,
		n, now, firstMs, spanMs)
	if err != nil {
		return fmt.Errorf("bench: seeding leases: %w", err)
	}
	_, err = pool.Exec(ctx, `ANALYZE ff_exec_core; ANALYZE ff_attempt`)
	return err
}

// resetExpire empties the tables the expire scenario fills. The pipeline
// may still be running (the lag scenario resets between kinds): TRUNCATE
// takes its tables' locks one after the other, so a transaction of the
// pipeline that read a later table first and then waits for an earlier
// one deadlocks with it. Postgres then aborts one of the two; when it is
// the TRUNCATE, it is tried again.
func resetExpire(ctx context.Context, pool *pgxpool.Pool) error {
	for try := 1; ; try++ {
		_, err := pool.Exec(ctx, `TRUNCATE ff_exec_core, ff_attempt, ff_lease_event, ff_completion_event`)
		var pgErr *pgconn.PgError
		if err == nil || try == 5 || !errors.As(err, &pgErr) || pgErr.Code != "40P01" {
			return err
		}
	}
}

// countExpiredEvents returns how many lease "expired" events exist.
func countExpiredEvents(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	var n int
	err := pool.QueryRow(ctx, `SELECT count(*) FROM ff_lease_event WHERE event_type = 'expired'`).Scan(&n)
	return n, err
}

// Expire drains Leases expired leases three ways: a sequential loop that
// scans each partition and expires one row per transaction, statement by
// statement, the way the upstream attempt_timeout reconciler does; the raw
// ceiling of pipelined UPDATE + INSERT transactions at Clients clients; and
// ffriver's River pipeline (see expirePipeline). Targets: pipeline ≥ 3× the
// loop and ≥ 50 % of the ceiling.
func Expire(ctx context.Context, env *Env, o ExpireOptions) ([]Result, error) {
	if o.Leases == 0 {
		o.Leases = 20_000
	}
	if o.Clients == 0 {
		o.Clients = 32
	}
	if o.Leases < 0 || o.Clients < 0 {
		return nil, ff.Validationf("expire bench", "sizes must be positive")
	}
	pool, schema, cleanup, err := env.scratch(ctx, "expire", int32(o.Clients+8))
	if err != nil {
		return nil, err
	}
	defer cleanup()

	run := func(name string, fn func() error) (float64, error) {
		if err := resetExpire(ctx, pool); err != nil {
			return 0, err
		}
		if err := seedExpired(ctx, pool, o.Leases); err != nil {
			return 0, err
		}
		env.Logger.InfoContext(ctx, "bench expire: draining", "way", name, "leases", o.Leases)
		start := time.Now()
		if err := fn(); err != nil {
			return 0, fmt.Errorf("expire bench (%s): %w", name, err)
		}
		elapsed := time.Since(start)
		if err := checkExpired(ctx, pool, o.Leases); err != nil {
			return 0, fmt.Errorf("expire bench (%s): %w", name, err)
		}
		return float64(o.Leases) / elapsed.Seconds(), nil
	}

	loop, err := run("sequential loop", func() error { return seedLikeLoop(ctx, pool) })
	if err != nil {
		return nil, err
	}
	ceiling, err := run("raw pipelined", func() error { return rawPipelined(ctx, pool, o.Clients) })
	if err != nil {
		return nil, err
	}
	results := []Result{
		{Scenario: "expire", Figure: "sequential per-row loop (upstream shape)", Value: loop, Unit: "leases/s"},
		{Scenario: "expire", Figure: fmt.Sprintf("raw pipelined UPDATE+INSERT, %d clients", o.Clients), Value: ceiling, Unit: "leases/s"},
	}
	if o.NoPipeline {
		return results, nil
	}
	if err := resetExpire(ctx, pool); err != nil {
		return nil, err
	}
	env.Logger.InfoContext(ctx, "bench expire: draining", "way", "river pipeline", "leases", o.Leases)
	pr, err := expirePipeline(ctx, env, pool, schema, o)
	if err != nil {
		return nil, fmt.Errorf("expire bench (river pipeline): %w", err)
	}
	pipe := pr.rate
	applyWorkers := cmp.Or(o.Pipeline.ApplyWorkers, ffriver.DefaultApplyWorkers())
	env.Logger.InfoContext(ctx, "bench expire: River's no-op floor", "jobs", o.Leases, "workers", applyWorkers)
	floorSame, err := riverFloor(ctx, pool, schema, o.Leases, applyWorkers, ffriver.QueueFetchCooldown)
	if err != nil {
		return nil, err
	}
	floor64 := floorSame
	if applyWorkers != 64 {
		if floor64, err = riverFloor(ctx, pool, schema, o.Leases, 64, ffriver.QueueFetchCooldown); err != nil {
			return nil, err
		}
	}
	if applyWorkers != 64 {
		results = append(results,
			Result{Scenario: "expire", Figure: fmt.Sprintf("River alone: %d no-op jobs, %d workers, batch completer", o.Leases, applyWorkers), Value: floorSame, Unit: "jobs/s"})
	}
	results = append(results,
		Result{Scenario: "expire", Figure: fmt.Sprintf("River alone: %d no-op jobs, 64 workers, batch completer", o.Leases), Value: floor64, Unit: "jobs/s"},
		Result{Scenario: "expire", Figure: "ffriver River pipeline", Value: pipe, Unit: "leases/s",
			Baseline: "River alone, 64 workers", BaselineValue: floor64, Ratio: pipe / floor64, Target: "≥ 0.50", Met: met(pipe/floor64 >= 0.5)},
	)
	if applyWorkers != 64 {
		results = append(results, Result{Scenario: "expire", Figure: "ffriver River pipeline", Value: pipe, Unit: "leases/s",
			Baseline: fmt.Sprintf("River alone, %d workers", applyWorkers), BaselineValue: floorSame, Ratio: pipe / floorSame})
	}
	results = append(results,
		Result{Scenario: "expire", Figure: "ffriver River pipeline", Value: pipe, Unit: "leases/s",
			Baseline: "sequential loop", BaselineValue: loop, Ratio: pipe / loop, Target: "≥ 3", Met: met(pipe/loop >= 3),
			Note: pr.note()},
		Result{Scenario: "expire", Figure: "ffriver River pipeline", Value: pipe, Unit: "leases/s",
			Baseline: "raw pipelined ceiling", BaselineValue: ceiling, Ratio: pipe / ceiling, Target: "≥ 0.50", Met: met(pipe/ceiling >= 0.5)},
	)
	return results, nil
}

// checkExpired checks that exactly n lease "expired" events exist.
func checkExpired(ctx context.Context, pool *pgxpool.Pool, n int) error {
	got, err := countExpiredEvents(ctx, pool)
	if err != nil {
		return err
	}
	if got != n {
		return fmt.Errorf("%d expired events for %d leases", got, n)
	}
	return nil
}

// pipelineDrain is the outcome of one pipeline drain.
type pipelineDrain struct {
	leases int
	// seeded is how many leases drainOnce seeded (more than leases when
	// seeding overran its lead and was run again).
	seeded                int
	warmup                int
	rate                  float64       // leases / (last commit - start of the first tick that found them)
	tickWait              time.Duration // from the leases' expiry to the start of that tick
	drain                 time.Duration // from the start of that tick to the last commit
	items                 int           // ff.expire_attempt jobs completed
	scans                 int           // ff.scan jobs of attempt_timeout completed
	dups                  int           // item jobs the scans found already in flight
	cfg                   string
	groupSize, groupLanes int
}

func (d pipelineDrain) note() string {
	return fmt.Sprintf("%d leases, all expiring at one instant while the pipeline runs (%s), after a warm-up drain of %d; the next attempt_timeout tick started %.0f ms after the expiry; "+
		"the figure is leases / (last expired event committed − start of that tick) = %.2f s; counting the wait for the tick too: %.0f leases/s. "+
		"%d scan jobs, %d item jobs (applied in group transactions of up to %d per kind, %d lanes: lock + recheck, transition, outbox rows; completed by River's batch completer), %d item inserts skipped as already in flight.",
		d.leases, d.cfg, d.warmup, float64(d.tickWait)/1e6, d.drain.Seconds(), float64(d.leases)/(d.tickWait+d.drain).Seconds(), d.scans, d.items, d.groupSize, d.groupLanes, d.dups)
}

// expirePipeline measures ffriver's pipeline: the scheduler and the worker
// run in this process, configured as the binaries configure them (every
// built-in scanner at its defaults: attempt_timeout ticks every second with
// batches of 1,000; the others find nothing to do). Once the pipeline is
// warm (its leader has worked a first tick, then a warm-up drain of a tenth
// of the leases, after which the tables are analyzed as autovacuum would
// have on a running deployment), Leases leases are seeded to expire all at
// one instant a little later. The figure is measured from the start of the
// first attempt_timeout tick that found them to the moment the last
// "expired" event is committed (the moment no seeded attempt holds a lease
// any more: the attempt's update and its events commit together); the wait
// from the expiry to that tick (at most one interval) is reported beside it.
func expirePipeline(ctx context.Context, env *Env, pool *pgxpool.Pool, schema string, o ExpireOptions) (pipelineDrain, error) {
	p, err := startPipeline(ctx, env, schema, o.Pipeline)
	if err != nil {
		return pipelineDrain{}, err
	}
	defer p.stop()
	if err := awaitTick(ctx, pool, scanners.AttemptTimeout, 30*time.Second); err != nil {
		return pipelineDrain{}, err
	}
	warm := min(max(o.Leases/10, 1), 2000)
	w, err := drainOnce(ctx, env, pool, warm)
	if err != nil {
		return pipelineDrain{}, fmt.Errorf("warm-up: %w", err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE river_job; ANALYZE ff_exec_core; ANALYZE ff_attempt; ANALYZE ff_lease_event; ANALYZE ff_completion_event`); err != nil {
		return pipelineDrain{}, err
	}
	before, err := pipelineCounts(ctx, pool)
	if err != nil {
		return pipelineDrain{}, err
	}
	d, err := drainOnce(ctx, env, pool, o.Leases)
	if err != nil {
		return pipelineDrain{}, err
	}
	if err := checkExpired(ctx, pool, w.seeded+d.seeded); err != nil {
		return pipelineDrain{}, err
	}
	after, err := pipelineCounts(ctx, pool)
	if err != nil {
		return pipelineDrain{}, err
	}
	d.warmup = warm
	d.items, d.scans, d.dups = after[0]-before[0], after[1]-before[1], after[2]-before[2]
	d.cfg = p.describe()
	d.groupSize, d.groupLanes = cmp.Or(o.Pipeline.GroupSize, apply.DefaultGroupSize), p.work.ff.GroupLanes()
	return d, nil
}

// pipelineCounts returns the completed item jobs, attempt_timeout scans
// and the item inserts those scans skipped as duplicates.
func pipelineCounts(ctx context.Context, pool *pgxpool.Pool) ([3]int, error) {
	var c [3]int
	err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE kind = $1),
		count(*) FILTER (WHERE kind = $2 AND args->>'scanner' = $3),
		COALESCE(sum((metadata->'output'->>'items_in_flight')::int) FILTER (WHERE kind = $2 AND args->>'scanner' = $3), 0)
		FROM river_job WHERE state = 'completed'`, jobs.KindExpireAttempt, jobs.KindScan, scanners.AttemptTimeout).Scan(&c[0], &c[1], &c[2])
	return c, err
}

// drainOnce seeds n leases expiring all at once a moment later and waits
// until the running pipeline has expired them all. The moment is far
// enough ahead that seeding is done first: when seeding took longer (a
// large store's indexes read from disk), the pipeline drained leases still
// being seeded, which measures the seeding, so those are left to drain and
// n more are seeded with twice the lead, up to three times in all
// (pipelineDrain.seeded says how many were).
func drainOnce(ctx context.Context, env *Env, pool *pgxpool.Pool, n int) (pipelineDrain, error) {
	lead := time.Second + time.Duration(n/20)*time.Millisecond
	seeded := 0
	for try := 1; ; try++ {
		d, overran, err := drainWithLead(ctx, pool, n, lead)
		seeded += n
		d.seeded = seeded
		if err != nil || !overran {
			return d, err
		}
		if try == 3 {
			env.Logger.WarnContext(ctx, "bench expire: seeding took longer than the lead three times; the figure includes seeding", "lead", lead)
			return d, nil
		}
		env.Logger.WarnContext(ctx, "bench expire: seeding took longer than the lead; the leases expired before it ended: seeding again with twice the lead", "lead", lead)
		lead *= 2
	}
}

// drainWithLead seeds n leases expiring lead from now and waits until the
// running pipeline has expired them all; overran says seeding ended after
// they expired.
func drainWithLead(ctx context.Context, pool *pgxpool.Pool, n int, lead time.Duration) (_ pipelineDrain, overran bool, _ error) {
	var seeded time.Time
	if err := pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&seeded); err != nil {
		return pipelineDrain{}, false, err
	}
	expiry := time.Now().Add(lead).UnixMilli()
	if err := seedLeases(ctx, pool, n, expiry, 0); err != nil {
		return pipelineDrain{}, false, err
	}
	overran = time.Now().UnixMilli() >= expiry
	deadline := time.Now().Add(10*time.Minute + time.Duration(n)*time.Millisecond)
	// Poll cheaply (the lease-due index) until no seeded lease is left
	// (leases of a store's own live executions expire later).
	for {
		var left bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM ff_attempt WHERE lease_expires_at_ms IS NOT NULL
			AND lease_expires_at_ms <= $1 ORDER BY lease_expires_at_ms LIMIT 1)`, expiry).Scan(&left); err != nil {
			return pipelineDrain{}, overran, err
		}
		if !left {
			break
		}
		if time.Now().After(deadline) {
			return pipelineDrain{}, overran, errors.New("the pipeline did not drain the leases in time")
		}
		time.Sleep(20 * time.Millisecond)
	}
	end := time.Now()
	var sinceTick *float64
	if err := pool.QueryRow(ctx, `
		SELECT extract(epoch FROM clock_timestamp() - min(attempted_at)) FROM river_job
		WHERE kind = $1 AND args->>'scanner' = $2 AND (metadata->'output'->>'due_items')::bigint > 0 AND attempted_at >= $3`,
		jobs.KindTick, scanners.AttemptTimeout, seeded).Scan(&sinceTick); err != nil {
		return pipelineDrain{}, overran, err
	}
	if sinceTick == nil {
		return pipelineDrain{}, overran, errors.New("no attempt_timeout tick found the leases")
	}
	d := pipelineDrain{leases: n, drain: time.Duration(*sinceTick*float64(time.Second)) - time.Since(end)}
	d.tickWait = end.Sub(time.UnixMilli(expiry)) - d.drain
	d.rate = float64(n) / d.drain.Seconds()
	return d, overran, nil
}

// seedLikeLoop is the upstream reconciler's shape: per partition, select up
// to 1,000 candidates, then per candidate one transaction of separate
// statements (lock attempt, lock execution, update both, maybe a completion
// event, a lease event).
func seedLikeLoop(ctx context.Context, pool *pgxpool.Pool) error {
	for {
		did := 0
		for p := range 256 {
			now := time.Now().UnixMilli()
			rows, err := pool.Query(ctx, `
				SELECT a.execution_id, a.attempt_index FROM ff_attempt a
				JOIN ff_exec_core c ON c.partition_key = a.partition_key AND c.execution_id = a.execution_id
				WHERE a.partition_key = $1 AND a.lease_expires_at_ms IS NOT NULL AND a.lease_expires_at_ms < $2
				  AND c.lifecycle_phase = 'active'
				ORDER BY a.lease_expires_at_ms LIMIT 1000`, p, now)
			if err != nil {
				return err
			}
			type cand struct {
				id  uuid.UUID
				idx int32
			}
			cands, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (cand, error) {
				var c cand
				return c, r.Scan(&c.id, &c.idx)
			})
			if err != nil {
				return err
			}
			for _, c := range cands {
				if err := seedLikeExpireOne(ctx, pool, int16(p), c.id, c.idx, now); err != nil {
					return err
				}
				did++
			}
		}
		if did == 0 {
			return nil
		}
	}
}

func seedLikeExpireOne(ctx context.Context, pool *pgxpool.Pool, p int16, id uuid.UUID, idx int32, now int64) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var exp *int64
		if err := tx.QueryRow(ctx, `SELECT lease_expires_at_ms FROM ff_attempt
			WHERE partition_key = $1 AND execution_id = $2 AND attempt_index = $3 FOR UPDATE`, p, id, idx).Scan(&exp); err != nil {
			return err
		}
		if exp == nil || *exp >= now {
			return nil
		}
		var cur int32
		var phase string
		var maxRetries int
		if err := tx.QueryRow(ctx, `SELECT attempt_index, lifecycle_phase, COALESCE((policy->'retry_policy'->>'max_retries')::int, 0)
			FROM ff_exec_core WHERE partition_key = $1 AND execution_id = $2 FOR UPDATE`, p, id).Scan(&cur, &phase, &maxRetries); err != nil {
			return err
		}
		if phase != "active" {
			return nil
		}
		if _, err := tx.Exec(ctx, `UPDATE ff_attempt SET outcome = 'interrupted', lease_expires_at_ms = NULL, terminal_at_ms = $1
			WHERE partition_key = $2 AND execution_id = $3 AND attempt_index = $4`, now, p, id, idx); err != nil {
			return err
		}
		if int(cur) < maxRetries {
			if _, err := tx.Exec(ctx, `UPDATE ff_exec_core SET lifecycle_phase = 'runnable', ownership_state = 'unowned',
				eligibility_state = 'eligible_now', attempt_state = 'pending_retry_attempt', public_state = 'waiting',
				attempt_index = attempt_index + 1 WHERE partition_key = $1 AND execution_id = $2`, p, id); err != nil {
				return err
			}
		} else {
			if _, err := tx.Exec(ctx, `UPDATE ff_exec_core SET lifecycle_phase = 'terminal', ownership_state = 'unowned',
				eligibility_state = 'not_applicable', attempt_state = 'attempt_terminal', public_state = 'expired',
				terminal_at_ms = $1 WHERE partition_key = $2 AND execution_id = $3`, now, p, id); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO ff_completion_event (partition_key, execution_id, flow_id, outcome, namespace, instance_tag, occurred_at_ms)
				SELECT partition_key, execution_id, flow_id, 'expired', raw_fields->>'namespace', raw_fields->'tags'->>'cairn.instance_id', $3
				FROM ff_exec_core WHERE partition_key = $1 AND execution_id = $2`, p, id, now); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, `INSERT INTO ff_lease_event (execution_id, lease_id, event_type, occurred_at_ms, partition_key, namespace, instance_tag)
			SELECT $1::text, NULL, 'expired', $2, $3::int, raw_fields->>'namespace', raw_fields->'tags'->>'cairn.instance_id'
			FROM ff_exec_core WHERE partition_key = $3::smallint AND execution_id = $4`, id.String(), now, int32(p), id)
		return err
	})
}

// rawPipelined is the ceiling: each expiry is one implicit transaction of a
// pipelined UPDATE + INSERT, no recheck, at clients concurrent clients.
func rawPipelined(ctx context.Context, pool *pgxpool.Pool, clients int) error {
	rows, err := pool.Query(ctx, `SELECT partition_key, execution_id FROM ff_attempt WHERE lease_expires_at_ms IS NOT NULL`)
	if err != nil {
		return err
	}
	type key struct {
		p  int16
		id uuid.UUID
	}
	keys, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (key, error) {
		var k key
		return k, r.Scan(&k.p, &k.id)
	})
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make([]error, clients)
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			now := time.Now().UnixMilli()
			for i := c; i < len(keys); i += clients {
				k := keys[i]
				b := &pgx.Batch{}
				b.Queue(`UPDATE ff_attempt SET lease_expires_at_ms = NULL, outcome = 'interrupted', lease_epoch = lease_epoch + 1
					WHERE partition_key = $1 AND execution_id = $2 AND attempt_index = 0`, k.p, k.id)
				b.Queue(`INSERT INTO ff_lease_event (execution_id, event_type, occurred_at_ms, partition_key)
					VALUES ($1, 'expired', $2, $3)`, k.id.String(), now, int32(k.p))
				if err := pool.SendBatch(ctx, b).Close(); err != nil {
					errs[c] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
