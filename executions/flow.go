package executions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/actions"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Edge-group policy kinds.
const (
	PolicyAllOf  = "all_of"
	PolicyAnyOf  = "any_of"
	PolicyQuorum = "quorum"
)

// What happens to the still-running upstreams once a group is satisfied.
const (
	CancelRemaining = "cancel_remaining"
	LetRun          = "let_run"
)

// Group states: a group resolves exactly once.
const (
	GroupPending    = "pending"
	GroupSatisfied  = "satisfied"
	GroupImpossible = "impossible"
)

// EdgePolicy is how a downstream's upstream edges combine (stored as
// ff_edge_group.policy, in the upstream JSON form).
type EdgePolicy struct {
	Kind string `json:"kind"`
	// K of a quorum: how many upstreams must succeed.
	K int `json:"k,omitempty"`
	// OnSatisfied for any_of and quorum: CancelRemaining or LetRun.
	OnSatisfied string `json:"on_satisfied,omitempty"`
}

// AllOf: the downstream runs once every upstream succeeded; any failure
// skips it.
func AllOf() EdgePolicy { return EdgePolicy{Kind: PolicyAllOf} }

// AnyOf: the downstream runs once one upstream succeeded; it is skipped
// when all failed.
func AnyOf(onSatisfied string) EdgePolicy {
	return EdgePolicy{Kind: PolicyAnyOf, OnSatisfied: onSatisfied}
}

// Quorum: the downstream runs once k upstreams succeeded; it is skipped as
// soon as k successes are no longer possible.
func Quorum(k int, onSatisfied string) EdgePolicy {
	return EdgePolicy{Kind: PolicyQuorum, K: k, OnSatisfied: onSatisfied}
}

func (p EdgePolicy) validate(n int) error {
	switch p.Kind {
	case PolicyAllOf:
		if p.OnSatisfied != "" {
			return ff.Validationf("policy.on_satisfied", "all_of takes no on_satisfied")
		}
	case PolicyAnyOf, PolicyQuorum:
		if p.OnSatisfied != CancelRemaining && p.OnSatisfied != LetRun {
			return ff.Validationf("policy.on_satisfied", "%q: want %q or %q", p.OnSatisfied, CancelRemaining, LetRun)
		}
		if p.Kind == PolicyQuorum && (p.K < 1 || p.K > n) {
			return ff.Validationf("policy.k", "quorum k = %d with %d upstreams: want 1 ≤ k ≤ %d", p.K, n, n)
		}
		if p.Kind == PolicyAnyOf && p.K != 0 {
			return ff.Validationf("policy.k", "any_of takes no k")
		}
	default:
		return ff.Validationf("policy.kind", "%q: want %q, %q or %q", p.Kind, PolicyAllOf, PolicyAnyOf, PolicyQuorum)
	}
	return nil
}

// decodeEdgePolicy reads a stored policy; like upstream, an unknown or
// missing on_satisfied means cancel_remaining.
func decodeEdgePolicy(b []byte) EdgePolicy {
	p := EdgePolicy{Kind: PolicyAllOf}
	if len(b) > 0 {
		_ = json.Unmarshal(b, &p)
	}
	if p.Kind != PolicyAllOf && p.OnSatisfied != LetRun {
		p.OnSatisfied = CancelRemaining
	}
	return p
}

// counts are a group's counters.
type counts struct{ success, fail, skip, running int }

func (c counts) total() int { return c.success + c.fail + c.skip + c.running }

// evaluate returns GroupSatisfied, GroupImpossible or GroupPending.
func (p EdgePolicy) evaluate(c counts) string {
	n := c.total()
	switch p.Kind {
	case PolicyAnyOf:
		if c.success >= 1 {
			return GroupSatisfied
		}
		if n > 0 && c.fail+c.skip >= n {
			return GroupImpossible
		}
	case PolicyQuorum:
		if c.success >= p.K {
			return GroupSatisfied
		}
		if n-(c.fail+c.skip) < p.K {
			return GroupImpossible
		}
	default: // all_of
		if c.fail+c.skip > 0 {
			return GroupImpossible
		}
		if n > 0 && c.success == n {
			return GroupSatisfied
		}
	}
	return GroupPending
}

// count adds one upstream outcome to c: success, skipped, or anything else
// (failed, expired, cancelled) as a failure.
func (c *counts) count(outcome string) {
	if c.running > 0 {
		c.running--
	}
	switch outcome {
	case ff.OutcomeSuccess:
		c.success++
	case ff.OutcomeSkipped:
		c.skip++
	default:
		c.fail++
	}
}

// CreateFlow creates an empty flow and returns its id; executions join it
// with CreateParams.FlowID and are co-located in its partition.
func (s *Store) CreateFlow(ctx context.Context, id uuid.UUID) (uuid.UUID, error) {
	if id == uuid.Nil {
		id = uuid.New()
	}
	tag, err := s.pool.Exec(ctx, s.sql(`INSERT INTO {S}ff_flow_core (partition_key, flow_id, created_at_ms)
		VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`), s.parts.ForFlow(id), id, s.clock.NowMs())
	if err != nil {
		return uuid.Nil, dbutil.MapErr(err, "create flow")
	}
	if tag.RowsAffected() == 0 {
		return uuid.Nil, ff.Validationf("flow_id", "flow %s already exists", id)
	}
	return id, nil
}

// DependencyParams add the edges of one downstream.
type DependencyParams struct {
	FlowID     uuid.UUID
	Downstream ff.ExecutionID
	Upstreams  []ff.ExecutionID
	// Policy of the downstream's edge group (default AllOf).
	Policy EdgePolicy
}

// AddDependencies makes Downstream wait for Upstreams under Policy: it adds
// the edges upstream → downstream and fixes the downstream's edge group in
// one transaction. The downstream must be a runnable (not yet claimed)
// member of the flow with no edge group yet; it becomes blocked by
// dependencies (public state waiting_children) until the group resolves.
// Upstreams already terminal are counted at once. Cycles, unknown members,
// members outside the flow's partition, duplicate upstreams and bad
// policies are rejected with validation errors; a flow that does not exist
// is reported as ff.ErrNotFound, naming it, before its members are
// checked.
func (s *Store) AddDependencies(ctx context.Context, p DependencyParams) error {
	return s.inTx(ctx, "add dependencies", func(tx pgx.Tx) error { return s.AddDependenciesTx(ctx, tx, p) })
}

// AddDependenciesTx is AddDependencies inside the caller's transaction.
func (s *Store) AddDependenciesTx(ctx context.Context, tx pgx.Tx, p DependencyParams) error {
	if p.Policy.Kind == "" {
		p.Policy = AllOf()
	}
	if len(p.Upstreams) == 0 {
		return ff.Validationf("upstreams", "at least one upstream is required")
	}
	if err := p.Policy.validate(len(p.Upstreams)); err != nil {
		return err
	}
	for i, u := range p.Upstreams {
		if u == p.Downstream {
			return ff.Validationf("upstreams", "%s depends on itself", u)
		}
		if slices.Contains(p.Upstreams[:i], u) {
			return ff.Validationf("upstreams", "%s is listed twice", u)
		}
	}
	// The flow row serialises graph changes, so two concurrent additions
	// cannot close a cycle between them. It is looked up before the
	// members' partitions are checked against the flow's: a missing flow is
	// reported as missing whatever partition its id hashes to.
	part := s.parts.ForFlow(p.FlowID)
	var rev int64
	err := tx.QueryRow(ctx, s.sql(`UPDATE {S}ff_flow_core SET graph_revision = graph_revision + 1
		WHERE partition_key = $1 AND flow_id = $2 RETURNING graph_revision`), part, p.FlowID).Scan(&rev)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("flow %s: %w", p.FlowID, ff.ErrNotFound)
	}
	if err != nil {
		return dbutil.MapErr(err, "add dependencies: locking flow")
	}
	ups := make([]uuid.UUID, len(p.Upstreams))
	for i, u := range p.Upstreams {
		if u.Partition != part {
			return ff.Validationf("upstreams", "%s is not in flow %s's partition %d", u, p.FlowID, part)
		}
		ups[i] = u.UUID
	}
	if p.Downstream.Partition != part {
		return ff.Validationf("downstream", "%s is not in flow %s's partition %d", p.Downstream, p.FlowID, part)
	}
	// The downstream and its upstreams are locked together, in key order,
	// the order the edge-cancel dispatcher locks a group's members in: two
	// transactions that lock several executions then never wait for each
	// other in a circle. Holding the upstreams also holds off their
	// terminal transitions until these edges commit, so each upstream
	// outcome is counted either here or by the hop its transition
	// enqueues, never lost in between. What the decisions below need is
	// read after the locks are held (see lockRowSQL).
	if _, err := tx.Exec(ctx, s.sql(`SELECT FROM {S}ff_exec_core
		WHERE partition_key = $1 AND execution_id = ANY($2)
		ORDER BY execution_id FOR NO KEY UPDATE`), part, append([]uuid.UUID{p.Downstream.UUID}, ups...)); err != nil {
		return dbutil.MapErr(err, "add dependencies: locking the executions")
	}
	d, err := s.lock(ctx, tx, p.Downstream)
	if err != nil {
		return err
	}
	if d.flowID == nil || *d.flowID != p.FlowID {
		return ff.Validationf("downstream", "%s is not a member of flow %s", p.Downstream, p.FlowID)
	}
	if d.phase != ff.PhaseRunnable || d.eligibility == ff.EligibleBlockedByDeps {
		return ff.Validationf("downstream", "%s is %s/%s: dependencies can only be added before it first runs, once", p.Downstream, d.phase, d.eligibility)
	}
	var exists bool
	if err := tx.QueryRow(ctx, s.sql(`SELECT EXISTS (SELECT 1 FROM {S}ff_edge_group
		WHERE partition_key = $1 AND flow_id = $2 AND downstream_eid = $3)`), part, p.FlowID, p.Downstream.UUID).Scan(&exists); err != nil {
		return dbutil.MapErr(err, "add dependencies")
	}
	if exists {
		return ff.Validationf("downstream", "%s's edge group is already fixed", p.Downstream)
	}
	rows, err := tx.Query(ctx, s.sql(`SELECT c.execution_id, c.lifecycle_phase, `+actions.TerminalOutcomeSQL("c")+` FROM {S}ff_exec_core c
		WHERE c.partition_key = $1 AND c.execution_id = ANY($2) AND c.flow_id = $3`), part, ups, p.FlowID)
	if err != nil {
		return dbutil.MapErr(err, "add dependencies: reading upstreams")
	}
	outcomes := map[uuid.UUID]string{}
	found := 0
	for rows.Next() {
		var u uuid.UUID
		var phase string
		var outcome *string
		if err := rows.Scan(&u, &phase, &outcome); err != nil {
			rows.Close()
			return dbutil.MapErr(err, "add dependencies: reading upstreams")
		}
		found++
		if ff.IsTerminalPhase(phase) {
			if outcome == nil {
				rows.Close()
				return ff.Validationf("upstreams", "%s is terminal but its outcome is recorded nowhere (public_state names none and it has no completion event)",
					ff.ExecutionID{Partition: part, UUID: u})
			}
			outcomes[u] = *outcome
		}
	}
	if err := rows.Err(); err != nil {
		return dbutil.MapErr(err, "add dependencies: reading upstreams")
	}
	if found != len(ups) {
		return ff.Validationf("upstreams", "%d of %d upstreams are not members of flow %s", len(ups)-found, len(ups), p.FlowID)
	}
	var cycle bool
	if err := tx.QueryRow(ctx, s.sql(`
		WITH RECURSIVE reach(eid) AS (
		  SELECT downstream_eid FROM {S}ff_edge WHERE partition_key = $1 AND flow_id = $2 AND upstream_eid = $3
		  UNION
		  SELECT e.downstream_eid FROM {S}ff_edge e JOIN reach r ON e.upstream_eid = r.eid
		  WHERE e.partition_key = $1 AND e.flow_id = $2)
		SELECT EXISTS (SELECT 1 FROM reach WHERE eid = ANY($4))`), part, p.FlowID, p.Downstream.UUID, ups).Scan(&cycle); err != nil {
		return dbutil.MapErr(err, "add dependencies: cycle check")
	}
	if cycle {
		return ff.Validationf("upstreams", "adding them makes a cycle through %s", p.Downstream)
	}

	now := s.clock.NowMs()
	c := counts{running: len(ups)}
	b := &pgx.Batch{}
	for _, u := range ups {
		var outcome, resolved any
		if o, ok := outcomes[u]; ok {
			c.count(o)
			outcome, resolved = o, now
		}
		b.Queue(s.sql(`INSERT INTO {S}ff_edge (partition_key, flow_id, edge_id, upstream_eid, downstream_eid, policy_version,
			upstream_outcome, resolved_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`),
			part, p.FlowID, uuid.New(), u, p.Downstream.UUID, rev, outcome, resolved)
	}
	policyJSON, err := json.Marshal(p.Policy)
	if err != nil {
		return fmt.Errorf("add dependencies: encoding policy: %w", err)
	}
	b.Queue(s.sql(`INSERT INTO {S}ff_edge_group (partition_key, flow_id, downstream_eid, policy, k_target,
		success_count, fail_count, skip_count, running_count) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`),
		part, p.FlowID, p.Downstream.UUID, policyJSON, p.Policy.K, c.success, c.fail, c.skip, c.running)
	b.Queue(s.sql(`UPDATE {S}ff_exec_core SET eligibility_state = 'blocked_by_dependencies', public_state = 'waiting_children',
		blocking_reason = 'waiting_for_children' WHERE partition_key = $1 AND execution_id = $2`), part, p.Downstream.UUID)
	if err := sendBatch(ctx, tx, b, "add dependencies"); err != nil {
		return err
	}
	d.eligibility = ff.EligibleBlockedByDeps
	if state := p.Policy.evaluate(c); state != GroupPending {
		// Already resolved by upstreams that had finished: the winner is
		// unknown, so every non-terminal upstream is a sibling to cancel.
		_, err := s.resolveGroup(ctx, tx, d, p.FlowID, p.Policy, state, uuid.Nil, now)
		return err
	}
	return nil
}

// queueCompletion queues the completion event of a terminal transition. For
// a flow member it also finds the downstream edges and, with a Cascader,
// enqueues one hop per downstream in this transaction and marks the event
// dispatched (dispatched_at_ms, which upstream's dispatcher honours). Without
// a Cascader the event stays undispatched, and the dependency scanner
// finds the hops from the edges.
func (s *Store) queueCompletion(ctx context.Context, tx pgx.Tx, b *pgx.Batch, l *locked, outcome string, now int64) error {
	ev := outboxCompletion(l, outcome, now)
	if l.flowID != nil {
		n, enqueued, err := s.cascade(ctx, tx, l.id, *l.flowID, outcome)
		if err != nil {
			return err
		}
		if n == 0 || enqueued {
			ev.DispatchedAtMs = &now
		}
	}
	return s.out.QueueCompletion(b, ev)
}

// advance applies one hop: it counts the upstream's outcome in the
// downstream's edge group (once: replays are no-ops), and the first time the
// group resolves it acts on the downstream — satisfied: eligible to run
// (and, with cancel_remaining, the still-running siblings are flagged for
// the edge-cancel dispatcher); impossible: terminal skipped with a
// completion "skipped", which cascades further. A group resolves once; later
// outcomes are still counted but never re-resolve it.
//
// Upstream FlowFabric's dispatcher may run on the same tables: a hop first
// claims its upstream's undispatched completion events (see
// claimCompletions), and one whose events that dispatcher claimed first is
// recorded on its edge without being counted again (NoOp, or Processed when
// it records the group's resolution that the other count reached).
//
// Locks are waited for at most 2 s (SET LOCAL lock_timeout): a hop stuck
// behind a long lock returns a transient error (ff.ErrUnavailable, wrapping
// Postgres's lock_not_available) and its ff.advance job snoozes and tries again
// without spending an attempt, while the other hops of the same completion
// are jobs of their own. A hop is never carried only by its job: the
// upstream's edge stays without an outcome until this counts it, and the
// dependency scanner enqueues such hops again (see scanners.DependencyScanner).
func (s *Store) advance(ctx context.Context, tx pgx.Tx, h actions.Hop) (actions.Outcome, error) {
	if err := s.checkID(h.Upstream); err != nil {
		return "", err
	}
	part := h.Upstream.Partition
	// A hop waits on a busy group for a bounded time, then fails and is
	// retried by its job; the other hops are jobs of their own.
	if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '2s'"); err != nil {
		return "", dbutil.MapErr(err, "advance: setting lock_timeout")
	}
	var policyJSON []byte
	var c counts
	var state string
	err := tx.QueryRow(ctx, s.sql(`SELECT policy, success_count, fail_count, skip_count, running_count, group_state
		FROM {S}ff_edge_group WHERE partition_key = $1 AND flow_id = $2 AND downstream_eid = $3 FOR UPDATE`),
		part, h.FlowID, h.Downstream).Scan(&policyJSON, &c.success, &c.fail, &c.skip, &c.running, &state)
	groupGone := errors.Is(err, pgx.ErrNoRows)
	if err != nil && !groupGone {
		return "", dbutil.MapErr(err, "advance: locking edge group")
	}
	now := s.clock.NowMs()
	// The edge records the outcome even when its group is gone (deleted by
	// hand): nothing is left to advance, and an edge without its outcome
	// would stay due for the dependency scanner forever.
	tag, err := tx.Exec(ctx, s.sql(`UPDATE {S}ff_edge SET upstream_outcome = $5, resolved_at_ms = $6
		WHERE partition_key = $1 AND flow_id = $2 AND upstream_eid = $3 AND downstream_eid = $4 AND upstream_outcome IS NULL`),
		part, h.FlowID, h.Upstream.UUID, h.Downstream, h.Outcome, now)
	if err != nil {
		return "", dbutil.MapErr(err, "advance: marking edge")
	}
	if groupGone {
		return actions.Orphaned, nil
	}
	if tag.RowsAffected() == 0 {
		return actions.NoOp, nil
	}
	counted, err := s.claimCompletions(ctx, tx, h, now)
	if err != nil {
		return "", err
	}
	if !counted {
		c.count(h.Outcome)
		if _, err := tx.Exec(ctx, s.sql(`UPDATE {S}ff_edge_group SET success_count = $4, fail_count = $5, skip_count = $6,
			running_count = $7 WHERE partition_key = $1 AND flow_id = $2 AND downstream_eid = $3`),
			part, h.FlowID, h.Downstream, c.success, c.fail, c.skip, c.running); err != nil {
			return "", dbutil.MapErr(err, "advance: counting")
		}
	}
	// A hop a foreign dispatcher already counted changes no counter; it
	// still resolves a group that its count left satisfied or impossible
	// (the resolution is recorded once, and acting on the downstream again
	// finds it already acted on).
	done := actions.Processed
	if counted {
		done = actions.NoOp
	}
	if state != GroupPending {
		return done, nil
	}
	policy := decodeEdgePolicy(policyJSON)
	next := policy.evaluate(c)
	if next == GroupPending {
		return done, nil
	}
	d, err := s.lock(ctx, tx, ff.ExecutionID{Partition: part, UUID: h.Downstream})
	if errors.Is(err, ff.ErrNotFound) {
		return actions.Orphaned, nil
	}
	if err != nil {
		return "", err
	}
	winner := uuid.Nil
	if h.Outcome == ff.OutcomeSuccess {
		winner = h.Upstream.UUID
	}
	return s.resolveGroup(ctx, tx, d, h.FlowID, policy, next, winner, now)
}

// claimCompletions claims, for ffriver, the terminal completion events of
// h's upstream that nobody has dispatched yet (dispatched_at_ms, the claim
// upstream FlowFabric's dispatcher makes before it counts an outcome in the
// groups), and reports whether a foreign dispatcher claimed one first
// (dispatched_by 'foreign', migration 0012): its counts of the groups
// already hold this upstream, and the hop must not count it again. A claim
// in flight elsewhere is waited for (the event's row lock); the second
// statement reads what it committed.
func (s *Store) claimCompletions(ctx context.Context, tx pgx.Tx, h actions.Hop, now int64) (bool, error) {
	var foreign bool
	b := &pgx.Batch{}
	b.Queue(s.sql(`UPDATE {S}ff_completion_event SET dispatched_at_ms = $4, dispatched_by = 'ffriver'
		WHERE partition_key = $1 AND execution_id = $2 AND flow_id = $3 AND dispatched_at_ms IS NULL
		  AND outcome IN `+actions.TerminalOutcomes), h.Upstream.Partition, h.Upstream.UUID, h.FlowID, now)
	b.Queue(s.sql(`SELECT EXISTS (SELECT 1 FROM {S}ff_completion_event
		WHERE partition_key = $1 AND execution_id = $2 AND flow_id = $3 AND dispatched_by = 'foreign'
		  AND outcome IN `+actions.TerminalOutcomes+`)`), h.Upstream.Partition, h.Upstream.UUID, h.FlowID).QueryRow(func(r pgx.Row) error {
		return r.Scan(&foreign)
	})
	return foreign, sendBatch(ctx, tx, b, "advance: claiming the upstream's completion events")
}

// resolveGroup records the group's one-shot resolution and acts on the
// locked downstream.
func (s *Store) resolveGroup(ctx context.Context, tx pgx.Tx, d *locked, flowID uuid.UUID, policy EdgePolicy, state string, winner uuid.UUID, now int64) (actions.Outcome, error) {
	part := d.id.Partition
	if _, err := tx.Exec(ctx, s.sql(`UPDATE {S}ff_edge_group SET group_state = $4, resolved_at_ms = $5
		WHERE partition_key = $1 AND flow_id = $2 AND downstream_eid = $3`), part, flowID, d.id.UUID, state, now); err != nil {
		return "", dbutil.MapErr(err, "resolving edge group")
	}
	if state == GroupImpossible {
		if ff.IsTerminalPhase(d.phase) {
			return actions.Processed, nil
		}
		return actions.Processed, s.terminateLocked(ctx, tx, d, terminal{public: ff.PublicSkipped, outcome: ff.OutcomeSkipped,
			reason: "dependencies_impossible", by: "engine"}, now)
	}
	if d.phase == ff.PhaseRunnable && d.eligibility == ff.EligibleBlockedByDeps {
		if _, err := tx.Exec(ctx, s.sql(`UPDATE {S}ff_exec_core
			SET eligibility_state = CASE WHEN delay_until_ms > $3 THEN 'not_eligible_until_time' ELSE 'eligible_now' END,
			    public_state = CASE WHEN delay_until_ms > $3 THEN 'delayed' ELSE 'waiting' END,
			    blocking_reason = CASE WHEN delay_until_ms > $3 THEN 'waiting_for_delay' END
			WHERE partition_key = $1 AND execution_id = $2`), part, d.id.UUID, now); err != nil {
			return "", dbutil.MapErr(err, "releasing downstream")
		}
	}
	if policy.Kind == PolicyAllOf || policy.OnSatisfied != CancelRemaining {
		return actions.Processed, nil
	}
	rows, err := tx.Query(ctx, s.sql(`SELECT e.upstream_eid::text FROM {S}ff_edge e
		JOIN {S}ff_exec_core c ON c.partition_key = e.partition_key AND c.execution_id = e.upstream_eid
		WHERE e.partition_key = $1 AND e.flow_id = $2 AND e.downstream_eid = $3 AND e.upstream_eid <> $4
		  AND c.lifecycle_phase NOT IN ('terminal', 'cancelled')
		ORDER BY e.upstream_eid`), part, flowID, d.id.UUID, winner)
	if err != nil {
		return "", dbutil.MapErr(err, "snapshotting siblings")
	}
	members, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", dbutil.MapErr(err, "snapshotting siblings")
	}
	if len(members) == 0 {
		return actions.Processed, nil
	}
	b := &pgx.Batch{}
	b.Queue(s.sql(`UPDATE {S}ff_edge_group SET cancel_siblings_pending_flag = true, cancel_siblings_pending_members = $4
		WHERE partition_key = $1 AND flow_id = $2 AND downstream_eid = $3`), part, flowID, d.id.UUID, members)
	b.Queue(s.sql(`INSERT INTO {S}ff_pending_cancel_groups (partition_key, flow_id, downstream_eid, enqueued_at_ms)
		VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING`), part, flowID, d.id.UUID, now)
	return actions.Processed, sendBatch(ctx, tx, b, "flagging siblings")
}

// dispatchCompletion dispatches one completion event that its writer did
// not dispatch (an event inserted by plain SQL, or by a Store without a
// Cascader): it marks the event dispatched and enqueues one hop per
// downstream edge of its execution through the Store's Cascader, in tx. An
// event already dispatched, or of no flow, is a no-op; so is replaying it.
//
// The dependency scanner no longer needs it: it finds hops from the edges
// themselves (an edge of a terminal upstream without an outcome), whether or
// not anyone wrote or dispatched an event. It serves ff.dispatch_completion
// jobs queued by earlier versions, and callers of its own.
func (s *Store) dispatchCompletion(ctx context.Context, tx pgx.Tx, eventID int64) (actions.Outcome, error) {
	if s.cascader == nil {
		return "", fmt.Errorf("dispatch completion %d: the store has no Cascader", eventID)
	}
	var part int16
	var exec uuid.UUID
	var flowID *uuid.UUID
	var outcome string
	err := tx.QueryRow(ctx, s.sql(`UPDATE {S}ff_completion_event SET dispatched_at_ms = $2, dispatched_by = 'ffriver'
		WHERE event_id = $1 AND dispatched_at_ms IS NULL
		RETURNING partition_key, execution_id, flow_id, outcome`), eventID, s.clock.NowMs()).Scan(&part, &exec, &flowID, &outcome)
	if errors.Is(err, pgx.ErrNoRows) {
		return actions.NoOp, nil
	}
	if err != nil {
		return "", dbutil.MapErr(err, fmt.Sprintf("dispatch completion %d", eventID))
	}
	if flowID == nil {
		return actions.NoOp, nil
	}
	n, _, err := s.cascade(ctx, tx, ff.ExecutionID{Partition: part, UUID: exec}, *flowID, outcome)
	if err != nil {
		return "", fmt.Errorf("dispatch completion %d: %w", eventID, err)
	}
	if n == 0 {
		return actions.NoOp, nil
	}
	return actions.Processed, nil
}

// cascade finds the downstream edges of up that have not counted it yet and,
// with a Cascader, enqueues one hop each in tx. It returns how many there
// are and whether they were enqueued.
func (s *Store) cascade(ctx context.Context, tx pgx.Tx, up ff.ExecutionID, flowID uuid.UUID, outcome string) (int, bool, error) {
	rows, err := tx.Query(ctx, s.sql(`SELECT downstream_eid FROM {S}ff_edge
		WHERE partition_key = $1 AND flow_id = $2 AND upstream_eid = $3 AND upstream_outcome IS NULL`),
		up.Partition, flowID, up.UUID)
	if err != nil {
		return 0, false, dbutil.MapErr(err, "finding downstream edges of "+up.String())
	}
	downs, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return 0, false, dbutil.MapErr(err, "finding downstream edges of "+up.String())
	}
	if len(downs) == 0 || s.cascader == nil {
		if len(downs) > 0 && s.sweepOnly {
			s.warnSweepOnly(up)
		}
		return len(downs), false, nil
	}
	hops := make([]actions.Hop, len(downs))
	for i, d := range downs {
		hops[i] = actions.Hop{Upstream: up, FlowID: flowID, Downstream: d, Outcome: outcome}
	}
	if err := s.cascader.EnqueueHopsTx(ctx, tx, hops); err != nil {
		return 0, false, fmt.Errorf("enqueueing the cascade of %s: %w", up, err)
	}
	return len(downs), true, nil
}

// warnSweepOnly says, at most every sweepOnlyWarnEvery, that a flow member's
// hops were left to the dependency sweep because the Store has no Cascader.
func (s *Store) warnSweepOnly(up ff.ExecutionID) {
	now := time.Now().UnixMilli()
	last := s.sweepWarnedMs.Load()
	if last != 0 && now-last < sweepOnlyWarnEvery.Milliseconds() {
		return
	}
	if !s.sweepWarnedMs.CompareAndSwap(last, now) {
		return
	}
	s.logger.Warn("executions: this Store has no Cascader, so its flow members' hops wait for the dependency sweep "+
		"(about 15 s a hop instead of under a second): use the Store of ffriver.New(…).Store(), or set "+
		"executions.Config.FlowsBySweep if the sweep is meant (repeated at most every 10 minutes)",
		"schema", string(s.schema), "upstream", up.String())
}
