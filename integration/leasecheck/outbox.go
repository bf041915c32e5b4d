package leasecheck

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/subscribe"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Commit order. Streams deliver a batch's transactions in xact_id order,
// and a transaction that took its id before waiting for an execution's row
// (a hop holding its edge group, the dispatcher holding a group, a
// composite) commits after a transaction with a higher id. The checker
// needs each execution's transactions in commit order exactly, so the run
// installs, in its own schema, a trigger that numbers each execution's
// events from a counter row per execution: the counter's row lock is held
// until COMMIT, so a transaction that numbers events of an execution after
// another did committed after it. Every writer of an execution's events
// already holds its ff_exec_core row, so the counter adds no contention.
// The trigger also copies every event into tables of the run's own
// (lc_lease_copy, lc_completion_copy), which outbox retention never
// touches: the checker reads the outbox from them, so retention may drop
// partitions during a run (Faults.OutboxRetention) while the streams must
// still deliver every event exactly once.
//
// Incarnations. Execution retention deletes terminal executions
// (Faults.ExecutionRetention) and the workload creates some of their ids
// again. A trigger on ff_exec_core numbers each INSERT and DELETE of an
// execution's row from the same counter as its events (lc_incarnation: the
// row as it was deleted, and when), so every event falls between the
// creation of its incarnation and its removal: the k-th creation of an id
// starts its k-th incarnation (incKey), checked as an execution of its
// own. The attempt rows and edge groups retention deletes are copied too
// (lc_attempt_removed, lc_group_removed): a removed incarnation's
// end state is its row as retention found it.
const commitOrderSQL = `
CREATE TABLE lc_exec_seq (partition_key integer NOT NULL, execution_id uuid NOT NULL, n bigint NOT NULL,
	PRIMARY KEY (partition_key, execution_id));
CREATE TABLE lc_event_seq (tbl "char" NOT NULL, event_id bigint NOT NULL, n bigint NOT NULL, PRIMARY KEY (tbl, event_id));
CREATE TABLE lc_lease_copy (LIKE ff_lease_event);
CREATE TABLE lc_completion_copy (LIKE ff_completion_event);
CREATE FUNCTION lc_number_event() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE k bigint;
BEGIN
	INSERT INTO lc_exec_seq AS s VALUES (NEW.partition_key, NEW.execution_id::uuid, 1)
	ON CONFLICT (partition_key, execution_id) DO UPDATE SET n = s.n + 1
	RETURNING s.n INTO k;
	INSERT INTO lc_event_seq VALUES (TG_ARGV[0]::"char", NEW.event_id, k);
	IF TG_ARGV[0] = 'l' THEN
		INSERT INTO lc_lease_copy SELECT NEW.*;
	ELSE
		INSERT INTO lc_completion_copy SELECT NEW.*;
	END IF;
	RETURN NULL;
END $$;
CREATE TRIGGER lc_number_lease_event AFTER INSERT ON ff_lease_event FOR EACH ROW EXECUTE FUNCTION lc_number_event('l');
CREATE TRIGGER lc_number_completion_event AFTER INSERT ON ff_completion_event FOR EACH ROW EXECUTE FUNCTION lc_number_event('c');
CREATE TABLE lc_incarnation (partition_key integer NOT NULL, execution_id uuid NOT NULL, n bigint NOT NULL, kind "char" NOT NULL,
	at_ms bigint NOT NULL, xact xid8 NOT NULL, namespace text, lifecycle_phase text, eligibility_state text, public_state text,
	attempt_index integer, delay_until_ms bigint, cancelled_by text, PRIMARY KEY (partition_key, execution_id, n));
CREATE TABLE lc_attempt_removed (LIKE ff_attempt, xact xid8 NOT NULL);
CREATE TABLE lc_group_removed (LIKE ff_edge_group);
CREATE FUNCTION lc_number_exec() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE k bigint; r record;
BEGIN
	IF TG_OP = 'INSERT' THEN r := NEW; ELSE r := OLD; END IF;
	INSERT INTO lc_exec_seq AS s VALUES (r.partition_key, r.execution_id, 1)
	ON CONFLICT (partition_key, execution_id) DO UPDATE SET n = s.n + 1
	RETURNING s.n INTO k;
	INSERT INTO lc_incarnation VALUES (r.partition_key, r.execution_id, k, CASE WHEN TG_OP = 'INSERT' THEN 'c' ELSE 'r' END,
		(extract(epoch FROM clock_timestamp()) * 1000)::bigint, pg_current_xact_id(), r.raw_fields->>'namespace',
		r.lifecycle_phase, r.eligibility_state, r.public_state, r.attempt_index, r.delay_until_ms, r.cancelled_by);
	RETURN NULL;
END $$;
CREATE FUNCTION lc_copy_attempt() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO lc_attempt_removed SELECT OLD.*, pg_current_xact_id();
	RETURN NULL;
END $$;
CREATE FUNCTION lc_copy_group() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO lc_group_removed SELECT OLD.*;
	RETURN NULL;
END $$;
CREATE TRIGGER lc_number_exec AFTER INSERT OR DELETE ON ff_exec_core FOR EACH ROW EXECUTE FUNCTION lc_number_exec();
CREATE TRIGGER lc_copy_attempt AFTER DELETE ON ff_attempt FOR EACH ROW EXECUTE FUNCTION lc_copy_attempt();
CREATE TRIGGER lc_copy_group AFTER DELETE ON ff_edge_group FOR EACH ROW EXECUTE FUNCTION lc_copy_group();`

// InstallCommitOrder installs the commit-order numbering in the pool's
// schema (its search_path).
func InstallCommitOrder(ctx context.Context, pool *pgxpool.Pool) error {
	if _, err := pool.Exec(ctx, commitOrderSQL); err != nil {
		return fmt.Errorf("installing the commit-order trigger: %w", err)
	}
	return nil
}

// eventKey names one outbox row: 'l' lease, 'c' completion.
type eventKey struct {
	table byte
	id    int64
}

// Streams are the run's live lease and completion streams: when each event
// was first delivered (the upper bound of its transaction's commit), and
// which were delivered twice.
type Streams struct {
	tl   Timeline
	mu   sync.Mutex
	recv map[eventKey]int64
	// order numbers each stream's deliveries.
	order  map[eventKey]int64
	n      map[byte]int64
	dups   []eventKey
	errs   []error
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// StartStreams subscribes to both outboxes of schema from the beginning.
func StartStreams(ctx context.Context, pool *pgxpool.Pool, schema, appName string, tl Timeline) (*Streams, error) {
	ctx, cancel := context.WithCancel(ctx)
	s := &Streams{tl: tl, recv: map[eventKey]int64{}, order: map[eventKey]int64{}, n: map[byte]int64{}, cancel: cancel}
	opts := subscribe.Options{Schema: schema, Start: subscribe.StartBeginning, ApplicationName: appName,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	leases, err := subscribe.Leases(ctx, pool, opts)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("lease stream: %w", err)
	}
	completions, err := subscribe.Completions(ctx, pool, opts)
	if err != nil {
		leases.Close()
		cancel()
		return nil, fmt.Errorf("completion stream: %w", err)
	}
	s.wg.Go(func() {
		defer leases.Close()
		for ev, err := range leases.All(ctx) {
			if s.failed(ctx, err) {
				return
			}
			if err == nil {
				s.got(eventKey{'l', ev.EventID})
			}
		}
	})
	s.wg.Go(func() {
		defer completions.Close()
		for ev, err := range completions.All(ctx) {
			if s.failed(ctx, err) {
				return
			}
			if err == nil {
				s.got(eventKey{'c', ev.EventID})
			}
		}
	})
	return s, nil
}

// failed records a terminal stream error; a disconnect is not one (the
// stream reconnects by itself and loses nothing).
func (s *Streams) failed(ctx context.Context, err error) bool {
	var disc *subscribe.DisconnectedError
	if err == nil || errors.As(err, &disc) {
		return false
	}
	if ctx.Err() == nil {
		s.mu.Lock()
		s.errs = append(s.errs, err)
		s.mu.Unlock()
	}
	return true
}

func (s *Streams) got(k eventKey) {
	now := s.tl.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.recv[k]; ok {
		s.dups = append(s.dups, k)
		return
	}
	s.recv[k] = now
	s.n[k.table]++
	s.order[k] = s.n[k.table]
}

// Reorders counts, per stream, the executions whose events it delivered in
// another order than their transactions committed, and describes the
// first. Inside a batch a stream delivers by transaction id, and a
// transaction that took its id before waiting for an execution's row (a
// sibling cancel holding its group, a hop, a composite) commits after one
// with a higher id: docs/streams.md's "commit order at the grain of the
// stream's ticks". A note, not a violation.
func (s *Streams) Reorders(snap *Snapshot) (int, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, first := 0, ""
	for k, txs := range snap.Txs {
		for _, table := range []byte{'l', 'c'} {
			if what := s.reordered(table, txs); what != "" {
				n++
				if first == "" {
					first = "execution " + k + ": " + what
				}
			}
		}
	}
	return n, first
}

// reordered describes the first of txs (in commit order) whose events the
// table's stream delivered before those of an earlier one ("" if none).
func (s *Streams) reordered(table byte, txs []*Tx) string {
	var prev int64
	var prevTx *Tx
	for _, tx := range txs {
		var ids []int64
		if table == 'l' {
			for _, e := range tx.Lease {
				ids = append(ids, e.EventID)
			}
		} else {
			for _, e := range tx.Completions {
				ids = append(ids, e.EventID)
			}
		}
		for _, id := range ids {
			o := s.order[eventKey{table, id}]
			if o == 0 {
				continue
			}
			if o < prev {
				return fmt.Sprintf("the %c stream delivered %s before %s", table, tx, prevTx)
			}
			prev, prevTx = o, tx
		}
	}
	return ""
}

// Stop ends both streams.
func (s *Streams) Stop() {
	s.cancel()
	s.wg.Wait()
}

// received returns when k was delivered (0: not yet).
func (s *Streams) received(k eventKey) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.recv[k]
}

// missing counts the events of snap not delivered yet.
func (s *Streams) missing(snap *Snapshot) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, txs := range snap.Txs {
		for _, tx := range txs {
			for _, e := range tx.Lease {
				if _, ok := s.recv[eventKey{'l', e.EventID}]; !ok {
					n++
				}
			}
			for _, e := range tx.Completions {
				if _, ok := s.recv[eventKey{'c', e.EventID}]; !ok {
					n++
				}
			}
		}
	}
	return n
}

// problems are the streams' own failures: duplicates and terminal errors.
// maxDeliveryLag bounds how long a committed call's events may wait for
// the live streams in runs with outbox retention rotating partitions and
// idle readers holding the outbox (Faults.OutboxRetention). A stream waits
// for transactions that took their ids earlier (long locks hold one for up
// to 2 s) and for a busy machine (3 s seen at a load average of 25 on two
// cores), never for maintenance queued behind a reader: that is the
// dedicated test's (integration/retentiondump_test.go), with a reader held
// for 8 s against a 4 s bound. Here the bound catches a stream stopped
// for good, and the copies catch an event lost to a partition dropped
// before the stream read it.
const maxDeliveryLag = 10 * time.Second

func (s *Streams) problems() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, k := range s.dups {
		out = append(out, fmt.Sprintf("the %c stream delivered event %d twice", k.table, k.id))
	}
	for _, err := range s.errs {
		out = append(out, "a stream failed: "+err.Error())
	}
	return out
}

// DBExec is an execution's row and current attempt row in the final
// snapshot.
type DBExec struct {
	Key         string
	Phase       string
	Eligibility string
	Public      string
	Attempt     int32
	DelayUntil  *int64
	CancelledBy *string
	Row         bool
	Epoch       int64
	Expires     *int64
	LeaseID     *string
	Holder      *string
	MaxEpoch    int64
}

// DBGroup is an edge group in the final snapshot.
type DBGroup struct {
	Downstream string
	State      string
	Flag       bool
	// Counts are the group's counters (success_count, fail_count,
	// skip_count, running_count).
	Counts counts
	// Removed: execution retention removed the flow; the group is as it
	// was then (lc_group_removed).
	Removed bool
}

// Snapshot is the database at the end of a run, read in one transaction.
type Snapshot struct {
	NowMs int64
	Execs map[string]*DBExec
	// Txs are each execution's outbox transactions in commit order.
	Txs    map[string][]*Tx
	Groups map[string]*DBGroup
	// Overdue lists due work not done: it must be empty before the final
	// snapshot is judged.
	Overdue []string
	// Pending counts the executions still active or delayed: work that
	// comes due by itself (a lease the stopped clients left runs out, a
	// delay ends). The run waits for it too, so that every lease left
	// behind is seen expired exactly once.
	Pending int
	// Incarnations are each id's creations in commit order, by the id
	// ({fp:N}:<uuid>); Execs and Txs are keyed by incarnation (incKey).
	Incarnations map[string][]*Incarnation
}

// Incarnation is one creation of an execution id and, if execution
// retention removed it, its removal (lc_incarnation).
type Incarnation struct {
	// Key is the incarnation's key (incKey), K its number (1: the first).
	Key string
	K   int
	// CreatedSeq and RemovedSeq number its creation and removal among the
	// id's transactions in commit order (RemovedSeq 0: not removed).
	CreatedSeq, RemovedSeq int64
	// RemovedAtMs is the database's clock when retention's DELETE ran
	// (its commit came later).
	RemovedAtMs int64
	// Row is the row retention deleted, with its attempt rows.
	Row *DBExec
}

// incKey is the key of incarnation k of an execution id: the id itself for
// the first, id#k for the ones created again after retention removed the
// previous one.
func incKey(id string, k int) string {
	if k <= 1 {
		return id
	}
	return fmt.Sprintf("%s#%d", id, k)
}

// incarnationOf is the key of the incarnation of base whose lifetime holds
// the transaction numbered seq: the last created before it.
func (snap *Snapshot) incarnationOf(base string, seq int64) string {
	incs := snap.Incarnations[base]
	k := 0
	for _, inc := range incs {
		if inc.CreatedSeq < seq {
			k = inc.K
		}
	}
	if len(incs) == 0 {
		return base // the run's trigger saw no creation: reported as an execution never created
	}
	if k == 0 {
		return incKey(base, 0) + "#before-creation"
	}
	return incKey(base, k)
}

func (snap *Snapshot) readIncarnations(ctx context.Context, tx pgx.Tx) error {
	rows, err := tx.Query(ctx, `SELECT i.partition_key, i.execution_id, i.n, i.kind, i.at_ms, i.lifecycle_phase, i.eligibility_state,
		i.public_state, i.attempt_index, i.delay_until_ms, i.cancelled_by,
		a.attempt_index IS NOT NULL, COALESCE(a.lease_epoch, 0), a.lease_expires_at_ms, a.lease_id::text, a.worker_instance_id,
		COALESCE((SELECT max(m.lease_epoch) FROM lc_attempt_removed m
			WHERE m.partition_key = i.partition_key AND m.execution_id = i.execution_id AND m.xact = i.xact), 0)
		FROM lc_incarnation i
		LEFT JOIN lc_attempt_removed a ON i.kind = 'r' AND a.partition_key = i.partition_key AND a.execution_id = i.execution_id
			AND a.attempt_index = i.attempt_index AND a.xact = i.xact
		WHERE i.namespace IS DISTINCT FROM $1
		ORDER BY i.partition_key, i.execution_id, i.n`, probeNamespace)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var part int16
		var u uuid.UUID
		var n, at int64
		var kind string
		var d DBExec
		if err := rows.Scan(&part, &u, &n, &kind, &at, &d.Phase, &d.Eligibility, &d.Public, &d.Attempt, &d.DelayUntil, &d.CancelledBy,
			&d.Row, &d.Epoch, &d.Expires, &d.LeaseID, &d.Holder, &d.MaxEpoch); err != nil {
			return err
		}
		base := key(part, u)
		incs := snap.Incarnations[base]
		if kind == "c" {
			inc := &Incarnation{K: len(incs) + 1, CreatedSeq: n}
			inc.Key = incKey(base, inc.K)
			snap.Incarnations[base] = append(incs, inc)
			continue
		}
		if len(incs) == 0 || incs[len(incs)-1].RemovedSeq != 0 {
			return fmt.Errorf("execution %s: a removal (#%d) of no incarnation", base, n)
		}
		inc := incs[len(incs)-1]
		d.Key = inc.Key
		inc.RemovedSeq, inc.RemovedAtMs, inc.Row = n, at, &d
	}
	return rows.Err()
}

// ReadSnapshot reads the final state of schema in one REPEATABLE READ
// transaction.
func ReadSnapshot(ctx context.Context, pool *pgxpool.Pool) (*Snapshot, error) {
	snap := &Snapshot{Execs: map[string]*DBExec{}, Txs: map[string][]*Tx{}, Groups: map[string]*DBGroup{}, Incarnations: map[string][]*Incarnation{}}
	err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := snap.readNow(ctx, tx); err != nil {
			return err
		}
		if err := snap.readIncarnations(ctx, tx); err != nil {
			return fmt.Errorf("incarnations: %w", err)
		}
		if err := snap.readExecs(ctx, tx); err != nil {
			return fmt.Errorf("executions: %w", err)
		}
		if err := snap.readEvents(ctx, tx); err != nil {
			return fmt.Errorf("events: %w", err)
		}
		if err := snap.readGroups(ctx, tx); err != nil {
			return fmt.Errorf("groups: %w", err)
		}
		return snap.readOverdue(ctx, tx)
	})
	if err != nil {
		return nil, err
	}
	return snap, nil
}

func key(part int16, u uuid.UUID) string { return ff.ExecutionID{Partition: part, UUID: u}.String() }

func (snap *Snapshot) readExecs(ctx context.Context, tx pgx.Tx) error {
	rows, err := tx.Query(ctx, `SELECT e.partition_key, e.execution_id, e.lifecycle_phase, e.eligibility_state, e.public_state,
		e.attempt_index, e.delay_until_ms, e.cancelled_by,
		a.attempt_index IS NOT NULL, COALESCE(a.lease_epoch, 0), a.lease_expires_at_ms, a.lease_id::text, a.worker_instance_id,
		COALESCE((SELECT max(m.lease_epoch) FROM ff_attempt m WHERE m.partition_key = e.partition_key AND m.execution_id = e.execution_id), 0)
		FROM ff_exec_core e
		LEFT JOIN ff_attempt a ON a.partition_key = e.partition_key AND a.execution_id = e.execution_id AND a.attempt_index = e.attempt_index
		WHERE e.raw_fields->>'namespace' IS DISTINCT FROM $1`, probeNamespace)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var d DBExec
		var part int16
		var u uuid.UUID
		if err := rows.Scan(&part, &u, &d.Phase, &d.Eligibility, &d.Public, &d.Attempt, &d.DelayUntil, &d.CancelledBy,
			&d.Row, &d.Epoch, &d.Expires, &d.LeaseID, &d.Holder, &d.MaxEpoch); err != nil {
			return err
		}
		base := key(part, u)
		d.Key = incKey(base, len(snap.Incarnations[base]))
		snap.Execs[d.Key] = &d
	}
	return rows.Err()
}

func (snap *Snapshot) readEvents(ctx context.Context, tx pgx.Tx) error {
	byXact := map[string]map[int64]*Tx{}
	txOf := func(k string, xact, n int64) *Tx {
		m := byXact[k]
		if m == nil {
			m = map[int64]*Tx{}
			byXact[k] = m
		}
		t := m[xact]
		if t == nil {
			t = &Tx{Exec: k, Xact: xact, Seq: n}
			m[xact] = t
		}
		t.Seq = min(t.Seq, n)
		return t
	}
	rows, err := tx.Query(ctx, `SELECT e.partition_key, e.execution_id::uuid, e.xact_id, e.event_id, s.n, e.event_type,
		COALESCE(e.attempt_index, -1), COALESCE(e.lease_epoch, -1), COALESCE(e.lease_id, ''), COALESCE(e.worker_instance_id, ''), e.occurred_at_ms
		FROM lc_lease_copy e LEFT JOIN lc_event_seq s ON s.tbl = 'l' AND s.event_id = e.event_id
		WHERE e.namespace IS DISTINCT FROM $1
		ORDER BY e.event_id`, probeNamespace)
	if err != nil {
		return err
	}
	for rows.Next() {
		var part int32
		var u uuid.UUID
		var xact int64
		var n *int64
		var ev LeaseEvent
		var leaseID string
		if err := rows.Scan(&part, &u, &xact, &ev.EventID, &n, &ev.Type, &ev.Attempt, &ev.Epoch, &leaseID, &ev.Instance, &ev.AtMs); err != nil {
			rows.Close()
			return err
		}
		if n == nil {
			rows.Close()
			return fmt.Errorf("lease event %d has no commit-order number", ev.EventID)
		}
		if leaseID != "" {
			if ev.LeaseID, err = uuid.Parse(leaseID); err != nil {
				rows.Close()
				return fmt.Errorf("lease event %d: lease_id %q: %w", ev.EventID, leaseID, err)
			}
		}
		t := txOf(snap.incarnationOf(key(int16(part), u), *n), xact, *n)
		t.Lease = append(t.Lease, ev)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	rows, err = tx.Query(ctx, `SELECT e.partition_key, e.execution_id, e.xact_id, e.event_id, s.n, e.outcome, e.occurred_at_ms
		FROM lc_completion_copy e LEFT JOIN lc_event_seq s ON s.tbl = 'c' AND s.event_id = e.event_id
		WHERE e.namespace IS DISTINCT FROM $1
		ORDER BY e.event_id`, probeNamespace)
	if err != nil {
		return err
	}
	for rows.Next() {
		var part int16
		var u uuid.UUID
		var xact int64
		var n *int64
		var ev CompletionEvent
		if err := rows.Scan(&part, &u, &xact, &ev.EventID, &n, &ev.Outcome, &ev.AtMs); err != nil {
			rows.Close()
			return err
		}
		if n == nil {
			rows.Close()
			return fmt.Errorf("completion event %d has no commit-order number", ev.EventID)
		}
		t := txOf(snap.incarnationOf(key(part, u), *n), xact, *n)
		t.Completions = append(t.Completions, ev)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for k, m := range byXact {
		txs := make([]*Tx, 0, len(m))
		for _, t := range m {
			txs = append(txs, t)
		}
		slices.SortFunc(txs, func(a, b *Tx) int { return cmpInt(a.Seq, b.Seq) })
		snap.Txs[k] = txs
	}
	return nil
}

func (snap *Snapshot) readGroups(ctx context.Context, tx pgx.Tx) error {
	// A flow execution retention removed has its groups in
	// lc_group_removed, as they were when it removed them.
	rows, err := tx.Query(ctx, `SELECT partition_key, downstream_eid, group_state, cancel_siblings_pending_flag,
		success_count, fail_count, skip_count, running_count, false FROM ff_edge_group
		UNION ALL
		SELECT partition_key, downstream_eid, group_state, cancel_siblings_pending_flag,
		success_count, fail_count, skip_count, running_count, true FROM lc_group_removed`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var g DBGroup
		var part int16
		var u uuid.UUID
		if err := rows.Scan(&part, &u, &g.State, &g.Flag, &g.Counts.Success, &g.Counts.Fail, &g.Counts.Skip, &g.Counts.Running, &g.Removed); err != nil {
			return err
		}
		g.Downstream = key(part, u)
		snap.Groups[g.Downstream] = &g
	}
	return rows.Err()
}

// overdueSQL lists the work a scanner or a hop still owes, each condition
// the one its action rechecks: an active execution whose lease expired
// (attempt_timeout: expiry <= now), a delayed one come due (delayed_promoter:
// delay_until <= now), a non-terminal one past its deadline
// (execution_deadline: deadline <= now), a pending sibling cancel, and an
// edge whose upstream is terminal but not counted yet (a hop).
const overdueSQL = `
SELECT 'lease expired, not expired by attempt_timeout: ' || e.partition_key || ':' || e.execution_id
FROM ff_exec_core e JOIN ff_attempt a ON a.partition_key = e.partition_key AND a.execution_id = e.execution_id AND a.attempt_index = e.attempt_index
WHERE e.lifecycle_phase = 'active' AND a.lease_expires_at_ms <= $1
UNION ALL
SELECT 'delay due, not promoted: ' || partition_key || ':' || execution_id FROM ff_exec_core
WHERE lifecycle_phase = 'runnable' AND eligibility_state = 'not_eligible_until_time' AND delay_until_ms <= $1
UNION ALL
SELECT 'deadline passed, not expired: ' || partition_key || ':' || execution_id FROM ff_exec_core
WHERE lifecycle_phase <> 'terminal' AND deadline_at_ms <= $1
UNION ALL
SELECT 'sibling cancel pending: ' || partition_key || ':' || downstream_eid FROM ff_pending_cancel_groups
UNION ALL
SELECT 'flagged group: ' || partition_key || ':' || downstream_eid FROM ff_edge_group WHERE cancel_siblings_pending_flag
UNION ALL
SELECT 'hop not applied: ' || d.partition_key || ':' || d.upstream_eid || ' -> ' || d.downstream_eid
FROM ff_edge d JOIN ff_exec_core u ON u.partition_key = d.partition_key AND u.execution_id = d.upstream_eid
WHERE u.lifecycle_phase = 'terminal' AND d.upstream_outcome IS NULL
LIMIT 50`

// ReadQuiesce reads only what the quiesce waits on, a Snapshot with NowMs,
// Overdue and Pending: what ReadSnapshot reads last, without the rest.
func ReadQuiesce(ctx context.Context, pool *pgxpool.Pool) (*Snapshot, error) {
	snap := &Snapshot{}
	err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := snap.readNow(ctx, tx); err != nil {
			return err
		}
		return snap.readOverdue(ctx, tx)
	})
	if err != nil {
		return nil, err
	}
	return snap, nil
}

// readNow reads the database's clock as the snapshot's NowMs.
func (snap *Snapshot) readNow(ctx context.Context, tx pgx.Tx) error {
	return tx.QueryRow(ctx, `SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint`).Scan(&snap.NowMs)
}

func (snap *Snapshot) readOverdue(ctx context.Context, tx pgx.Tx) error {
	rows, err := tx.Query(ctx, overdueSQL, snap.NowMs)
	if err != nil {
		return err
	}
	if snap.Overdue, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return err
	}
	return tx.QueryRow(ctx, `SELECT count(*) FROM ff_exec_core
		WHERE lifecycle_phase = 'active' OR (lifecycle_phase = 'runnable' AND eligibility_state = 'not_eligible_until_time')`).Scan(&snap.Pending)
}
