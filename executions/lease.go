package executions

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/outbox"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Lease is a worker's hold on one attempt of an execution. Pass it back to
// Renew, Complete, Fail, Delay and Release; they are fenced by (ID,
// AttemptIndex, Epoch, LeaseID).
type Lease struct {
	ID               ff.ExecutionID
	AttemptIndex     int32
	Epoch            int64
	LeaseID          uuid.UUID
	ExpiresAtMs      int64
	WorkerID         string
	WorkerInstanceID string
	// Payload of the execution, returned by Claim and Reclaim.
	Payload []byte
}

// ClaimParams say who claims what.
type ClaimParams struct {
	Lane             string
	WorkerID         string
	WorkerInstanceID string
	// LeaseTTL is how long the lease lives without a Renew, but never past
	// its execution's deadline. Required.
	LeaseTTL time.Duration
	// Max executions to claim at once, 1..10000. 0 means 1 (a claim of
	// none means nothing); negative is an error.
	Max int
	// Capabilities the worker offers; an execution is claimable only when
	// its required capabilities are a subset.
	Capabilities []string
}

func (p *ClaimParams) validate() error {
	if err := ff.CheckText("lane", p.Lane, true, ff.MaxName); err != nil {
		return err
	}
	if err := ff.CheckText("worker_id", p.WorkerID, false, ff.MaxName); err != nil {
		return err
	}
	if err := ff.CheckText("worker_instance_id", p.WorkerInstanceID, false, ff.MaxName); err != nil {
		return err
	}
	if p.LeaseTTL <= 0 {
		return ff.Validationf("lease_ttl", "%s: must be positive", p.LeaseTTL)
	}
	if p.LeaseTTL < time.Millisecond {
		return ff.Validationf("lease_ttl", "%s: below one millisecond", p.LeaseTTL)
	}
	if p.Max < 0 || p.Max > 10_000 {
		return ff.Validationf("max", "%d is outside 1..10000", p.Max)
	}
	if p.Max == 0 {
		p.Max = 1
	}
	for _, c := range p.Capabilities {
		if err := ff.CheckText("capabilities", c, true, ff.MaxName); err != nil {
			return err
		}
	}
	return nil
}

// A claim is two statements. claimLockSQL picks eligible rows across all
// partitions with SKIP LOCKED and locks them; claimSQL then opens (or
// re-leases) their attempts with epoch = the previous maximum + 1 and marks
// them active. The second statement's snapshot is taken after the locks are
// held: in one statement the previous epochs would be read from a snapshot
// taken before the row locks, and a revoke and a claim that committed in
// between would see their epoch written back, letting a revoked lease pass
// the fence again (see lockRowSQL).
//
// An execution whose deadline has passed at the claim's time ($4) is
// skipped, not leased (see passed): the execution_deadline scanner expires
// it. Both statements use that one reading of the clock, so a lease is
// never granted already ended: its expiry, now + TTL capped at the
// deadline, is after now.
const claimLockSQL = `
SELECT partition_key, execution_id
FROM {S}ff_exec_core
WHERE lane_id = $1 AND lifecycle_phase = 'runnable' AND eligibility_state = 'eligible_now'
  AND required_capabilities <@ $2::text[] AND (deadline_at_ms IS NULL OR deadline_at_ms > $4::bigint)
ORDER BY priority DESC, created_at_ms, execution_id
LIMIT $3
FOR NO KEY UPDATE SKIP LOCKED`

// claimSQL opens the attempts and marks the executions active; with
// claimEventsSQL (its {EV} filled) it also writes each lease's "acquired"
// event in the same statement, one round trip less than queueing them.
const claimSQL = `
WITH cand AS (
  SELECT e.partition_key, e.execution_id, e.attempt_index, e.deadline_at_ms, k.worker_id, k.worker_instance_id
  FROM unnest($1::int2[], $2::uuid[], $3::text[], $4::text[]) AS k(partition_key, execution_id, worker_id, worker_instance_id)
  JOIN {S}ff_exec_core e USING (partition_key, execution_id)
), att AS (
  INSERT INTO {S}ff_attempt AS a
    (partition_key, execution_id, attempt_index, worker_id, worker_instance_id, lease_id,
     lease_epoch, lease_expires_at_ms, started_at_ms)
  SELECT c.partition_key, c.execution_id, c.attempt_index, c.worker_id, c.worker_instance_id, gen_random_uuid(),
         COALESCE(p.max_epoch, 0) + 1, LEAST($5::bigint + $6::bigint, c.deadline_at_ms), $5
  FROM cand c CROSS JOIN LATERAL (
    SELECT max(pa.lease_epoch) AS max_epoch FROM {S}ff_attempt pa
    WHERE pa.partition_key = c.partition_key AND pa.execution_id = c.execution_id) p
  ON CONFLICT (partition_key, execution_id, attempt_index) DO UPDATE
    SET worker_id = EXCLUDED.worker_id, worker_instance_id = EXCLUDED.worker_instance_id,
        lease_id = EXCLUDED.lease_id, lease_epoch = GREATEST(EXCLUDED.lease_epoch, a.lease_epoch + 1),
        lease_expires_at_ms = EXCLUDED.lease_expires_at_ms, started_at_ms = EXCLUDED.started_at_ms,
        terminal_at_ms = NULL, outcome = NULL
  RETURNING a.partition_key, a.execution_id, a.attempt_index, a.lease_id, a.lease_epoch, a.lease_expires_at_ms,
            a.worker_instance_id
), core AS (
  UPDATE {S}ff_exec_core e
  SET lifecycle_phase = 'active', ownership_state = 'leased', eligibility_state = 'not_applicable',
      attempt_state = 'running_attempt', public_state = 'active', blocking_reason = NULL,
      delay_until_ms = NULL, started_at_ms = COALESCE(e.started_at_ms, $5)
  FROM att
  WHERE e.partition_key = att.partition_key AND e.execution_id = att.execution_id
  RETURNING e.partition_key, e.execution_id, e.payload, e.priority, e.created_at_ms,
            e.raw_fields->>'namespace' AS namespace, e.raw_fields->'tags'->>'cairn.instance_id' AS instance_tag,
            att.attempt_index, att.lease_id, att.lease_epoch, att.lease_expires_at_ms, att.worker_instance_id
){EV}
SELECT core.partition_key, core.execution_id, core.attempt_index, core.lease_id, core.lease_epoch,
       core.lease_expires_at_ms, core.payload
FROM core
ORDER BY core.priority DESC, core.created_at_ms, core.execution_id`

// claimEventsCTE writes the "acquired" events of claimSQL's leases, in the
// order the leases are returned, as outbox.Writer.QueueLeases would.
const claimEventsCTE = `, ev AS (
  INSERT INTO {S}ff_lease_event
    (execution_id, lease_id, event_type, occurred_at_ms, partition_key,
     namespace, instance_tag, attempt_index, lease_epoch, worker_instance_id)
  SELECT core.execution_id::text, core.lease_id::text, 'acquired', $5, core.partition_key,
         core.namespace, core.instance_tag, core.attempt_index, core.lease_epoch, NULLIF(core.worker_instance_id, '')
  FROM core
  ORDER BY core.priority DESC, core.created_at_ms, core.execution_id
)`

// claimLaneSQL tells a claim that found nothing whether its lane exists.
const claimLaneSQL = `SELECT EXISTS (SELECT 1 FROM {S}ff_lane_registry WHERE lane_id = $1)`

// Claim leases up to p.Max eligible executions of p.Lane, highest priority
// first, then oldest, across all partitions in one query. It returns no
// leases (and no error) when nothing is eligible, and a validation error
// when the lane was never registered. An execution whose deadline has
// passed is not eligible (the execution_deadline scanner expires it), and
// a lease's expiry is now + p.LeaseTTL capped at its execution's deadline.
//
// Concurrent Claim calls of the same Store for the same lane, capabilities
// and lease TTL are served together, in one transaction (see coalesce.go):
// the leases are handed out in the order the calls arrived, each call
// getting at most its Max.
//
// A caller whose ctx ends while its claim is in a batch gets ctx's error,
// but the batch still commits (it is cancelled only when every caller in
// it has given up): the leases it took for that caller are held by nobody
// until they expire, and the attempt_timeout scanner then retries or
// expires them, as for a worker that died holding them, or as for any
// claim whose COMMIT a caller stops waiting for. Give Claim a context that
// outlives a claim's round trips (package runner bounds it by the lease
// TTL, not by its own stop).
func (s *Store) Claim(ctx context.Context, p ClaimParams) ([]Lease, error) {
	if err := p.validate(); err != nil {
		return nil, err
	}
	return s.claimers.get(claimKey{lane: p.Lane, caps: strings.Join(p.Capabilities, "\x00"), ttl: p.LeaseTTL}, s.newClaimer).
		do(ctx, claimAsk{max: p.Max, workerID: p.WorkerID, workerInstanceID: p.WorkerInstanceID})
}

// claimKey is what concurrent claims must share to be served together.
type claimKey struct {
	lane, caps string
	ttl        time.Duration
}

// claimAsk is one caller's part of a claim.
type claimAsk struct {
	max                        int
	workerID, workerInstanceID string
}

// newClaimer returns the coalescer of claims with key k.
func (s *Store) newClaimer(k claimKey) *coalescer[claimAsk, []Lease] {
	var caps []string
	if k.caps != "" {
		caps = strings.Split(k.caps, "\x00")
	}
	return &coalescer[claimAsk, []Lease]{max: 256, inFlight: claimersInFlight(runtime.GOMAXPROCS(0)),
		spill: batchSpill, weight: func(a claimAsk) int { return a.max },
		run: func(ctx context.Context, asks []claimAsk, d *delivery[claimAsk, []Lease]) {
			got, err := s.claimPipelined(ctx, k.lane, caps, k.ttl, asks)
			for i := range asks {
				if err != nil {
					d.deliver(i, result[[]Lease]{err: err})
				} else {
					d.deliver(i, result[[]Lease]{res: got[i]})
				}
			}
		}}
}

// ClaimTx is Claim inside the caller's transaction.
func (s *Store) ClaimTx(ctx context.Context, tx pgx.Tx, p ClaimParams) ([]Lease, error) {
	if err := p.validate(); err != nil {
		return nil, err
	}
	got, err := s.claimRows(ctx, tx, p.Lane, p.Capabilities, p.LeaseTTL,
		[]claimAsk{{max: p.Max, workerID: p.WorkerID, workerInstanceID: p.WorkerInstanceID}})
	if err != nil {
		return nil, err
	}
	return got[0], nil
}

// A claim is for several asks at once: as many executions as their Max add
// up to (at most 10,000), handed out in the order of the lock statement,
// each ask getting at most its max. Every lease is written under its own
// ask's worker.

// claimLockArgs are claimLockSQL's arguments, for a claim at now.
func claimLockArgs(lane string, caps []string, asks []claimAsk, now int64) []any {
	if caps == nil {
		caps = []string{}
	}
	total := 0
	for _, a := range asks {
		total += a.max
	}
	return []any{lane, caps, min(total, 10_000), now}
}

// scanClaimIDs reads the ids claimLockSQL locked.
func scanClaimIDs(rows pgx.Rows) ([]ff.ExecutionID, error) {
	var ids []ff.ExecutionID
	var id ff.ExecutionID
	_, err := pgx.ForEachRow(rows, []any{&id.Partition, &id.UUID}, func() error {
		ids = append(ids, id)
		return nil
	})
	return ids, err
}

// unknownLane is the error of a claim that found nothing in a lane that
// was never registered.
func unknownLane(lane string) error {
	return ff.Validationf("lane", "%s is unknown: no execution was ever created in it (RegisterLane registers one ahead)", ff.Excerpt(lane))
}

// claimPlan is a claim's second statement: the locked ids handed out to the
// asks.
type claimPlan struct {
	asks  []claimAsk
	owner map[ff.ExecutionID]int
	sql   string
	args  []any
}

// planClaim plans the claim at now (the reading its lock statement used)
// of the locked ids.
func (s *Store) planClaim(ids []ff.ExecutionID, asks []claimAsk, ttl time.Duration, now int64) *claimPlan {
	p := &claimPlan{asks: asks, owner: make(map[ff.ExecutionID]int, len(ids))}
	workerIDs := make([]string, len(ids))
	instanceIDs := make([]string, len(ids))
	for i, a, left := 0, 0, asks[0].max; i < len(ids); i++ {
		for left == 0 {
			a++
			left = asks[a].max
		}
		p.owner[ids[i]] = a
		workerIDs[i], instanceIDs[i] = asks[a].workerID, asks[a].workerInstanceID
		left--
	}
	events := claimEventsCTE
	if s.out.Discards() {
		events = ""
	}
	parts, uuids := keyArrays(ids)
	p.sql = s.sql(strings.Replace(claimSQL, "{EV}", events, 1))
	p.args = []any{parts, uuids, workerIDs, instanceIDs, now, ttl.Milliseconds()}
	return p
}

// scan reads the leases claimSQL returned, by ask.
func (p *claimPlan) scan(rows pgx.Rows) ([][]Lease, error) {
	out := make([][]Lease, len(p.asks))
	var l Lease
	_, err := pgx.ForEachRow(rows, []any{&l.ID.Partition, &l.ID.UUID, &l.AttemptIndex, &l.LeaseID, &l.Epoch, &l.ExpiresAtMs, &l.Payload}, func() error {
		a := p.owner[l.ID]
		got := l
		got.WorkerID, got.WorkerInstanceID = p.asks[a].workerID, p.asks[a].workerInstanceID
		out[a] = append(out[a], got)
		return nil
	})
	return out, err
}

// claimRows claims for asks inside tx: the lock statement, then the claim
// with its events.
func (s *Store) claimRows(ctx context.Context, tx pgx.Tx, lane string, caps []string, ttl time.Duration, asks []claimAsk) ([][]Lease, error) {
	now := s.clock.NowMs()
	rows, err := tx.Query(ctx, s.sql(claimLockSQL), claimLockArgs(lane, caps, asks, now)...)
	if err != nil {
		return nil, dbutil.MapErr(err, "claim")
	}
	ids, err := scanClaimIDs(rows)
	if err != nil {
		return nil, dbutil.MapErr(err, "claim")
	}
	if len(ids) == 0 {
		var known bool
		if err := tx.QueryRow(ctx, s.sql(claimLaneSQL), lane).Scan(&known); err != nil {
			return nil, dbutil.MapErr(err, "claim: checking lane")
		}
		if !known {
			return nil, unknownLane(lane)
		}
		return make([][]Lease, len(asks)), nil
	}
	p := s.planClaim(ids, asks, ttl, now)
	rows, err = tx.Query(ctx, p.sql, p.args...)
	if err != nil {
		return nil, dbutil.MapErr(err, "claim")
	}
	out, err := p.scan(rows)
	if err != nil {
		return nil, dbutil.MapErr(err, "claim")
	}
	return out, nil
}

// claimPipelined is claimRows in a transaction of its own that takes two
// round trips instead of five (a pipeTx): BEGIN travels with the lock
// statement, and COMMIT with the claim (or, when nothing was locked, with
// the lane's check). The statements and their snapshots are claimRows':
// the claim's snapshot is still taken after the lock statement returned.
func (s *Store) claimPipelined(ctx context.Context, lane string, caps []string, ttl time.Duration, asks []claimAsk) ([][]Lease, error) {
	var out [][]Lease
	err := s.inPipeTx(ctx, "claim", func(tx *pipeTx) error {
		b := &pgx.Batch{}
		var ids []ff.ExecutionID
		now := s.clock.NowMs()
		b.Queue(s.sql(claimLockSQL), claimLockArgs(lane, caps, asks, now)...).Query(func(rows pgx.Rows) error {
			var err error
			ids, err = scanClaimIDs(rows)
			return err
		})
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		b = &pgx.Batch{}
		known := true
		if len(ids) == 0 {
			out = make([][]Lease, len(asks))
			b.Queue(s.sql(claimLaneSQL), lane).QueryRow(func(row pgx.Row) error { return row.Scan(&known) })
		} else {
			p := s.planClaim(ids, asks, ttl, now)
			b.Queue(p.sql, p.args...).Query(func(rows pgx.Rows) error {
				var err error
				out, err = p.scan(rows)
				return err
			})
		}
		if err := tx.commitWith(ctx, b); err != nil {
			return err
		}
		if !known {
			return unknownLane(lane)
		}
		return nil
	})
	return out, err
}

func leaseEvent(l *Lease, typ string, now int64) outbox.LeaseRow {
	lid, idx, ep := l.LeaseID, l.AttemptIndex, l.Epoch
	ev := outbox.LeaseRow{ID: l.ID, Type: typ, LeaseID: &lid, AttemptIndex: &idx, LeaseEpoch: &ep, OccurredAtMs: now}
	if l.WorkerInstanceID != "" {
		w := l.WorkerInstanceID
		ev.WorkerInstanceID = &w
	}
	return ev
}

// lockedLeaseEvent describes the lease currently on a locked row: its
// attempt and the epoch it was held under (before any bump by the
// transition the event records).
func lockedLeaseEvent(l *locked, typ string, now int64) outbox.LeaseRow {
	idx, epoch := l.attemptIndex, l.epoch
	return outbox.LeaseRow{ID: l.id, Type: typ, LeaseID: l.leaseID, AttemptIndex: &idx, LeaseEpoch: &epoch,
		WorkerInstanceID: l.workerInstance, OccurredAtMs: now, Source: &l.source}
}

// lockLease locks the lease's execution and fences the lease against it,
// returning the locked row and the time the check used.
func (s *Store) lockLease(ctx context.Context, tx pgx.Tx, lease Lease) (*locked, int64, error) {
	l, err := s.lock(ctx, tx, lease.ID)
	if err != nil {
		return nil, 0, err
	}
	now := s.clock.NowMs()
	if err := s.fence(l, lease, now); err != nil {
		return nil, 0, err
	}
	return l, now, nil
}

// Renew extends a live lease by ttl from now, but never past the
// execution's deadline, and returns the renewed lease. At and after its
// expiry or the deadline it fails with ff.ErrLeaseExpired (see the package
// doc's Leases and fencing).
func (s *Store) Renew(ctx context.Context, lease Lease, ttl time.Duration) (Lease, error) {
	var out Lease
	err := s.inTx(ctx, "renew", func(tx pgx.Tx) error {
		var err error
		out, err = s.RenewTx(ctx, tx, lease, ttl)
		return err
	})
	return out, err
}

// RenewTx is Renew inside the caller's transaction.
func (s *Store) RenewTx(ctx context.Context, tx pgx.Tx, lease Lease, ttl time.Duration) (Lease, error) {
	if ttl <= 0 {
		return Lease{}, ff.Validationf("lease_ttl", "%s: must be positive", ttl)
	}
	l, now, err := s.lockLease(ctx, tx, lease)
	if err != nil {
		return Lease{}, err
	}
	lease.ExpiresAtMs = l.capExpiry(now, ttl)
	b := &pgx.Batch{}
	s.queueGuarded(b, l, "renew", ff.ErrStaleLease, `UPDATE {S}ff_attempt SET lease_expires_at_ms = $4
		WHERE partition_key = $1 AND execution_id = $2 AND attempt_index = $3 AND lease_epoch = $5`,
		lease.ID.Partition, dbutil.UUID(lease.ID.UUID), lease.AttemptIndex, lease.ExpiresAtMs, l.epoch)
	if err := s.out.QueueLease(b, lockedLeaseEvent(l, ff.LeaseRenewed, now)); err != nil {
		return Lease{}, err
	}
	if err := sendBatch(ctx, tx, b, "renew "+lease.ID.String()); err != nil {
		return Lease{}, err
	}
	return lease, nil
}

// Complete finishes the leased attempt successfully: the execution becomes
// terminal (public state completed) with result stored, and a completion
// "success" and a lease "revoked" event are written.
//
// Concurrent Complete, Fail and Release calls of one Store are committed
// together, in one transaction (see coalesce.go); each is fenced on its
// own and returns its own error.
func (s *Store) Complete(ctx context.Context, lease Lease, result []byte) error {
	_, err := s.finish(ctx, Finish{Lease: lease, Result: result})
	return err
}

// CompleteTx is Complete inside the caller's transaction.
func (s *Store) CompleteTx(ctx context.Context, tx pgx.Tx, lease Lease, result []byte) error {
	l, now, err := s.lockLease(ctx, tx, lease)
	if err != nil {
		return err
	}
	b := &pgx.Batch{}
	var c completes
	c.add(l, result)
	if err := s.queueCompletes(ctx, tx, b, &c, now); err != nil {
		return err
	}
	return sendBatch(ctx, tx, b, "complete "+l.id.String())
}

// queueCloseAttempt ends the current attempt: outcome set, lease cleared,
// and with bump the epoch moved on so the holder is fenced out.
func (s *Store) queueCloseAttempt(b *pgx.Batch, l *locked, outcome string, bump bool, now int64) {
	if !l.attemptExists {
		return
	}
	inc := 0
	if bump {
		inc = 1
	}
	s.queueGuarded(b, l, "closing the attempt of", ff.ErrStaleLease, `UPDATE {S}ff_attempt
		SET outcome = $4, lease_expires_at_ms = NULL, terminal_at_ms = $5, lease_epoch = lease_epoch + $6
		WHERE partition_key = $1 AND execution_id = $2 AND attempt_index = $3 AND lease_epoch = $7`,
		l.id.Partition, dbutil.UUID(l.id.UUID), l.attemptIndex, outcome, now, inc, l.epoch)
}

// queueCloseExpiredAttempt is queueCloseAttempt for a decision that the
// lease had expired (attempt_timeout, Reclaim): the attempt row must still
// hold the expiry read under the execution's lock, not only its epoch.
// ffriver's writers change a lease only under that lock, but upstream
// FlowFabric's handle-based renew (docs/upstream.md) locks only the attempt
// row and extends a lease past its expiry under the same epoch: a renew
// that committed between this transaction's read and its write would
// otherwise be expired on the expiry it replaced. The write then changes
// no row and fails with ff.ErrLeaseHeld: the attempt_timeout action is
// retried alone and decides again on the renewed expiry. Reclaim, whose
// answer its caller acts on, locks the attempt row before it reads
// (lockWithAttempt), so for it the guard always holds.
func (s *Store) queueCloseExpiredAttempt(b *pgx.Batch, l *locked, outcome string, now int64) {
	if upstreamUnfenced {
		s.queueCloseAttempt(b, l, outcome, outcome != "interrupted_reclaimed", now)
		return
	}
	if !l.attemptExists {
		return
	}
	s.queueGuarded(b, l, "closing the expired attempt of", ff.ErrLeaseHeld, `UPDATE {S}ff_attempt
		SET outcome = $4, lease_expires_at_ms = NULL, terminal_at_ms = $5, lease_epoch = lease_epoch + 1
		WHERE partition_key = $1 AND execution_id = $2 AND attempt_index = $3 AND lease_epoch = $6
		  AND lease_expires_at_ms = $7`,
		l.id.Partition, dbutil.UUID(l.id.UUID), l.attemptIndex, outcome, now, l.epoch, l.leaseExpiresMs)
}

// queueTerminalEvents queues the completion event (and, for a flow member,
// the cascade) and, when the execution was leased (withLease), the lease event.
func (s *Store) queueTerminalEvents(ctx context.Context, tx pgx.Tx, b *pgx.Batch, l *locked, outcome, leaseType string, withLease bool, now int64) error {
	if withLease {
		if err := s.out.QueueLease(b, lockedLeaseEvent(l, leaseType, now)); err != nil {
			return err
		}
	}
	return s.queueCompletion(ctx, tx, b, l, outcome, now)
}

// FailParams describe a failed attempt.
type FailParams struct {
	// Message is kept as the execution's last_failure_message.
	Message string
	// Permanent failures never retry.
	Permanent bool
}

// FailResult says what Fail did.
type FailResult struct {
	// Retried is true when another attempt was scheduled.
	Retried bool
	// NextAttempt is the attempt index the retry will run as.
	NextAttempt int32
	// DelayUntilMs is when the retry becomes eligible (0: at once).
	DelayUntilMs int64
}

// Fail ends the leased attempt as failed. While retries remain (see the
// package doc) the execution goes back to runnable, delayed by the policy's
// backoff; otherwise it becomes terminal failed with a completion "failed"
// event. Either way the lease is revoked with a "revoked" event.
// Like Complete, concurrent calls are committed together.
func (s *Store) Fail(ctx context.Context, lease Lease, p FailParams) (FailResult, error) {
	out, err := s.finish(ctx, Finish{Lease: lease, Fail: &p})
	return out.Fail, err
}

// FailTx is Fail inside the caller's transaction.
func (s *Store) FailTx(ctx context.Context, tx pgx.Tx, lease Lease, p FailParams) (FailResult, error) {
	if err := ff.CheckText("message", p.Message, false, ff.MaxMessage); err != nil {
		return FailResult{}, err
	}
	l, now, err := s.lockLease(ctx, tx, lease)
	if err != nil {
		return FailResult{}, err
	}
	b := &pgx.Batch{}
	res, err := s.queueFail(ctx, tx, b, l, p, now)
	if err != nil {
		return FailResult{}, err
	}
	return res, sendBatch(ctx, tx, b, "fail "+l.id.String())
}

// queueFail queues the writes of a Fail of the fenced execution l: a retry
// while the policy has retries left and p is not permanent, else terminal
// failed.
func (s *Store) queueFail(ctx context.Context, tx pgx.Tx, b *pgx.Batch, l *locked, p FailParams, now int64) (FailResult, error) {
	rp := l.retryPolicy()
	if !p.Permanent && int(l.attemptIndex) < rp.MaxRetries {
		s.queueCloseAttempt(b, l, "retry", false, now)
		res := s.queueRetry(b, l, rp, p.Message, now)
		return res, s.out.QueueLease(b, lockedLeaseEvent(l, ff.LeaseRevoked, now))
	}
	s.queueCloseAttempt(b, l, "failed", false, now)
	s.queueTerminal(b, l, ff.PublicFailed, p.Message, now)
	return FailResult{}, s.queueTerminalEvents(ctx, tx, b, l, ff.OutcomeFailed, ff.LeaseRevoked, true, now)
}

// queueRetry moves the execution to its next attempt, eligible now or
// delayed by the backoff.
func (s *Store) queueRetry(b *pgx.Batch, l *locked, rp RetryPolicy, message string, now int64) FailResult {
	next := l.attemptIndex + 1
	elig, public, delayUntil, blocking := retryTarget(rp, next, now)
	s.queueGuarded(b, l, "retrying", ff.ErrStaleLease, `UPDATE {S}ff_exec_core
		SET lifecycle_phase = 'runnable', ownership_state = 'unowned', eligibility_state = $3,
		    public_state = $4, attempt_state = 'pending_retry_attempt', attempt_index = $5,
		    delay_until_ms = $6, blocking_reason = $7,
		    raw_fields = raw_fields || jsonb_build_object('last_failure_message', $8::text, 'retry_count', $5::int)
		WHERE partition_key = $1 AND execution_id = $2`+coreGuard(9),
		l.id.Partition, dbutil.UUID(l.id.UUID), elig, public, next, delayUntil, blocking, message, l.phase, l.attemptIndex)
	res := FailResult{Retried: true, NextAttempt: next}
	if delayUntil != nil {
		res.DelayUntilMs = *delayUntil
	}
	return res
}

// queueTerminal makes the execution terminal with the given public state.
func (s *Store) queueTerminal(b *pgx.Batch, l *locked, public, message string, now int64) {
	s.queueGuarded(b, l, public, ff.ErrStaleLease, `UPDATE {S}ff_exec_core
		SET lifecycle_phase = 'terminal', ownership_state = 'unowned', eligibility_state = 'not_applicable',
		    attempt_state = 'attempt_terminal', public_state = $3, blocking_reason = NULL,
		    delay_until_ms = NULL, terminal_at_ms = $4,
		    raw_fields = CASE WHEN $5::text = '' THEN raw_fields
		                      ELSE raw_fields || jsonb_build_object('last_failure_message', $5::text) END
		WHERE partition_key = $1 AND execution_id = $2`+coreGuard(6),
		l.id.Partition, dbutil.UUID(l.id.UUID), public, now, message, l.phase, l.attemptIndex)
}

// Delay ends the leased attempt without consuming a retry and parks the
// execution until until; the lease is revoked with a "revoked" event. The
// next Claim after until re-leases the same attempt with epoch+1.
func (s *Store) Delay(ctx context.Context, lease Lease, until time.Time) error {
	return s.inTx(ctx, "delay", func(tx pgx.Tx) error { return s.DelayTx(ctx, tx, lease, until) })
}

// DelayTx is Delay inside the caller's transaction.
func (s *Store) DelayTx(ctx context.Context, tx pgx.Tx, lease Lease, until time.Time) error {
	if until.IsZero() {
		return ff.Validationf("until", "is required")
	}
	l, now, err := s.lockLease(ctx, tx, lease)
	if err != nil {
		return err
	}
	b := &pgx.Batch{}
	s.queueCloseAttempt(b, l, "interrupted", false, now)
	s.queueGuarded(b, l, "delay", ff.ErrStaleLease, `UPDATE {S}ff_exec_core
		SET lifecycle_phase = 'runnable', ownership_state = 'unowned', eligibility_state = 'not_eligible_until_time',
		    public_state = 'delayed', attempt_state = 'attempt_interrupted', delay_until_ms = $3,
		    blocking_reason = 'waiting_for_delay'
		WHERE partition_key = $1 AND execution_id = $2`+coreGuard(4), l.id.Partition, dbutil.UUID(l.id.UUID), until.UnixMilli(),
		l.phase, l.attemptIndex)
	if err := s.out.QueueLease(b, lockedLeaseEvent(l, ff.LeaseRevoked, now)); err != nil {
		return err
	}
	return sendBatch(ctx, tx, b, "delay "+l.id.String())
}

// Release gives a leased execution back without using a retry: the
// attempt ends "interrupted", the execution is runnable at once, and the
// next Claim re-leases the same attempt with epoch + 1; the lease is revoked
// with a "revoked" event. A worker that stops with executions in hand
// releases them (see package runner).
// Like Complete, concurrent calls are committed together.
func (s *Store) Release(ctx context.Context, lease Lease) error {
	_, err := s.finish(ctx, Finish{Lease: lease, Release: true})
	return err
}

// ReleaseTx is Release inside the caller's transaction.
func (s *Store) ReleaseTx(ctx context.Context, tx pgx.Tx, lease Lease) error {
	l, now, err := s.lockLease(ctx, tx, lease)
	if err != nil {
		return err
	}
	b := &pgx.Batch{}
	if err := s.queueRelease(b, l, now); err != nil {
		return err
	}
	return sendBatch(ctx, tx, b, "release "+l.id.String())
}

// queueRelease queues the writes of a Release of the fenced execution l.
func (s *Store) queueRelease(b *pgx.Batch, l *locked, now int64) error {
	s.queueCloseAttempt(b, l, "interrupted", false, now)
	s.queueGuarded(b, l, "release", ff.ErrStaleLease, `UPDATE {S}ff_exec_core
		SET lifecycle_phase = 'runnable', ownership_state = 'unowned', eligibility_state = 'eligible_now',
		    public_state = 'waiting', attempt_state = 'attempt_interrupted', delay_until_ms = NULL,
		    blocking_reason = NULL
		WHERE partition_key = $1 AND execution_id = $2`+coreGuard(3), l.id.Partition, dbutil.UUID(l.id.UUID),
		l.phase, l.attemptIndex)
	return s.out.QueueLease(b, lockedLeaseEvent(l, ff.LeaseRevoked, now))
}

// Reclaim takes over an active execution whose lease has expired before the
// attempt_timeout scanner got to it: the old attempt is closed
// (interrupted_reclaimed) and its epoch bumped, a new attempt starts under a
// new lease with epoch = old + 1, and a "reclaimed" event is written. The
// bump fences the old holder wherever it checks: ffriver's fence checks the
// attempt too, but upstream FlowFabric's handle-based calls on the same
// tables fence on the epoch of the attempt their handle names and nothing
// else (docs/upstream.md). Upstream's renew changes a lease without the
// execution's lock, so Reclaim also locks the attempt row: a renew in
// flight is waited for, and the decision is taken on the expiry it leaves.
// The new lease's expiry is
// now + p.LeaseTTL, capped at the execution's deadline. It fails with
// ff.ErrLeaseHeld while the lease is live, ff.ErrNotActive when the
// execution is not active, its deadline has passed (the execution_deadline
// scanner expires it) or it has no retry left (the attempt_timeout scanner
// expires it).
func (s *Store) Reclaim(ctx context.Context, id ff.ExecutionID, p ClaimParams) (Lease, error) {
	var out Lease
	err := s.inTx(ctx, "reclaim", func(tx pgx.Tx) error {
		var err error
		out, err = s.ReclaimTx(ctx, tx, id, p)
		return err
	})
	return out, err
}

// ReclaimTx is Reclaim inside the caller's transaction. p.Lane and p.Max
// are ignored.
func (s *Store) ReclaimTx(ctx context.Context, tx pgx.Tx, id ff.ExecutionID, p ClaimParams) (Lease, error) {
	if p.Lane == "" {
		p.Lane = "-"
	}
	if err := p.validate(); err != nil {
		return Lease{}, err
	}
	l, err := s.lockWithAttempt(ctx, tx, id)
	if err != nil {
		return Lease{}, err
	}
	now := s.clock.NowMs()
	if l.phase != ff.PhaseActive || !l.attemptExists {
		return Lease{}, fmt.Errorf("reclaim %s: execution is %s, not active: %w", id, l.phase, ff.ErrNotActive)
	}
	if l.leaseExpiresMs == nil {
		return Lease{}, fmt.Errorf("reclaim %s: the attempt holds no lease: %w", id, ff.ErrNotActive)
	}
	if l.deadlinePassed(now) {
		return Lease{}, fmt.Errorf("reclaim %s: its deadline passed at %d (now %d): no lease is granted past it; the execution_deadline scanner expires it: %w",
			id, *l.deadlineAtMs, now, ff.ErrNotActive)
	}
	if !passed(*l.leaseExpiresMs, now) {
		return Lease{}, fmt.Errorf("reclaim %s: lease live until %d (now %d): %w", id, *l.leaseExpiresMs, now, ff.ErrLeaseHeld)
	}
	if rp := l.retryPolicy(); int(l.attemptIndex) >= rp.MaxRetries {
		return Lease{}, fmt.Errorf("reclaim %s: attempt %d used the last of %d retries; the attempt_timeout scanner expires it: %w",
			id, l.attemptIndex, rp.MaxRetries, ff.ErrNotActive)
	}
	lease := Lease{ID: id, AttemptIndex: l.attemptIndex + 1, Epoch: l.epoch + 1, LeaseID: uuid.New(),
		ExpiresAtMs: l.capExpiry(now, p.LeaseTTL), WorkerID: p.WorkerID, WorkerInstanceID: p.WorkerInstanceID}
	b := &pgx.Batch{}
	s.queueCloseExpiredAttempt(b, l, "interrupted_reclaimed", now)
	b.Queue(s.sql(`INSERT INTO {S}ff_attempt
		(partition_key, execution_id, attempt_index, worker_id, worker_instance_id, lease_id, lease_epoch,
		 lease_expires_at_ms, started_at_ms)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`),
		id.Partition, id.UUID, lease.AttemptIndex, p.WorkerID, p.WorkerInstanceID, lease.LeaseID, lease.Epoch,
		lease.ExpiresAtMs, now)
	s.queueGuarded(b, l, "reclaim", ff.ErrStaleLease, `UPDATE {S}ff_exec_core
		SET attempt_index = $3, lease_reclaim_count = lease_reclaim_count + 1, ownership_state = 'leased',
		    attempt_state = 'running_attempt', public_state = 'active'
		WHERE partition_key = $1 AND execution_id = $2`+coreGuard(4),
		id.Partition, dbutil.UUID(id.UUID), lease.AttemptIndex, l.phase, l.attemptIndex)
	b.Queue(s.sql(`SELECT payload FROM {S}ff_exec_core WHERE partition_key = $1 AND execution_id = $2`),
		id.Partition, dbutil.UUID(id.UUID)).QueryRow(func(row pgx.Row) error { return row.Scan(&lease.Payload) })
	if err := s.out.QueueLease(b, leaseEvent(&lease, ff.LeaseReclaimed, now)); err != nil {
		return Lease{}, err
	}
	if err := sendBatch(ctx, tx, b, "reclaim "+id.String()); err != nil {
		return Lease{}, err
	}
	return lease, nil
}
