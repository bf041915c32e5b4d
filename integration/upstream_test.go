package integration

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/ffriver/ffriver/internal/upstream"
	"github.com/ffriver/ffriver/subscribe"
	"github.com/google/uuid"
)

// TestUpstreamRowsOnTheBinaries: every row shape FlowFabric's Postgres
// backend (ff-backend-postgres v0.15.0) writes — created with and without a
// policy, claimed handle-based and typed, renewed, completed both ways,
// failed with and without a retry, with a typed retry's delay, delayed,
// flows whose any-of and quorum groups upstream's own dispatch counted and
// flagged, and upstream's outbox rows — written by its statements
// (internal/upstream) while ffscheduler and ffworker run, ends where
// upstream would put it: expired, retried, promoted, left alone, cancelled,
// each outcome counted once, every event streamed once.
func TestUpstreamRowsOnTheBinaries(t *testing.T) {
	t.Parallel()
	testdb.Reserve(t, testdb.BinariesConns+2) // its binaries and a stream (docs/development.md)
	db := testdb.New(t, nil)
	sql := &fftest.DB{TB: t, Ctx: t.Context(), Pool: db.Pool}
	schedBin, workerBin := buildPipelineBinaries(t)
	ctx := t.Context()
	st, err := executions.Open(ctx, db.Pool, executions.Config{Schema: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	now := func() int64 { return time.Now().UnixMilli() }
	check := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	hour := time.Hour.Milliseconds()
	retryOnce := []byte(`{"retry_policy": {"max_retries": 1, "backoff": {"type": "fixed", "delay_ms": 1000}}}`)
	// exec creates one execution in its own lane (so the handle-based
	// claim, which takes the oldest of a lane, takes it), runnable as
	// upstream's tests seed one.
	exec := func(lane string, policy []byte, deadline *int64) upstream.ID {
		t.Helper()
		id := upstream.ID{Partition: st.PartitionFor(uuid.Nil, lane), UUID: uuid.New()}
		check("create "+lane, upstream.Create(ctx, db.Pool, upstream.Exec{ID: id, Lane: lane, Policy: policy, DeadlineAtMs: deadline, Runnable: true}, now()))
		return id
	}
	claim := func(id upstream.ID, lane string, ttl int64) upstream.Handle {
		t.Helper()
		h, err := upstream.Claim(ctx, db.Pool, id.Partition, lane, "w", ttl, now())
		check("claim "+lane, err)
		return h
	}
	claimTyped := func(id upstream.ID, lane string, ttl int64) upstream.Handle {
		t.Helper()
		check("grant "+lane, upstream.IssueGrant(ctx, db.Pool, id, lane, "w", now()+60_000, now()))
		h, err := upstream.ClaimTyped(ctx, db.Pool, id, "w", 0, ttl, now())
		check("typed claim "+lane, err)
		return h
	}

	// Leases that run out: a create without a policy (no retries) and one
	// with a retry, claimed handle-based; one claimed typed. One renewed
	// far ahead, which must not expire.
	noPolicy := exec("no-policy", nil, nil)
	claim(noPolicy, "no-policy", 500)
	withPolicy := exec("with-policy", retryOnce, nil)
	claim(withPolicy, "with-policy", 500)
	typed := exec("typed", nil, nil)
	claimTyped(typed, "typed", 500)
	renewed := exec("renewed", nil, nil)
	check("renew", upstream.Renew(ctx, db.Pool, claim(renewed, "renewed", 500), hour, now()))

	// Ends written by upstream itself: complete both ways, fail with and
	// without a retry, a typed fail with a retry delayed by a second, and
	// a delay of a second on an execution with a deadline an hour away.
	done := exec("complete", nil, nil)
	check("complete", upstream.Complete(ctx, db.Pool, claim(done, "complete", hour), now()))
	doneTyped := exec("complete-typed", nil, nil)
	check("typed complete", upstream.CompleteTyped(ctx, db.Pool, claimTyped(doneTyped, "complete-typed", hour), now()))
	failRetry := exec("fail-retry", nil, nil)
	check("fail", upstream.Fail(ctx, db.Pool, claim(failRetry, "fail-retry", hour), true, now()))
	failed := exec("fail", nil, nil)
	check("fail", upstream.Fail(ctx, db.Pool, claim(failed, "fail", hour), false, now()))
	failDelay := exec("fail-delay", retryOnce, nil)
	check("typed fail", upstream.FailTyped(ctx, db.Pool, claimTyped(failDelay, "fail-delay", hour), 1, 1000, now()))
	deadline := now() + hour
	delayed := exec("delay", nil, &deadline)
	check("delay", upstream.Delay(ctx, db.Pool, claim(delayed, "delay", hour), now()+1000, now()))

	// Flows: an upstream completes and upstream's dispatch counts it,
	// satisfies the group and flags the still-running siblings; ffriver's
	// dispatcher cancels them (fenced, with their events) and its hops
	// count each outcome once.
	type flowCase struct {
		flow uuid.UUID
		down upstream.ID
		ups  int
	}
	var flows []flowCase
	for _, fc := range []struct {
		lane, policy string
		ups          int
		typed        bool
	}{
		{"flow-any", `{"kind": "any_of", "on_satisfied": "cancel_remaining"}`, 3, false},
		{"flow-quorum", `{"kind": "quorum", "k": 1, "on_satisfied": "cancel_remaining"}`, 2, true},
	} {
		flow := uuid.New()
		part := st.PartitionFor(flow, fc.lane)
		check("flow", upstream.CreateFlow(ctx, db.Pool, part, flow, now()))
		var ups []uuid.UUID
		var first upstream.ID
		for i := range fc.ups + 1 {
			id := upstream.ID{Partition: part, UUID: uuid.New()}
			check("flow member", upstream.Create(ctx, db.Pool, upstream.Exec{ID: id, Lane: fc.lane + "-" + string(rune('a'+i)), FlowID: &flow, Runnable: true}, now()))
			if i < fc.ups {
				ups = append(ups, id.UUID)
				if i == 0 {
					first = id
				}
				continue
			}
			check("depend", upstream.Depend(ctx, db.Pool, part, flow, id.UUID, ups, []byte(fc.policy), now()))
			flows = append(flows, flowCase{flow: flow, down: id, ups: fc.ups})
		}
		// The other upstreams hold leases when their siblings are cancelled.
		for i := 1; i < fc.ups; i++ {
			claim(upstream.ID{Partition: part, UUID: ups[i]}, fc.lane+"-"+string(rune('a'+i)), hour)
		}
		var h upstream.Handle
		if fc.typed {
			h = claimTyped(first, fc.lane+"-a", hour)
			check("typed complete", upstream.CompleteTyped(ctx, db.Pool, h, now()))
		} else {
			h = claim(first, fc.lane+"-a", hour)
			check("complete", upstream.Complete(ctx, db.Pool, h, now()))
		}
		var ev int64
		check("event", db.Pool.QueryRow(ctx, `SELECT event_id FROM ff_completion_event WHERE execution_id = $1`, first.UUID).Scan(&ev))
		n, err := upstream.Dispatch(ctx, db.Pool, ev, now())
		check("upstream dispatch", err)
		if n != 1 {
			t.Fatalf("%s: upstream's dispatch advanced %d groups, want 1", fc.lane, n)
		}
	}

	// Every event is streamed once, upstream's rows with ffriver's.
	var mu sync.Mutex
	seen := map[string]int{}
	deliver := func(table string, id int64) {
		mu.Lock()
		defer mu.Unlock()
		seen[fmt.Sprint(table, id)]++
	}
	opts := subscribe.Options{Schema: db.Schema, Start: subscribe.StartBeginning}
	leases, err := subscribe.Leases(ctx, db.Pool, opts)
	check("subscribe leases", err)
	t.Cleanup(leases.Close)
	completions, err := subscribe.Completions(ctx, db.Pool, opts)
	check("subscribe completions", err)
	t.Cleanup(completions.Close)
	go func() {
		for ev, err := range leases.All(ctx) {
			if err == nil {
				deliver("lease", ev.EventID)
			}
		}
	}()
	go func() {
		for ev, err := range completions.All(ctx) {
			if err == nil {
				deliver("completion", ev.EventID)
			}
		}
	}()

	startProc(t, "ffscheduler", schedBin, append(dbArgs(db), "--ui-addr", "off")...)
	startProc(t, "ffworker", workerBin, dbArgs(db)...)

	state := func(id upstream.ID) (phase, public string, attempt int32) {
		check("state", db.Pool.QueryRow(ctx, `SELECT lifecycle_phase, public_state, attempt_index FROM ff_exec_core
			WHERE partition_key = $1 AND execution_id = $2`, id.Partition, id.UUID).Scan(&phase, &public, &attempt))
		return phase, public, attempt
	}
	awaitState := func(what string, id upstream.ID, phase, public string) {
		t.Helper()
		fftest.Await(t, 90*time.Second, what+" "+phase+"/"+public, func() bool {
			p, pub, _ := state(id)
			return p == phase && pub == public
		})
	}
	awaitState("a lease of a create without a policy expires, no retry", noPolicy, ff.PhaseTerminal, ff.PublicExpired)
	awaitState("a lease with a retry left expires into a retry", withPolicy, ff.PhaseRunnable, ff.PublicWaiting)
	if _, _, a := state(withPolicy); a != 1 {
		t.Errorf("the retry is attempt %d, want 1", a)
	}
	awaitState("a typed claim's lease expires", typed, ff.PhaseTerminal, ff.PublicExpired)
	awaitState("a typed retry's delay is promoted", failDelay, ff.PhaseRunnable, ff.PublicWaiting)
	awaitState("a delay is promoted", delayed, ff.PhaseRunnable, ff.PublicWaiting)
	if n := sql.Count(`SELECT count(*) FROM ff_exec_core WHERE execution_id = $1 AND deadline_at_ms = $2 AND delay_until_ms IS NULL`,
		delayed.UUID, deadline); n != 1 {
		t.Errorf("the delayed execution's deadline is not kept")
	}
	for _, f := range flows {
		fftest.Await(t, 90*time.Second, "every edge of the flow counted", func() bool {
			return sql.Count(`SELECT count(*) FROM ff_edge WHERE flow_id = $1 AND upstream_outcome IS NULL`, f.flow) == 0
		})
		var success, fail int
		check("group", db.Pool.QueryRow(ctx, `SELECT success_count, fail_count FROM ff_edge_group WHERE flow_id = $1`, f.flow).Scan(&success, &fail))
		if success != 1 || fail != f.ups-1 {
			t.Errorf("flow %s: %d successes and %d failures counted, want 1 and %d", f.flow, success, fail, f.ups-1)
		}
		if n := sql.Count(`SELECT count(*) FROM ff_exec_core c WHERE flow_id = $1 AND public_state = 'cancelled'
			AND EXISTS (SELECT 1 FROM ff_completion_event e WHERE e.execution_id = c.execution_id AND e.outcome = 'cancelled')
			AND EXISTS (SELECT 1 FROM ff_lease_event l WHERE l.execution_id = c.execution_id::text AND l.event_type = 'revoked')`, f.flow); n != f.ups-1 {
			t.Errorf("flow %s: %d siblings cancelled with their events, want %d", f.flow, n, f.ups-1)
		}
		if p, _, _ := state(f.down); p != ff.PhaseRunnable {
			t.Errorf("flow %s: downstream %s, want runnable", f.flow, p)
		}
	}
	// Left where upstream left them.
	for _, c := range []struct {
		id            upstream.ID
		phase, public string
	}{
		{renewed, ff.PhaseActive, "running"},
		{done, ff.PhaseTerminal, "running"},
		{doneTyped, ff.PhaseTerminal, ff.PublicCompleted},
		{failRetry, ff.PhaseRunnable, "running"},
		{failed, ff.PhaseTerminal, "running"},
	} {
		if p, pub, _ := state(c.id); p != c.phase || pub != c.public {
			t.Errorf("%v: %s/%s, want %s/%s", c.id, p, pub, c.phase, c.public)
		}
	}
	fftest.Await(t, 60*time.Second, "every outbox row streamed", func() bool {
		rows := sql.Count(`SELECT (SELECT count(*) FROM ff_lease_event) + (SELECT count(*) FROM ff_completion_event)`)
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == rows
	})
	mu.Lock()
	defer mu.Unlock()
	for ev, n := range seen {
		if n != 1 {
			t.Errorf("event %s streamed %d times", ev, n)
		}
	}
}
