package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ExpireOptions size the expire scenario.
type ExpireOptions struct {
	Leases  int // expired leases to drain (default 20,000)
	Clients int // clients of the raw ceiling (default 32)
	// Pipeline drains the expired leases of schema with ffriver's River
	// pipeline and returns when none is left; nil skips that figure.
	Pipeline func(ctx context.Context, pool *pgxpool.Pool, schema string, leases int) (time.Duration, error)
}

// seedExpired inserts n active executions, spread over 256 partitions, whose
// leases expired a second ago. Half have a retry left, half go terminal.
func seedExpired(ctx context.Context, pool *pgxpool.Pool, n int) error {
	now := time.Now().UnixMilli()
	_, err := pool.Exec(ctx, `
		WITH ids AS (
		  SELECT i, (i % 256)::smallint AS p, gen_random_uuid() AS id FROM generate_series(1, $1) i
		), core AS (
		  INSERT INTO ff_exec_core (partition_key, execution_id, lane_id, lifecycle_phase, ownership_state,
		    eligibility_state, public_state, attempt_state, policy, raw_fields, started_at_ms)
		  SELECT p, id, 'bench', 'active', 'leased', 'not_applicable', 'active', 'running_attempt',
		         jsonb_build_object('retry_policy', jsonb_build_object('max_retries', i % 2)),
		         '{"namespace":"bench","tags":{"cairn.instance_id":"b-1"}}', $2::bigint - 60000
		  FROM ids RETURNING partition_key, execution_id)
		INSERT INTO ff_attempt (partition_key, execution_id, attempt_index, worker_id, worker_instance_id,
		  lease_id, lease_epoch, lease_expires_at_ms, started_at_ms)
		SELECT partition_key, execution_id, 0, 'bench', 'bench-1', gen_random_uuid(), 1, $2::bigint - 1000, $2::bigint - 60000 FROM core`,
		n, now)
	if err != nil {
		return fmt.Errorf("bench: seeding expired leases: %w", err)
	}
	_, err = pool.Exec(ctx, `ANALYZE ff_exec_core; ANALYZE ff_attempt`)
	return err
}

// resetExpire empties the tables the expire scenario fills.
func resetExpire(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, `TRUNCATE ff_exec_core, ff_attempt, ff_lease_event, ff_completion_event`)
	return err
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
// ffriver's River pipeline. Targets: pipeline ≥ 3× the loop and ≥ 50 % of
// the ceiling.
func Expire(ctx context.Context, env *Env, o ExpireOptions) ([]Result, error) {
	if o.Leases == 0 {
		o.Leases = 20_000
	}
	if o.Clients == 0 {
		o.Clients = 32
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
		n, err := countExpiredEvents(ctx, pool)
		if err != nil {
			return 0, err
		}
		if n != o.Leases {
			return 0, fmt.Errorf("expire bench (%s): %d expired events for %d leases", name, n, o.Leases)
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
	if o.Pipeline == nil {
		return results, nil
	}
	var drained time.Duration
	pipe, err := run("river pipeline", func() error {
		var err error
		drained, err = o.Pipeline(ctx, pool, schema, o.Leases)
		return err
	})
	if err != nil {
		return nil, err
	}
	_ = drained
	results = append(results,
		Result{Scenario: "expire", Figure: "ffriver River pipeline", Value: pipe, Unit: "leases/s",
			Baseline: "sequential loop", BaselineValue: loop, Ratio: pipe / loop, Target: "≥ 3", Met: met(pipe/loop >= 3)},
		Result{Scenario: "expire", Figure: "ffriver River pipeline", Value: pipe, Unit: "leases/s",
			Baseline: "raw pipelined ceiling", BaselineValue: ceiling, Ratio: pipe / ceiling, Target: "≥ 0.50", Met: met(pipe/ceiling >= 0.5)},
	)
	return results, nil
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
