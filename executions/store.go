// Package executions is ffriver's hot path: create, claim, renew, complete,
// fail, delay, cancel, revoke and reclaim executions, and the transitions
// the background scanners' item jobs apply (expire an attempt, promote a
// delayed execution, expire a deadline, remove executions past retention,
// dispatch and reconcile sibling cancels, advance a flow).
//
// The transitions are unexported: the built-in item kinds (package
// scanners) reach them through Store.Pipeline, an opaque handle, inside
// the transaction the item's River job opens; each locks, rechecks, writes
// the transition and its outbox rows (package outbox), and returns an
// outcome. The Store is the one owner of the pipeline's clock and outbox
// waker.
//
// Every operation is one transaction: it locks the execution's ff_exec_core
// row first (the one lock order every writer follows), rechecks the state it
// needs, writes the transition and its outbox rows, and commits. Each
// operation has a ...Tx variant that runs inside a transaction the caller
// owns; the caller then decides whether it commits. After an error from a
// ...Tx method, roll the transaction back: it may hold part of the
// operation's writes. The ...Tx methods expect READ COMMITTED, Postgres's
// default: they lock the row, then read it in a second statement, which
// sees the row as the lock left it only under READ COMMITTED.
//
// Every decision is taken on the rows as they are once the execution's lock
// is held, never on a snapshot taken before a lock wait, and every write
// restates in its WHERE clause what the decision read (queueGuarded), so a
// row changed by a writer that skipped the lock fails the operation instead
// of being overwritten.
//
// # Leases and fencing
//
// A Lease names an execution, its attempt, the attempt's lease_epoch and
// its lease id. Every lease operation is fenced by them: once the lease has
// been expired, revoked, reclaimed or cancelled the epoch (or the attempt)
// has moved on, and a late worker gets ff.ErrStaleLease instead of a silent
// success. The lease id, drawn at random for each lease, fences a lease of
// an execution that retention removed off the same id created again, whose
// attempts and epochs start over. A lease whose expiry time has passed but
// that no scanner has expired yet gets ff.ErrLeaseExpired.
//
// A lease holds while now < its lease_expires_at_ms; at that instant it
// has ended (passed: the attempt_timeout scanner expires it from then on,
// and Reclaim may take it over). An execution's deadline fences the same
// way: no lease is granted at or after deadline_at_ms (Claim skips such an
// execution, Reclaim refuses it with ff.ErrNotActive), no lease's expiry
// reaches past it (Claim, Renew and Reclaim cap lease_expires_at_ms at
// deadline_at_ms), and from deadline_at_ms on every lease operation gets
// ff.ErrLeaseExpired, until the execution_deadline scanner expires the
// execution.
//
// # Deadlines and unknown outcomes
//
// Every call returns by its context's deadline, holding no connection and
// waiting on no lock once it has returned. A call that gave up after its
// writes may have reached COMMIT returns ff.ErrOutcomeUnknown wrapping the
// cause; any other error means nothing was written. Concurrent Complete,
// Fail and Release calls are committed in batches; one whose
// execution another session holds waits in the Store's queue, not on a
// connection.
//
// # Attempts and retries
//
// ff_exec_core.attempt_index is the index of the current (or most recent)
// attempt, 0-based. A retry (Fail with retries left, or an attempt timeout)
// moves it to the next index, which gets its ff_attempt row at the next
// Claim. Revoke and Delay do not consume an attempt: the next Claim re-leases
// the same attempt row with epoch+1. An execution retries while
// attempt_index < policy.retry_policy.max_retries (the upstream rule), so
// max_retries = 2 allows three attempts. Reclaim starts a new attempt and so
// consumes the retry budget too: a crash-looping worker cannot escape it.
package executions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/actions"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/migrations"
	"github.com/ffriver/ffriver/outbox"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Config configures a Store.
type Config struct {
	// Schema holding ffriver's tables ("" = the pool's search_path).
	Schema string
	// Partitions expected; 0 accepts whatever the schema was migrated with.
	Partitions ff.Partitions
	// Clock for every *_ms timestamp (default ff.SystemClock).
	Clock ff.Clock
	// Waker, when set, is poked after each commit that wrote events.
	Waker *outbox.Waker
	// Outbox replaces the default writer for the schema (used by ffctl
	// bench to measure a store without outbox rows; see
	// outbox.Writer.Discarding).
	Outbox *outbox.Writer
	// Cascader, when set, enqueues the flow cascade of every terminal
	// transition of a flow member in the same transaction, as ff.advance
	// jobs ffriver's workers apply (ffriver.New gives its Store one; use
	// that Store, Service.Store). Without one, completion events stay
	// undispatched for the dependency scanner.
	Cascader actions.Cascader
	// FlowsBySweep says that a Store without a Cascader is meant to leave
	// its flow members' hops to the dependency sweep (one hop every
	// Sweep of the dependency scanner, about 15 s). Without it, such a
	// Store warns (Logger, at most every 10 minutes) the first time a
	// flow member's transition leaves hops to the sweep, naming the fix:
	// a Store from ffriver.New(…).Store(), which cascades at once.
	FlowsBySweep bool
	// Logger receives the Store's warnings (default slog.Default(), the
	// application's logger).
	Logger *slog.Logger
}

// sweepOnlyWarnEvery is how often a Store without a Cascader repeats that
// its flows advance only through the dependency sweep.
const sweepOnlyWarnEvery = 10 * time.Minute

// Store runs execution operations against one schema. It is safe for
// concurrent use.
type Store struct {
	pool     *pgxpool.Pool
	schema   dbutil.Schema
	parts    ff.Partitions
	clock    ff.Clock
	out      *outbox.Writer
	waker    *outbox.Waker
	cascader actions.Cascader
	logger   *slog.Logger
	// sweepOnly is set when the Store has no Cascader and was not told
	// FlowsBySweep; sweepWarnedMs is when it last warned of it.
	sweepOnly     bool
	sweepWarnedMs atomic.Int64
	// claimers and finisher coalesce concurrent Claim calls and
	// Complete, Fail and Release calls (coalesce.go).
	claimers keyed[claimKey, *coalescer[claimAsk, []Lease]]
	finisher *coalescer[Finish, FinishOutcome]
}

// Open checks that the schema has ffriver's tables migrated (and the
// expected partition count) and returns a Store on it. River's tables are
// not its concern.
func Open(ctx context.Context, pool *pgxpool.Pool, cfg Config) (*Store, error) {
	s, err := dbutil.ParseSchema(cfg.Schema)
	if err != nil {
		return nil, err
	}
	if s, err = s.Resolve(ctx, pool); err != nil {
		return nil, err
	}
	// ffriver's own tables only: River's are checked where River is used.
	parts, err := migrations.VerifyTables(ctx, pool, string(s), cfg.Partitions)
	if err != nil {
		var pm *ff.PartitionMismatchError
		if cfg.Schema == "" && errors.Is(err, ff.ErrNotMigrated) && !errors.As(err, &pm) {
			// The schema came from the connection, not from the caller: a
			// forgotten schema reads as a wrong one otherwise.
			err = fmt.Errorf("%w (no schema was given, so the connection's search_path chose %q: "+
				"if ffriver's tables are in another schema, give it: --schema or $FF_SCHEMA, Config.Schema in Go)", err, s)
		}
		return nil, err
	}
	out := cfg.Outbox
	if out == nil {
		if out, err = outbox.NewWriter(string(s)); err != nil {
			return nil, err
		}
	}
	clock := cfg.Clock
	if clock == nil {
		clock = ff.SystemClock{}
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	st := &Store{pool: pool, schema: s, parts: parts, clock: clock, out: out, waker: cfg.Waker, cascader: cfg.Cascader,
		logger: logger, sweepOnly: cfg.Cascader == nil && !cfg.FlowsBySweep}
	st.finisher = &coalescer[Finish, FinishOutcome]{max: 256, inFlight: finishersInFlight(runtime.GOMAXPROCS(0)), spill: batchSpill, run: st.finishBatch}
	return st, nil
}

// Schema returns the resolved schema name.
func (s *Store) Schema() string { return string(s.schema) }

// Partitions returns the schema's partition count.
func (s *Store) Partitions() ff.Partitions { return s.parts }

// Pool returns the pool the Store runs on.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// NowMs returns the Store clock's time.
func (s *Store) NowMs() int64 { return s.clock.NowMs() }

// Waker returns the Waker the Store pokes after commits that wrote events
// (nil: none). Item workers poke it after their own commits: the Store is
// the one owner of the clock and the waker of a pipeline.
func (s *Store) Waker() *outbox.Waker { return s.waker }

func (s *Store) sql(q string) string { return s.schema.SQL(q) }

// beginSQL begins each of the Store's own transactions (inTx, pipeTx):
// BEGIN and dbutil.KeyedSettings, in one round trip. Its statements find
// their rows by key, and must keep doing so however small a table was when
// their plans were chosen. The Tx methods run in the caller's transaction
// with the caller's settings.
const beginSQL = "BEGIN; " + dbutil.KeyedSettings

// inTx runs fn in a transaction of its own and pokes the waker after a
// commit. Every non-Tx operation goes through it. When ctx ends, the call
// returns, and the statement it was running stops on the server too (a
// lock wait included): pgx drops the connection and sends the server a
// cancel request for it. An error after COMMIT was sent is an unknown
// outcome (commitErr).
func (s *Store) inTx(ctx context.Context, doing string, fn func(pgx.Tx) error) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return dbutil.MapErr(err, doing)
	}
	defer conn.Release()
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{BeginQuery: beginSQL})
	if err != nil {
		return txErr(err, doing)
	}
	if err := fn(tx); err != nil {
		// A failed rollback closes the connection (pgx), which ends the
		// transaction on the server as well.
		_ = tx.Rollback(ctx)
		return txErr(err, doing)
	}
	if err := tx.Commit(ctx); err != nil {
		return commitErr(err, doing)
	}
	s.waker.Poke()
	return nil
}

// commitErr is the error of a failed COMMIT. The server's answer (an error
// of its own, or a rollback of a failed transaction) and a COMMIT that was
// never sent are definite failures; anything else (the context ended, the
// connection was lost while COMMIT was on its way) leaves the outcome
// unknown: the transaction may have committed.
func commitErr(err error, doing string) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) || errors.Is(err, pgx.ErrTxCommitRollback) || pgconn.SafeToRetry(err) || isTyped(err) {
		return txErr(err, doing)
	}
	return ff.OutcomeUnknown(doing+": committing", dbutil.MapErr(err, "COMMIT"))
}

// txErr is the error a transaction of the Store's returns: a typed error
// (ErrStaleLease, ErrNotActive, ...) as it is, any other mapped with what
// the transaction was doing.
func txErr(err error, doing string) error {
	if isTyped(err) {
		return err
	}
	return dbutil.MapErr(err, doing)
}

func isTyped(err error) bool {
	for _, e := range []error{ff.ErrNotFound, ff.ErrStaleLease, ff.ErrLeaseExpired, ff.ErrNotActive,
		ff.ErrValidation, ff.ErrUnavailable, ff.ErrLeaseHeld, ff.ErrNotMigrated, ff.ErrOutcomeUnknown} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// checkID rejects ids outside the schema's partitions.
func (s *Store) checkID(id ff.ExecutionID) error {
	if id.UUID == uuid.Nil {
		return ff.Validationf("execution_id", "the nil UUID is not an execution id")
	}
	return s.parts.CheckID(id)
}

// locked is an execution's row, locked, with its current attempt.
type locked struct {
	id             ff.ExecutionID
	phase          string
	ownership      string
	eligibility    string
	attemptIndex   int32
	flowID         *uuid.UUID
	policy         []byte
	deadlineAtMs   *int64
	delayUntilMs   *int64
	attemptExists  bool
	epoch          int64
	leaseExpiresMs *int64
	leaseID        *uuid.UUID
	workerInstance *string
	// source is what the execution's events copy from its row.
	source outbox.Source
}

func (l *locked) leased() bool { return l.phase == ff.PhaseActive && l.leaseExpiresMs != nil }

func (l *locked) retryPolicy() RetryPolicy { return decodePolicy(l.policy).RetryPolicy }

// lockedColumns selects a locked struct's fields (locked.fields) from an
// execution e and its current attempt a.
const lockedColumns = `
       e.lifecycle_phase, e.ownership_state, e.eligibility_state, e.attempt_index, e.flow_id, e.policy,
       e.deadline_at_ms, e.delay_until_ms,
       a.attempt_index IS NOT NULL, COALESCE(a.lease_epoch, 0), a.lease_expires_at_ms, a.lease_id, a.worker_instance_id,
       e.raw_fields->>'namespace', e.raw_fields->'tags'->>'cairn.instance_id'
FROM {S}ff_exec_core e
LEFT JOIN {S}ff_attempt a
  ON a.partition_key = e.partition_key AND a.execution_id = e.execution_id AND a.attempt_index = e.attempt_index`

// Locking an execution and reading what a decision needs are two
// statements, sent in one round trip (lockBatch): lockRowSQL takes the row
// lock, waiting for a transaction that holds it, and readLockedSQL then
// reads the execution and its current attempt with a snapshot taken after
// the lock is held.
//
// One statement cannot do both. In READ COMMITTED, a SELECT … FOR UPDATE
// that waited for a lock re-reads only the locked row (ff_exec_core) as the
// other transaction left it; a row joined to it (the ff_attempt row) keeps
// the version of the statement's snapshot, taken before the wait. A Renew
// changes only ff_attempt, and a revoke followed by a claim in one
// transaction leaves ff_exec_core as it was: a fence on that joined row
// would compare a worker's lease against an epoch that has moved on (a
// superseded worker's Complete would succeed). Every writer of ff_attempt
// holds its execution's row lock, so once the lock is held the second
// statement reads the attempt as it is, and it cannot change until commit.
//
// Under REPEATABLE READ or SERIALIZABLE the second statement still reads
// the transaction's snapshot; a concurrent change then surfaces as a
// serialization failure at the lock or at the guarded writes (queueGuarded),
// never as a write based on a stale read. The ...Tx variants are meant for
// READ COMMITTED, the default.
const (
	lockRowSQL = `SELECT FROM {S}ff_exec_core WHERE partition_key = $1 AND execution_id = $2
FOR NO KEY UPDATE`
	readLockedSQL = `SELECT` + lockedColumns + `
WHERE e.partition_key = $1 AND e.execution_id = $2`
)

// fields are the scan targets of lockedColumns.
func (l *locked) fields() []any {
	return []any{&l.phase, &l.ownership, &l.eligibility, &l.attemptIndex, &l.flowID, &l.policy,
		&l.deadlineAtMs, &l.delayUntilMs,
		&l.attemptExists, &l.epoch, &l.leaseExpiresMs, &l.leaseID, &l.workerInstance,
		&l.source.Namespace, &l.source.InstanceTag}
}

// lock checks id and locks the execution row, waiting for another
// transaction that holds it, then reads the row and its current attempt as
// they are once the lock is held.
func (s *Store) lock(ctx context.Context, tx pgx.Tx, id ff.ExecutionID) (*locked, error) {
	return s.lockWith(ctx, tx, id, false)
}

// lockWithAttempt is lock that also locks the current attempt row before
// reading it, for a decision that the lease has expired which must answer
// on the expiry as it is (Reclaim). ffriver's writers change a lease only
// under the execution's lock, but upstream FlowFabric's handle-based renew
// (docs/upstream.md) locks only the attempt row: with that row locked too,
// a renew in flight is waited for and its expiry is the one decided on, and
// none can commit between the read and the write.
func (s *Store) lockWithAttempt(ctx context.Context, tx pgx.Tx, id ff.ExecutionID) (*locked, error) {
	return s.lockWith(ctx, tx, id, true)
}

// lockAttemptSQL locks the current attempt row of an execution whose row
// lock is held (so its attempt_index cannot change).
const lockAttemptSQL = `SELECT FROM {S}ff_attempt
WHERE (partition_key, execution_id, attempt_index) =
      (SELECT partition_key, execution_id, attempt_index FROM {S}ff_exec_core WHERE partition_key = $1 AND execution_id = $2)
FOR NO KEY UPDATE`

// lockWith is lock, with attempt also locking the current attempt row
// (lockWithAttempt).
func (s *Store) lockWith(ctx context.Context, tx pgx.Tx, id ff.ExecutionID, attempt bool) (*locked, error) {
	if err := s.checkID(id); err != nil {
		return nil, err
	}
	if staleLock {
		return s.lockStale(ctx, tx, id)
	}
	l := &locked{id: id}
	found := false
	b := &pgx.Batch{}
	b.Queue(s.sql(lockRowSQL), id.Partition, dbutil.UUID(id.UUID))
	if attempt {
		b.Queue(s.sql(lockAttemptSQL), id.Partition, dbutil.UUID(id.UUID))
	}
	b.Queue(s.sql(readLockedSQL), id.Partition, dbutil.UUID(id.UUID)).QueryRow(func(row pgx.Row) error {
		err := row.Scan(l.fields()...)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		found = err == nil
		return err
	})
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, dbutil.MapErr(err, "locking "+id.String())
	}
	if !found {
		return nil, fmt.Errorf("execution %s: %w", id, ff.ErrNotFound)
	}
	return l, nil
}

// lockStale is the lock of earlier releases, one statement that locks
// ff_exec_core and reads the joined attempt from its snapshot: after a lock
// wait it fences against the attempt as it was before the wait. It is kept
// only behind the ffstalelock build tag, so that the lease history checker
// (integration/leasecheck) and the hand-over tests can show that they catch
// it.
func (s *Store) lockStale(ctx context.Context, tx pgx.Tx, id ff.ExecutionID) (*locked, error) {
	l := &locked{id: id}
	err := tx.QueryRow(ctx, s.sql(readLockedSQL+`
FOR NO KEY UPDATE OF e`), id.Partition, dbutil.UUID(id.UUID)).Scan(l.fields()...)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("execution %s: %w", id, ff.ErrNotFound)
	}
	if err != nil {
		return nil, dbutil.MapErr(err, "locking "+id.String())
	}
	return l, nil
}

// fence checks a worker's lease against the locked row: its attempt, its
// epoch and its lease id. The epoch alone does not tell incarnations of an
// id apart: execution retention removes an execution with its attempts, and
// the same id created again starts at attempt 0, epoch 1, the numbers a
// lease of the removed incarnation may still carry. The lease id is drawn
// at random for each lease (Claim, Reclaim) and kept by Renew, so it names
// one lease of one incarnation, however long its holder stalled.
func (s *Store) fence(l *locked, lease Lease, now int64) error {
	if lease.AttemptIndex != l.attemptIndex || !l.attemptExists || lease.Epoch != l.epoch {
		return fmt.Errorf("execution %s: lease for attempt %d epoch %d, but the current attempt is %d epoch %d: %w",
			l.id, lease.AttemptIndex, lease.Epoch, l.attemptIndex, l.epoch, ff.ErrStaleLease)
	}
	if !staleIncarnation && (l.leaseID == nil || *l.leaseID != lease.LeaseID) {
		return fmt.Errorf("execution %s: lease %s of attempt %d epoch %d, but the attempt holds lease %s "+
			"(the execution was removed and created again since): %w",
			l.id, lease.LeaseID, lease.AttemptIndex, lease.Epoch, ptrString(l.leaseID), ff.ErrStaleLease)
	}
	if l.phase != ff.PhaseActive {
		return fmt.Errorf("execution %s is %s, not active: %w", l.id, l.phase, ff.ErrNotActive)
	}
	if l.leaseExpiresMs == nil || passed(*l.leaseExpiresMs, now) {
		var at int64
		if l.leaseExpiresMs != nil {
			at = *l.leaseExpiresMs
		}
		end := ""
		if l.deadlineAtMs != nil && at == *l.deadlineAtMs {
			end = ", the execution's deadline"
		}
		return fmt.Errorf("execution %s: lease expired at %d%s (now %d): %w", l.id, at, end, now, ff.ErrLeaseExpired)
	}
	if l.deadlinePassed(now) {
		// A lease of ffriver's never reaches past the deadline (capExpiry);
		// one written by another writer may.
		return fmt.Errorf("execution %s: its deadline passed at %d (now %d), and its lease ended with it: %w",
			l.id, *l.deadlineAtMs, now, ff.ErrLeaseExpired)
	}
	return nil
}

// passed is the one rule for the instant a time column ends, the same in
// the API (fence, Claim, Renew, Reclaim) and in every scanner (their SQL
// compares "column <= now"): a lease holds while now < lease_expires_at_ms,
// an execution may run while now < deadline_at_ms, a delay lasts while now <
// delay_until_ms; at the instant itself each has ended.
func passed(atMs, nowMs int64) bool { return atMs <= nowMs }

// deadlinePassed reports whether the execution's deadline has passed at now
// (passed): it gets no lease any more, and a lease it holds has ended.
func (l *locked) deadlinePassed(now int64) bool {
	return l.deadlineAtMs != nil && passed(*l.deadlineAtMs, now)
}

// capExpiry is the expiry of a lease granted or renewed at now for ttl: now
// + ttl, but never past the execution's deadline.
func (l *locked) capExpiry(now int64, ttl time.Duration) int64 {
	exp := now + ttl.Milliseconds()
	if l.deadlineAtMs != nil && *l.deadlineAtMs < exp {
		return *l.deadlineAtMs
	}
	return exp
}

// coreGuard is the end of the WHERE clause of a guarded write of an
// ff_exec_core row (queueGuarded): the phase and attempt index read under
// the lock, bound as parameters $n and $n+1.
func coreGuard(n int) string {
	return fmt.Sprintf(" AND lifecycle_phase = $%d AND attempt_index = $%d", n, n+1)
}

// queueGuarded queues a write of the locked execution's row or of its
// current attempt whose WHERE clause restates what the decision read under
// the lock (the phase and attempt index of ff_exec_core, the epoch of
// ff_attempt). Every writer that keeps the lock protocol (lock the
// ff_exec_core row first) leaves those unchanged while the lock is held, so
// the write finds its one row; a write that finds none was overtaken by a
// writer that did not take the lock (plain SQL, a foreign writer), and the
// operation fails with notFound instead of writing on a stale decision.
//
// The failure is found by the client after the batch ran: the transaction
// still holds the operation's other writes and must be rolled back, as
// after any error of a ...Tx method (the non-Tx methods and the apply
// engine do so).
func (s *Store) queueGuarded(b *pgx.Batch, l *locked, what string, notFound error, q string, args ...any) {
	s.queueExpect(b, what+" "+l.id.String(), 1, notFound, q, args...)
}

// queueExpect queues a guarded write (see queueGuarded) that must change
// exactly want rows: the set-based writes of many locked executions.
func (s *Store) queueExpect(b *pgx.Batch, what string, want int64, notFound error, q string, args ...any) {
	b.Queue(s.sql(q), args...).Exec(func(ct pgconn.CommandTag) error {
		if n := ct.RowsAffected(); n != want {
			return fmt.Errorf("%s: the rows no longer hold what was read under their locks (%d of %d matched): "+
				"a writer changed them without locking the execution first: %w", what, n, want, notFound)
		}
		return nil
	})
}

func outboxCompletion(l *locked, outcome string, now int64) outbox.CompletionRow {
	src := l.source
	src.FlowID = l.flowID
	return outbox.CompletionRow{ID: l.id, Outcome: outcome, OccurredAtMs: now, Source: &src}
}

// sendBatch runs b on tx and reports the first error.
func sendBatch(ctx context.Context, tx pgx.Tx, b *pgx.Batch, doing string) error {
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return dbutil.MapErr(err, doing)
	}
	return nil
}

// Policy is the execution policy stored in ff_exec_core.policy.
type Policy struct {
	RetryPolicy RetryPolicy `json:"retry_policy"`
}

// RetryPolicy says how often and how soon a failed attempt is retried.
type RetryPolicy struct {
	// MaxRetries is how many retries follow the first attempt.
	MaxRetries int `json:"max_retries"`
	// Backoff between a failure and the next attempt; nil retries at once.
	Backoff *Backoff `json:"backoff,omitempty"`
}

// Backoff kinds.
const (
	BackoffFixed       = "fixed"
	BackoffExponential = "exponential"
)

// Backoff is the delay before a retry.
type Backoff struct {
	// Kind is BackoffFixed or BackoffExponential.
	Kind string `json:"kind"`
	// InitialMs is the delay before the first retry; 0 retries at once.
	InitialMs int64 `json:"initial_ms"`
	// MaxMs caps the delay; 0 means no cap (upstream's JSON omits it).
	MaxMs int64 `json:"max_ms,omitempty"`
	// Multiplier of each exponential step. 0 means 2 (a multiplier of 0
	// would make every retry after the first immediate); negative is an
	// error.
	Multiplier float64 `json:"multiplier,omitempty"`
}

// Validate rejects unusable policies.
func (p RetryPolicy) Validate() error {
	if p.MaxRetries < 0 || p.MaxRetries > 1_000_000 {
		return ff.Validationf("retry_policy.max_retries", "%d is outside 0..1000000", p.MaxRetries)
	}
	if b := p.Backoff; b != nil {
		switch b.Kind {
		case BackoffFixed, BackoffExponential:
		default:
			return ff.Validationf("retry_policy.backoff.kind", "%q: want %q or %q", b.Kind, BackoffFixed, BackoffExponential)
		}
		if b.InitialMs < 0 || b.MaxMs < 0 || b.Multiplier < 0 {
			return ff.Validationf("retry_policy.backoff", "negative durations or multiplier")
		}
		if b.MaxMs != 0 && b.MaxMs < b.InitialMs {
			return ff.Validationf("retry_policy.backoff.max_ms", "%d is below initial_ms %d", b.MaxMs, b.InitialMs)
		}
	}
	return nil
}

// Delay returns the backoff before retry number n (1 for the first retry).
func (p RetryPolicy) Delay(n int) time.Duration {
	b := p.Backoff
	if b == nil || b.InitialMs <= 0 {
		return 0
	}
	d := float64(b.InitialMs)
	if b.Kind == BackoffExponential {
		m := b.Multiplier
		if m == 0 {
			m = 2
		}
		for i := 1; i < n; i++ {
			d *= m
			if b.MaxMs > 0 && d >= float64(b.MaxMs) {
				break
			}
		}
	}
	if b.MaxMs > 0 && d > float64(b.MaxMs) {
		d = float64(b.MaxMs)
	}
	return time.Duration(d) * time.Millisecond
}

// decodePolicy reads a stored policy leniently: rows written outside
// ffriver may carry anything, and a missing retry policy means no retries.
func decodePolicy(b []byte) Policy {
	var p Policy
	if len(b) > 0 {
		_ = json.Unmarshal(b, &p)
	}
	if p.RetryPolicy.MaxRetries < 0 {
		p.RetryPolicy.MaxRetries = 0
	}
	return p
}

// retryTarget is the state a retried execution moves to.
func retryTarget(p RetryPolicy, nextAttempt int32, now int64) (eligibility, public string, delayUntil *int64, blocking *string) {
	d := p.Delay(int(nextAttempt))
	if d <= 0 {
		return ff.EligibleNow, ff.PublicWaiting, nil, nil
	}
	until := now + d.Milliseconds()
	reason := "waiting_for_retry_backoff"
	return ff.EligibleNotUntilTime, ff.PublicDelayed, &until, &reason
}

// ptrString is *p as a string, or "none".
func ptrString[T any](p *T) string {
	if p == nil {
		return "none"
	}
	return fmt.Sprint(*p)
}
