// Package upstream writes rows the way FlowFabric's Postgres backend
// (crate ff-backend-postgres, v0.15.0, commit 0def5967) writes them, for the
// tests that check ffriver takes each of those rows for what it means
// (docs/upstream.md, "Compatibility with upstream SQL").
//
// Each function is one transaction with the statements of one upstream
// operation, written from the row shapes upstream leaves (which columns it
// sets together, to which values, in which order), not from its text: the
// create, the handle-based claim, renew, complete, fail and delay
// (attempt.rs), the typed claim, complete and fail (typed_ops.rs), the flow
// staging and the completion dispatch (flow_staging.rs, dispatch.rs). The
// fence checks are upstream's (the attempt's epoch), so a test can see a
// refused call too.
//
// Test support only: nothing in ffriver calls it.
package upstream

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrFence is returned when a call's lease epoch is not the attempt's
// (upstream's LeaseConflict / StaleLease).
var ErrFence = errors.New("upstream: lease epoch does not match the attempt's")

// ErrNothing is returned when a call finds nothing to act on (no eligible
// execution, no grant, an execution not in the phase the call needs).
var ErrNothing = errors.New("upstream: nothing to act on")

// ID is an execution's key as upstream stores it.
type ID struct {
	Partition int16
	UUID      uuid.UUID
}

// Handle is what a claim returns: the attempt holding the lease and its
// epoch.
type Handle struct {
	ID      ID
	Attempt int32
	Epoch   int64
}

// Exec is an execution to create.
type Exec struct {
	ID     ID
	Lane   string
	FlowID *uuid.UUID
	// Policy is the serialised ExecutionPolicy; nil writes NULL (a create
	// without a policy).
	Policy []byte
	// Namespace goes into raw_fields, as upstream keeps it.
	Namespace string
	// DeadlineAtMs is the execution deadline (nil: none).
	DeadlineAtMs *int64
	// Runnable writes the shape upstream's own tests seed claimable rows
	// with (runnable, pending_first_attempt) instead of its create's
	// (submitted, attempt_state "pending"), which nothing upstream moves on.
	Runnable bool
}

func tx(ctx context.Context, pool *pgxpool.Pool, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, pool, fn)
}

// Create inserts an execution as upstream's create_execution does (or, with
// Runnable, as its tests seed one).
func Create(ctx context.Context, pool *pgxpool.Pool, e Exec, nowMs int64) error {
	phase, attempt := "submitted", "pending"
	if e.Runnable {
		phase, attempt = "runnable", "pending_first_attempt"
	}
	return tx(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO ff_exec_core (partition_key, execution_id, flow_id, lane_id,
			required_capabilities, attempt_index, lifecycle_phase, ownership_state, eligibility_state, public_state,
			attempt_state, priority, created_at_ms, deadline_at_ms, payload, policy, raw_fields)
			VALUES ($1, $2, $3, $4, '{}'::text[], 0, $5, 'unowned', 'eligible_now', 'waiting', $6, 0, $7::bigint, $8, NULL, $9,
			        jsonb_build_object('namespace', $10::text, 'execution_kind', 'test', 'creator_identity', 'upstream',
			                           'last_mutation_at', $7::bigint::text, 'total_attempt_count', '0', 'tags', '{}'::jsonb))
			ON CONFLICT (partition_key, execution_id) DO NOTHING`,
			e.ID.Partition, e.ID.UUID, e.FlowID, e.Lane, phase, attempt, nowMs, e.DeadlineAtMs, e.Policy, e.Namespace); err != nil {
			return fmt.Errorf("upstream create: %w", err)
		}
		_, err := tx.Exec(ctx, `INSERT INTO ff_lane_registry (lane_id, registered_at_ms, registered_by)
			VALUES ($1, $2, 'create_execution') ON CONFLICT (lane_id) DO NOTHING`, e.Lane, nowMs)
		return err
	})
}

// emitLease writes a lease event the way upstream's lease_event::emit does:
// namespace and instance tag copied from the execution when it exists.
func emitLease(ctx context.Context, tx pgx.Tx, id ID, typ string, nowMs int64) error {
	_, err := tx.Exec(ctx, `INSERT INTO ff_lease_event (execution_id, lease_id, event_type, occurred_at_ms, partition_key, namespace, instance_tag)
		SELECT $2::uuid::text, NULL, $3::text, $4::bigint, $1::int, raw_fields->>'namespace', raw_fields->'tags'->>'cairn.instance_id'
		FROM ff_exec_core WHERE partition_key = $1::smallint AND execution_id = $2::uuid
		UNION ALL
		SELECT $2::uuid::text, NULL, $3::text, $4::bigint, $1::int, NULL, NULL
		WHERE NOT EXISTS (SELECT 1 FROM ff_exec_core WHERE partition_key = $1::smallint AND execution_id = $2::uuid)`,
		id.Partition, id.UUID, typ, nowMs)
	if err != nil {
		return fmt.Errorf("upstream lease event %s: %w", typ, err)
	}
	return nil
}

// completion writes a completion event the way upstream's handle-based
// paths do: flow copied from the execution, no namespace, not dispatched.
func completion(ctx context.Context, tx pgx.Tx, id ID, outcome string, nowMs int64) error {
	_, err := tx.Exec(ctx, `INSERT INTO ff_completion_event (partition_key, execution_id, flow_id, outcome, namespace, instance_tag, occurred_at_ms)
		SELECT partition_key, execution_id, flow_id, $3, NULL, NULL, $4 FROM ff_exec_core WHERE partition_key = $1 AND execution_id = $2`,
		id.Partition, id.UUID, outcome, nowMs)
	if err != nil {
		return fmt.Errorf("upstream completion %s: %w", outcome, err)
	}
	return nil
}

// terminalEvents writes the events of a terminal transition of the
// handle-based paths: a completion of outcome, then a lease "revoked".
func terminalEvents(ctx context.Context, tx pgx.Tx, id ID, outcome string, nowMs int64) error {
	if err := completion(ctx, tx, id, outcome, nowMs); err != nil {
		return err
	}
	return emitLease(ctx, tx, id, "revoked", nowMs)
}

// fence locks the attempt and checks its epoch (upstream's fence_check).
func fence(ctx context.Context, tx pgx.Tx, h Handle) error {
	var epoch int64
	err := tx.QueryRow(ctx, `SELECT lease_epoch FROM ff_attempt WHERE partition_key = $1 AND execution_id = $2 AND attempt_index = $3 FOR UPDATE`,
		h.ID.Partition, h.ID.UUID, h.Attempt).Scan(&epoch)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("attempt %d: %w", h.Attempt, ErrNothing)
	}
	if err != nil {
		return err
	}
	if epoch != h.Epoch {
		return fmt.Errorf("attempt %d epoch %d, handle %d: %w", h.Attempt, epoch, h.Epoch, ErrFence)
	}
	return nil
}

// Claim is the handle-based claim of one partition: the oldest eligible
// execution of lane, its attempt row at the execution's attempt_index
// (epoch 1, or the row's epoch+1), the execution active with public state
// "running", and a lease "acquired".
func Claim(ctx context.Context, pool *pgxpool.Pool, part int16, lane, worker string, ttlMs, nowMs int64) (Handle, error) {
	h := Handle{ID: ID{Partition: part}}
	err := tx(ctx, pool, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `SELECT execution_id, attempt_index FROM ff_exec_core
			WHERE partition_key = $1 AND lane_id = $2 AND lifecycle_phase = 'runnable' AND eligibility_state = 'eligible_now'
			ORDER BY priority DESC, created_at_ms FOR UPDATE SKIP LOCKED LIMIT 1`, part, lane).Scan(&h.ID.UUID, &h.Attempt)
		if errors.Is(err, pgx.ErrNoRows) {
			return ErrNothing
		}
		if err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `INSERT INTO ff_attempt (partition_key, execution_id, attempt_index, worker_id, worker_instance_id,
			lease_epoch, lease_expires_at_ms, started_at_ms) VALUES ($1, $2, $3, $4, $4 || '-1', 1, $5, $6)
			ON CONFLICT (partition_key, execution_id, attempt_index) DO UPDATE
			SET worker_id = EXCLUDED.worker_id, worker_instance_id = EXCLUDED.worker_instance_id,
			    lease_epoch = ff_attempt.lease_epoch + 1, lease_expires_at_ms = EXCLUDED.lease_expires_at_ms,
			    started_at_ms = EXCLUDED.started_at_ms, outcome = NULL
			RETURNING lease_epoch`, part, h.ID.UUID, h.Attempt, worker, nowMs+ttlMs, nowMs).Scan(&h.Epoch); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE ff_exec_core SET lifecycle_phase = 'active', ownership_state = 'leased',
			eligibility_state = 'not_applicable', public_state = 'running', attempt_state = 'running_attempt',
			started_at_ms = COALESCE(started_at_ms, $3) WHERE partition_key = $1 AND execution_id = $2`, part, h.ID.UUID, nowMs); err != nil {
			return err
		}
		return emitLease(ctx, tx, h.ID, "acquired", nowMs)
	})
	return h, err
}

// IssueGrant writes a claim grant for worker, as upstream's scheduler does
// (without the eligibility_state "pending_claim" it also sets, which its
// own typed claim then refuses).
func IssueGrant(ctx context.Context, pool *pgxpool.Pool, id ID, lane, worker string, expiresAtMs, nowMs int64) error {
	grantID := uuid.New()
	_, err := pool.Exec(ctx, `INSERT INTO ff_claim_grant (partition_key, grant_id, execution_id, kind, worker_id, worker_instance_id,
		lane_id, capability_hash, worker_capabilities, route_snapshot_json, admission_summary, grant_ttl_ms, issued_at_ms, expires_at_ms)
		VALUES ($1, $2, $3, 'claim', $4, $4 || '-1', $5, NULL, '[]'::jsonb, NULL, NULL, $6, $7, $8)`,
		id.Partition, grantID[:], id.UUID, worker, lane, expiresAtMs-nowMs, nowMs, expiresAtMs)
	if err != nil {
		return fmt.Errorf("upstream issue grant: %w", err)
	}
	return nil
}

// ClaimTyped is the typed claim_execution: it consumes worker's grant,
// leases the attempt at expected, and leaves ff_exec_core.attempt_index
// pointing at the next attempt (expected+1).
func ClaimTyped(ctx context.Context, pool *pgxpool.Pool, id ID, worker string, expected int32, ttlMs, nowMs int64) (Handle, error) {
	h := Handle{ID: id, Attempt: expected}
	err := tx(ctx, pool, func(tx pgx.Tx) error {
		var phase, own, elig, att string
		if err := tx.QueryRow(ctx, `SELECT lifecycle_phase, ownership_state, eligibility_state, attempt_state FROM ff_exec_core
			WHERE partition_key = $1 AND execution_id = $2 FOR UPDATE`, id.Partition, id.UUID).Scan(&phase, &own, &elig, &att); err != nil {
			return err
		}
		if phase != "runnable" || own != "unowned" || elig != "eligible_now" || att == "running_attempt" || att == "attempt_interrupted" {
			return fmt.Errorf("typed claim of %s/%s/%s/%s: %w", phase, own, elig, att, ErrNothing)
		}
		var grantWorker string
		var expires int64
		err := tx.QueryRow(ctx, `SELECT worker_id, expires_at_ms FROM ff_claim_grant
			WHERE partition_key = $1 AND execution_id = $2 AND kind = 'claim' FOR UPDATE`, id.Partition, id.UUID).Scan(&grantWorker, &expires)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && (grantWorker != worker || (expires > 0 && expires < nowMs))) {
			return fmt.Errorf("no valid grant: %w", ErrNothing)
		}
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM ff_claim_grant WHERE partition_key = $1 AND execution_id = $2 AND kind = 'claim'`,
			id.Partition, id.UUID); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `INSERT INTO ff_attempt (partition_key, execution_id, attempt_index, worker_id, worker_instance_id,
			lease_epoch, lease_expires_at_ms, started_at_ms, policy, raw_fields)
			VALUES ($1, $2, $3, $4, $4 || '-1', 1, $5, $6, NULL, jsonb_build_object('attempt_type', 'initial'))
			ON CONFLICT (partition_key, execution_id, attempt_index) DO UPDATE
			SET worker_id = EXCLUDED.worker_id, worker_instance_id = EXCLUDED.worker_instance_id,
			    lease_epoch = ff_attempt.lease_epoch + 1, lease_expires_at_ms = EXCLUDED.lease_expires_at_ms,
			    started_at_ms = COALESCE(ff_attempt.started_at_ms, EXCLUDED.started_at_ms),
			    raw_fields = ff_attempt.raw_fields || EXCLUDED.raw_fields, terminal_at_ms = NULL, outcome = NULL
			RETURNING lease_epoch`, id.Partition, id.UUID, expected, worker, nowMs+ttlMs, nowMs).Scan(&h.Epoch); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE ff_exec_core SET lifecycle_phase = 'active', ownership_state = 'leased',
			eligibility_state = 'not_applicable', attempt_state = 'running_attempt', public_state = 'active', attempt_index = $3,
			raw_fields = raw_fields || jsonb_build_object('current_worker_id', $4::text)
			WHERE partition_key = $1 AND execution_id = $2`, id.Partition, id.UUID, expected+1, worker); err != nil {
			return err
		}
		return emitLease(ctx, tx, id, "acquired", nowMs)
	})
	return h, err
}

// Renew extends the handle's lease (the handle-based renew: the epoch is
// the only check).
func Renew(ctx context.Context, pool *pgxpool.Pool, h Handle, ttlMs, nowMs int64) error {
	return tx(ctx, pool, func(tx pgx.Tx) error {
		if err := fence(ctx, tx, h); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE ff_attempt SET lease_expires_at_ms = $4
			WHERE partition_key = $1 AND execution_id = $2 AND attempt_index = $3`, h.ID.Partition, h.ID.UUID, h.Attempt, nowMs+ttlMs); err != nil {
			return err
		}
		return emitLease(ctx, tx, h.ID, "renewed", nowMs)
	})
}

// endAttempt closes the handle's attempt with outcome, clearing its lease.
func endAttempt(ctx context.Context, tx pgx.Tx, h Handle, outcome string, nowMs int64) error {
	_, err := tx.Exec(ctx, `UPDATE ff_attempt SET terminal_at_ms = $4, outcome = $5, lease_expires_at_ms = NULL
		WHERE partition_key = $1 AND execution_id = $2 AND attempt_index = $3`, h.ID.Partition, h.ID.UUID, h.Attempt, nowMs, outcome)
	return err
}

// Complete is the handle-based complete: terminal, public_state left as
// the claim wrote it ("running"), completion "success", lease "revoked".
func Complete(ctx context.Context, pool *pgxpool.Pool, h Handle, nowMs int64) error {
	return tx(ctx, pool, func(tx pgx.Tx) error {
		if err := fence(ctx, tx, h); err != nil {
			return err
		}
		if err := endAttempt(ctx, tx, h, "success", nowMs); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE ff_exec_core SET lifecycle_phase = 'terminal', ownership_state = 'unowned',
			eligibility_state = 'not_applicable', attempt_state = 'attempt_terminal', terminal_at_ms = $3, result = 'ok'
			WHERE partition_key = $1 AND execution_id = $2`, h.ID.Partition, h.ID.UUID, nowMs); err != nil {
			return err
		}
		return terminalEvents(ctx, tx, h.ID, "success", nowMs)
	})
}

// CompleteTyped is the typed complete_execution: the execution locked first
// and required active, then the attempt fenced; terminal with public state
// "completed", completion "success" carrying the namespace, lease
// "revoked".
func CompleteTyped(ctx context.Context, pool *pgxpool.Pool, h Handle, nowMs int64) error {
	return tx(ctx, pool, func(tx pgx.Tx) error {
		var phase string
		if err := tx.QueryRow(ctx, `SELECT lifecycle_phase FROM ff_exec_core WHERE partition_key = $1 AND execution_id = $2 FOR UPDATE`,
			h.ID.Partition, h.ID.UUID).Scan(&phase); err != nil {
			return err
		}
		if phase != "active" {
			return fmt.Errorf("typed complete of a %s execution: %w", phase, ErrNothing)
		}
		if err := fence(ctx, tx, h); err != nil {
			return err
		}
		if err := endAttempt(ctx, tx, h, "success", nowMs); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE ff_exec_core SET lifecycle_phase = 'terminal', ownership_state = 'unowned',
			eligibility_state = 'not_applicable', attempt_state = 'attempt_terminal', public_state = 'completed', terminal_at_ms = $3,
			result = 'ok', raw_fields = raw_fields || '{"terminal_outcome": "success"}'
			WHERE partition_key = $1 AND execution_id = $2`, h.ID.Partition, h.ID.UUID, nowMs); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO ff_completion_event (partition_key, execution_id, flow_id, outcome, namespace, instance_tag, occurred_at_ms)
			SELECT partition_key, execution_id, flow_id, 'success', raw_fields->>'namespace', raw_fields->>'instance_tag', $3
			FROM ff_exec_core WHERE partition_key = $1 AND execution_id = $2`, h.ID.Partition, h.ID.UUID, nowMs); err != nil {
			return err
		}
		return emitLease(ctx, tx, h.ID, "revoked", nowMs)
	})
}

// Fail is the handle-based fail: retry (runnable, eligible now, next
// attempt index, no limit and no backoff; lease "revoked") or, not retry,
// terminal with public_state untouched, completion "failed", lease
// "revoked".
func Fail(ctx context.Context, pool *pgxpool.Pool, h Handle, retry bool, nowMs int64) error {
	return tx(ctx, pool, func(tx pgx.Tx) error {
		if err := fence(ctx, tx, h); err != nil {
			return err
		}
		if retry {
			if err := endAttempt(ctx, tx, h, "retry", nowMs); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `UPDATE ff_exec_core SET lifecycle_phase = 'runnable', ownership_state = 'unowned',
				eligibility_state = 'eligible_now', attempt_state = 'pending_retry_attempt', attempt_index = attempt_index + 1,
				raw_fields = raw_fields || '{"last_failure_message": "boom"}' WHERE partition_key = $1 AND execution_id = $2`,
				h.ID.Partition, h.ID.UUID); err != nil {
				return err
			}
			return emitLease(ctx, tx, h.ID, "revoked", nowMs)
		}
		if err := endAttempt(ctx, tx, h, "failed", nowMs); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE ff_exec_core SET lifecycle_phase = 'terminal', ownership_state = 'unowned',
			eligibility_state = 'not_applicable', attempt_state = 'attempt_terminal', terminal_at_ms = $3,
			raw_fields = raw_fields || '{"last_failure_message": "boom"}' WHERE partition_key = $1 AND execution_id = $2`,
			h.ID.Partition, h.ID.UUID, nowMs); err != nil {
			return err
		}
		return terminalEvents(ctx, tx, h.ID, "failed", nowMs)
	})
}

// FailTyped is the typed fail_execution with retry: while retry_count in
// raw_fields is below maxRetries, the execution goes back to runnable,
// delayed until now+delayMs, the due time kept only in raw_fields
// (delay_until, as a string) and deadline_at_ms untouched; attempt_index is
// left as the typed claim set it. Otherwise terminal "failed" with a
// completion "failed". A lease "revoked" either way.
func FailTyped(ctx context.Context, pool *pgxpool.Pool, h Handle, maxRetries int, delayMs, nowMs int64) error {
	return tx(ctx, pool, func(tx pgx.Tx) error {
		if err := fence(ctx, tx, h); err != nil {
			return err
		}
		var phase string
		var retries int
		if err := tx.QueryRow(ctx, `SELECT lifecycle_phase, COALESCE((raw_fields->>'retry_count')::int, 0) FROM ff_exec_core
			WHERE partition_key = $1 AND execution_id = $2 FOR UPDATE`, h.ID.Partition, h.ID.UUID).Scan(&phase, &retries); err != nil {
			return err
		}
		if phase != "active" {
			return fmt.Errorf("typed fail of a %s execution: %w", phase, ErrNothing)
		}
		if err := endAttempt(ctx, tx, h, "failure", nowMs); err != nil {
			return err
		}
		if retries < maxRetries {
			if _, err := tx.Exec(ctx, `UPDATE ff_exec_core SET lifecycle_phase = 'runnable', ownership_state = 'unowned',
				eligibility_state = 'not_eligible_until_time', attempt_state = 'pending_retry_attempt',
				blocking_reason = 'waiting_for_retry_backoff', public_state = 'delayed',
				raw_fields = raw_fields || jsonb_build_object('retry_count', ($3::int + 1)::text, 'delay_until', $4::bigint::text,
				                                              'pending_previous_attempt_index', $5::int::text)
				WHERE partition_key = $1 AND execution_id = $2`, h.ID.Partition, h.ID.UUID, retries, nowMs+delayMs, h.Attempt); err != nil {
				return err
			}
			return emitLease(ctx, tx, h.ID, "revoked", nowMs)
		}
		if _, err := tx.Exec(ctx, `UPDATE ff_exec_core SET lifecycle_phase = 'terminal', ownership_state = 'unowned',
			eligibility_state = 'not_applicable', attempt_state = 'attempt_terminal', public_state = 'failed', terminal_at_ms = $3,
			raw_fields = raw_fields || '{"terminal_outcome": "failed"}' WHERE partition_key = $1 AND execution_id = $2`,
			h.ID.Partition, h.ID.UUID, nowMs); err != nil {
			return err
		}
		return terminalEvents(ctx, tx, h.ID, "failed", nowMs)
	})
}

// Delay is the handle-based delay: the attempt interrupted, the execution
// runnable and not eligible until untilMs, written into deadline_at_ms
// (upstream's overloaded column), public_state untouched; lease "revoked".
func Delay(ctx context.Context, pool *pgxpool.Pool, h Handle, untilMs, nowMs int64) error {
	return tx(ctx, pool, func(tx pgx.Tx) error {
		if err := fence(ctx, tx, h); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE ff_attempt SET outcome = 'interrupted', lease_expires_at_ms = NULL
			WHERE partition_key = $1 AND execution_id = $2 AND attempt_index = $3`, h.ID.Partition, h.ID.UUID, h.Attempt); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE ff_exec_core SET lifecycle_phase = 'runnable', ownership_state = 'unowned',
			eligibility_state = 'not_eligible_until_time', attempt_state = 'attempt_interrupted', deadline_at_ms = $3
			WHERE partition_key = $1 AND execution_id = $2`, h.ID.Partition, h.ID.UUID, untilMs); err != nil {
			return err
		}
		return emitLease(ctx, tx, h.ID, "revoked", nowMs)
	})
}
