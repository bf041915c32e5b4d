package pipeline_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/ffriver/ffriver"
	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/jobopts"
	"github.com/ffriver/ffriver/internal/pipeline"
	"github.com/ffriver/ffriver/jobs"
	"github.com/ffriver/ffriver/scanners"
	"github.com/ffriver/ffriver/workers"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
)

// disabled turns every built-in scanner's ticks off.
func disabled() map[string]workers.Settings {
	m := map[string]workers.Settings{}
	for _, b := range scanners.Builtins(scanners.BuiltinOptions{}) {
		s := b.Scanner
		m[s.Name()] = workers.Settings{Disabled: true}
	}
	return m
}

// insertItem inserts an item job as a scan would and waits until it is
// finalized, returning its row.
func (h *harness) insertItem(c *river.Client[pgx.Tx], args river.JobArgs) *rivertype.JobRow {
	h.t.Helper()
	res, err := c.Insert(h.ctx, args, pipeline.ItemInsertOpts(ff.Filter{}))
	if err != nil {
		h.t.Fatalf("insert %s: %v", args.Kind(), err)
	}
	var row *rivertype.JobRow
	h.Await(args.Kind()+" to finish", func() bool {
		row, err = c.JobGet(h.ctx, res.Job.ID)
		if err != nil {
			h.t.Fatal(err)
		}
		return row.FinalizedAt != nil
	})
	return row
}

func outcomeOf(t *testing.T, row *rivertype.JobRow) string {
	t.Helper()
	var o workers.Output
	if err := json.Unmarshal(row.Output(), &o); err != nil {
		t.Fatalf("job %d output: %v", row.ID, err)
	}
	return string(o.Outcome)
}

// TestItemOutcomes: a row that is not due, changed, vanished or locked
// elsewhere is an outcome, never an error; an invalid id is cancelled, not
// retried; an action run twice transitions once.
func TestItemOutcomes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, ffriver.Config{Scanners: disabled()})
	c := h.client(true, nil)

	live := h.Create(executions.CreateParams{Lane: "l1"})
	h.ClaimOne("l1", time.Hour)
	if got := outcomeOf(t, h.insertItem(c, jobs.ExpireAttemptArgs{ID: live})); got != "no_op" {
		t.Errorf("not due: %s", got)
	}

	exp := h.Create(executions.CreateParams{Lane: "l2"})
	h.ClaimOne("l2", time.Second)
	h.clock.Advance(2 * time.Second)
	if got := outcomeOf(t, h.insertItem(c, jobs.ExpireAttemptArgs{ID: exp, AttemptIndex: 7})); got != "no_op" {
		t.Errorf("other attempt: %s", got)
	}

	gone := ff.ExecutionID{Partition: 3, UUID: uuid.New()}
	if got := outcomeOf(t, h.insertItem(c, jobs.ExpireDeadlineArgs{ID: gone})); got != "orphaned" {
		t.Errorf("vanished: %s", got)
	}

	// Locked by someone else: skipped without waiting, nothing written, the
	// job snoozed (still in flight, no attempt spent), then processed once
	// the lock is gone.
	blocker, err := h.db.Pool.Begin(h.ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = blocker.Rollback(h.ctx) }) // a failing test must not leave the schema locked
	if _, err := blocker.Exec(h.ctx, `SELECT 1 FROM ff_exec_core WHERE partition_key = $1 AND execution_id = $2 FOR UPDATE`, exp.Partition, exp.UUID); err != nil {
		t.Fatal(err)
	}
	res, err := c.Insert(h.ctx, jobs.ExpireAttemptArgs{ID: exp}, pipeline.ItemInsertOpts(ff.Filter{}))
	if err != nil {
		t.Fatal(err)
	}
	h.Await("the locked item to snooze", func() bool {
		row, err := c.JobGet(h.ctx, res.Job.ID)
		if err != nil {
			t.Fatal(err)
		}
		// River's snooze gives the attempt back and re-queues the job.
		return row.FinalizedAt == nil && row.State != rivertype.JobStateRunning && len(row.Output()) > 0 &&
			outcomeOf(t, row) == "skipped_locked" && row.Attempt == 0
	})
	h.WantEventStrings(exp, []string{"acquired///1"}, nil)
	if err := blocker.Rollback(h.ctx); err != nil {
		t.Fatal(err)
	}
	var row *rivertype.JobRow
	h.Await("the snoozed item to finish", func() bool {
		row, err = c.JobGet(h.ctx, res.Job.ID)
		if err != nil {
			t.Fatal(err)
		}
		return row.FinalizedAt != nil
	})
	if got := outcomeOf(t, row); got != "processed" || row.State != rivertype.JobStateCompleted {
		t.Errorf("after unlock: %s, %s", row.State, got)
	}
	// Run twice: the second is a no-op and writes nothing.
	if got := outcomeOf(t, h.insertItem(c, jobs.ExpireAttemptArgs{ID: exp})); got != "no_op" {
		t.Errorf("second run: %s", got)
	}
	h.WantState(exp, terminalExpired)
	h.WantEventStrings(exp, []string{"acquired///1", "expired///1"}, []string{"expired//"})

	// An id outside the schema's partitions is a validation error: the job
	// is cancelled after one attempt instead of burning retries.
	bad := h.insertItem(c, jobs.PromoteDelayedArgs{ID: ff.ExecutionID{Partition: 999, UUID: uuid.New()}})
	if bad.State != rivertype.JobStateCancelled || bad.Attempt != 1 {
		t.Errorf("invalid id: state %s after %d attempts, want cancelled after 1", bad.State, bad.Attempt)
	}
	if bad.MaxAttempts != jobopts.ItemMaxAttempts {
		t.Errorf("item max attempts = %d", bad.MaxAttempts)
	}
}

// TestDuplicatesTransitionOnce: two working clients, every scan inserted
// three times and every item inserted three more times (uniqueness off)
// still give exactly one transition and one set of events per execution.
func TestDuplicatesTransitionOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t, ffriver.Config{Scanners: allFast(7)})
	var ids []ff.ExecutionID
	for i := range 40 {
		lane := "lane-" + string(rune('a'+i%20))
		ids = append(ids, h.Create(executions.CreateParams{Lane: lane}))
	}
	for i := range 20 {
		ls, err := h.st.Claim(h.ctx, executions.ClaimParams{Lane: "lane-" + string(rune('a'+i)), WorkerInstanceID: "w", LeaseTTL: time.Second, Max: 2})
		if err != nil || len(ls) != 2 {
			t.Fatalf("claim: %d, %v", len(ls), err)
		}
	}
	h.clock.Advance(2 * time.Second)

	// A client without unique enforcement inserts the duplicates.
	dupCfg := &river.Config{Schema: h.db.Name, Test: river.TestConfig{DisableUniqueEnforcement: true}, SkipUnknownJobCheck: true}
	dup, err := river.NewClient(riverpgxv5.New(h.db.Pool), dupCfg)
	if err != nil {
		t.Fatal(err)
	}
	var params []river.InsertManyParams
	parts := map[int16]bool{}
	for _, id := range ids {
		parts[id.Partition] = true
		for range 3 {
			params = append(params, river.InsertManyParams{Args: jobs.ExpireAttemptArgs{ID: id}, InsertOpts: pipeline.ItemInsertOpts(ff.Filter{})})
		}
	}
	for p := range parts {
		for range 3 {
			params = append(params, river.InsertManyParams{Args: jobs.ScanArgs{Scanner: scanners.AttemptTimeout, Partition: p, Batch: 7},
				InsertOpts: pipeline.ScanInsertOpts(ff.Filter{})})
		}
	}
	if _, err := dup.InsertMany(h.ctx, params); err != nil {
		t.Fatal(err)
	}
	h.client(true, nil)
	h.client(false, nil)
	for _, id := range ids {
		h.AwaitState(id, terminalExpired)
	}
	h.Await("settled", func() bool { return h.jobsSettled(jobs.KindExpireAttempt, jobs.KindScan) })
	for _, id := range ids {
		h.WantEventStrings(id, []string{"acquired///1", "expired///1"}, []string{"expired//"})
	}
	processed := 0
	for _, o := range h.outcomes(jobs.KindExpireAttempt) {
		if o == "processed" {
			processed++
		}
	}
	if processed != len(ids) {
		t.Errorf("%d processed item jobs, want %d", processed, len(ids))
	}
}

// TestEdgeCancelPipeline seeds groups with plain SQL: a flagged group is
// dispatched (siblings cancelled and fenced, events written), an orphan
// pending row is deleted, and a group whose flag is already cleared is left
// to the reconciler, which deletes its stale pending row.
func TestEdgeCancelPipeline(t *testing.T) {
	t.Parallel()
	h := newHarness(t, ffriver.Config{})
	flow := uuid.New()
	p := h.st.Partitions().ForFlow(flow)
	h.Exec(`INSERT INTO ff_flow_core (partition_key, flow_id) VALUES ($1, $2)`, p, flow)
	leased := h.Create(executions.CreateParams{Lane: "fl", FlowID: flow, Namespace: "ns"})
	h.ClaimOne("fl", time.Hour)
	waiting := h.Create(executions.CreateParams{Lane: "fl2", FlowID: flow})
	done := h.Create(executions.CreateParams{Lane: "fl3", FlowID: flow})
	if err := h.st.Cancel(h.ctx, done, executions.CancelParams{}); err != nil {
		t.Fatal(err)
	}
	down, stale, orphan := uuid.New(), uuid.New(), uuid.New()
	h.Exec(`INSERT INTO ff_edge_group (partition_key, flow_id, downstream_eid, cancel_siblings_pending_flag, cancel_siblings_pending_members)
		VALUES ($1, $2, $3, true, $4), ($1, $2, $5, false, '{}')`,
		p, flow, down, []string{leased.UUID.String(), waiting.UUID.String(), done.UUID.String(), "not-a-uuid"}, stale)
	h.Exec(`INSERT INTO ff_pending_cancel_groups (partition_key, flow_id, downstream_eid) VALUES ($1, $2, $3), ($1, $2, $4), ($1, $2, $5)`,
		p, flow, down, stale, orphan)

	h.client(true, nil)
	h.Await("pending rows drained", func() bool { return h.Count(`SELECT count(*) FROM ff_pending_cancel_groups`) == 0 })
	h.Await("settled", func() bool { return h.jobsSettled(jobs.KindCancelGroup, jobs.KindReconcileGroup, jobs.KindScan) })

	cancelled := state{"terminal", "unowned", "not_applicable", "attempt_terminal", "cancelled"}
	h.WantState(leased, cancelled)
	h.WantState(waiting, cancelled)
	h.WantEventStrings(leased, []string{"acquired/ns//1", "revoked/ns//1"}, []string{"cancelled/ns/"})
	h.WantEventStrings(waiting, nil, []string{"cancelled//"})
	h.WantEventStrings(done, nil, []string{"cancelled//"}) // from the operator cancel only
	for _, id := range []ff.ExecutionID{leased, waiting} {
		e := h.Get(id)
		if e.CancellationReason == nil || *e.CancellationReason != executions.SiblingCancelReason || e.CancelledBy == nil || *e.CancelledBy != "engine" {
			t.Errorf("%s: reason %v by %v", id, e.CancellationReason, e.CancelledBy)
		}
	}
	if n := h.Count(`SELECT count(*) FROM ff_edge_group WHERE cancel_siblings_pending_flag OR cardinality(cancel_siblings_pending_members) > 0`); n != 0 {
		t.Errorf("%d groups still flagged", n)
	}
	got := append(h.outcomes(jobs.KindCancelGroup), h.outcomes(jobs.KindReconcileGroup)...)
	// The orphan goes to whichever of dispatcher (orphaned) and reconciler
	// (sremmed_stale) gets it first.
	if !slices.Contains(got, "processed") || count(got, "sremmed_stale")+count(got, "orphaned") != 2 {
		t.Errorf("outcomes %v: want one processed and two of orphaned/sremmed_stale", got)
	}
}

// TestOutboxRetention deletes old events in batches and keeps recent ones.
func TestOutboxRetention(t *testing.T) {
	t.Parallel()
	h := newHarness(t, ffriver.Config{OutboxRetention: time.Hour, Scanners: map[string]workers.Settings{
		scanners.OutboxRetention: {Interval: time.Hour, Batch: 3}}})
	old, recent := t0-2*time.Hour.Milliseconds(), t0-time.Minute.Milliseconds()
	h.Exec(`INSERT INTO ff_lease_event (execution_id, event_type, occurred_at_ms, partition_key)
		SELECT gen_random_uuid()::text, 'acquired', CASE WHEN i <= 8 THEN $1::bigint ELSE $2::bigint END, 0 FROM generate_series(1, 10) i`, old, recent)
	h.Exec(`INSERT INTO ff_completion_event (partition_key, execution_id, outcome, occurred_at_ms)
		SELECT 0, gen_random_uuid(), 'success', CASE WHEN i <= 4 THEN $1::bigint ELSE $2::bigint END FROM generate_series(1, 6) i`, old, recent)
	h.client(true, nil)
	h.Await("old events deleted", func() bool {
		return h.Count(`SELECT count(*) FROM ff_lease_event`) == 2 && h.Count(`SELECT count(*) FROM ff_completion_event`) == 2
	})
	h.Await("settled", func() bool { return h.jobsSettled(jobs.KindTrimOutbox, jobs.KindScan) })
	if n := h.Count(`SELECT count(*) FROM ff_lease_event WHERE occurred_at_ms = $1`, recent); n != 2 {
		t.Errorf("%d recent lease events kept, want 2", n)
	}
	// lease: 3+3+2 → two full batches continued; completion: 3+1 → one.
	if n := h.Count(`SELECT count(*) FROM river_job WHERE kind = 'ff.trim_outbox' AND (metadata->'output'->'detail'->>'continued')::bool`); n != 3 {
		t.Errorf("%d trims continued, want 3", n)
	}
	// A continuation keeps the tags of the trim it continues.
	if n := h.Count(`SELECT count(*) FROM river_job WHERE kind = 'ff.trim_outbox' AND NOT ('item' = ANY(tags) AND 'scanner-outbox_retention' = ANY(tags))`); n != 0 {
		t.Errorf("%d trim jobs without the item and scanner tags", n)
	}
}

// TestExecutionRetention: through the pipeline, terminal executions past
// the retention are removed in batches with their attempts, a flow only
// whole once every member is past it; a flow with a member still running
// or recently terminal stays whole, as do recent and live executions.
func TestExecutionRetention(t *testing.T) {
	t.Parallel()
	h := newHarness(t, ffriver.Config{ExecutionRetention: time.Hour, Scanners: map[string]workers.Settings{
		scanners.ExecutionRetention: {Interval: time.Hour, Batch: 2}}})
	var old []ff.ExecutionID
	for range 5 {
		id := h.Create(executions.CreateParams{Lane: "solo"})
		if err := h.st.Complete(h.ctx, h.ClaimOne("solo", time.Hour), nil); err != nil {
			t.Fatal(err)
		}
		old = append(old, id)
	}
	member := func(f uuid.UUID, cancel bool) ff.ExecutionID {
		id := h.Create(executions.CreateParams{FlowID: f, Lane: "member"})
		if cancel {
			if err := h.st.Cancel(h.ctx, id, executions.CancelParams{}); err != nil {
				t.Fatal(err)
			}
		}
		return id
	}
	gone := h.Flow()
	old = append(old, member(gone, true), member(gone, true))
	running := h.Flow()
	runningOld, runningLive := member(running, true), member(running, false)
	partly := h.Flow()
	partlyOld := member(partly, true)
	live := h.Create(executions.CreateParams{Lane: "live"})
	h.clock.Advance(2 * time.Hour)
	partlyRecent := member(partly, true)
	recent := h.Create(executions.CreateParams{Lane: "solo"})
	if err := h.st.Cancel(h.ctx, recent, executions.CancelParams{}); err != nil {
		t.Fatal(err)
	}

	// Due counts what the removals will remove: no member of a flow that
	// stays.
	due, err := scanners.NewExecutionRetentionScanner(time.Hour).Due(h.ctx, h.db.Pool, workers.DueRequest{Store: h.st, NowMs: h.clock.NowMs()})
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, d := range due {
		n += d.Count
	}
	if n != int64(len(old)) {
		t.Errorf("due %d (%+v), want %d", n, due, len(old))
	}
	h.client(true, nil)
	h.Await("old executions removed", func() bool {
		return h.Count(`SELECT count(*) FROM ff_exec_removed`) == len(old)
	})
	h.Await("settled", func() bool { return h.jobsSettled(jobs.KindRemoveExecutions, jobs.KindScan) })
	for _, id := range old {
		if _, err := h.st.Get(h.ctx, id); !errors.As(err, new(*ff.RemovedError)) {
			t.Errorf("Get(%s) = %v, want removed by retention", id, err)
		}
	}
	if n := h.Count(`SELECT count(*) FROM ff_attempt WHERE execution_id = ANY($1)`, ids(old)); n != 0 {
		t.Errorf("%d attempts of removed executions left", n)
	}
	for _, id := range []ff.ExecutionID{runningOld, runningLive, partlyOld, partlyRecent, live, recent} {
		h.Get(id)
	}
	if n := h.Count(`SELECT count(*) FROM ff_flow_core WHERE flow_id = ANY($1)`, []uuid.UUID{gone, running, partly}); n != 2 {
		t.Errorf("%d of the three flow rows left, want the two not removable", n)
	}
	// The five solo ones share a partition: batches of 2, 2, 1.
	if n := h.Count(`SELECT count(*) FROM river_job WHERE kind = 'ff.remove_executions' AND (args->>'partition')::int = $1
		AND (metadata->'output'->'detail'->>'continued')::bool`, old[0].Partition); n < 2 {
		t.Errorf("%d removals of the solo partition continued, want at least 2", n)
	}
	if n := h.Count(`SELECT count(*) FROM river_job WHERE kind = 'ff.remove_executions' AND NOT ('item' = ANY(tags) AND 'scanner-execution_retention' = ANY(tags))`); n != 0 {
		t.Errorf("%d removal jobs without the item and scanner tags", n)
	}
}

func ids(es []ff.ExecutionID) []uuid.UUID {
	out := make([]uuid.UUID, len(es))
	for i, e := range es {
		out[i] = e.UUID
	}
	return out
}

// TestTickWithoutScannerIsCancelled: a tick naming a scanner this process
// does not know is cancelled with a clear error, not retried.
func TestTickWithoutScannerIsCancelled(t *testing.T) {
	t.Parallel()
	h := newHarness(t, ffriver.Config{Scanners: disabled()})
	c := h.client(true, nil)
	res, err := c.Insert(context.Background(), jobs.TickArgs{Scanner: "nope", Batch: 1}, pipeline.Of(h.ff).TickInsertOpts())
	if err != nil {
		t.Fatal(err)
	}
	h.Await("tick finalized", func() bool {
		row, err := c.JobGet(h.ctx, res.Job.ID)
		return err == nil && row.State == rivertype.JobStateCancelled
	})
}

func count(ss []string, s string) int {
	n := 0
	for _, x := range ss {
		if x == s {
			n++
		}
	}
	return n
}

// TestItemKilledMidTransactionLeavesNothing: a dispatch whose job times out
// while it waits for a member's row lock (after cancelling another member in
// the same transaction) rolls back completely; River retries it, and once
// the lock is gone the group is dispatched exactly once.
func TestItemKilledMidTransactionLeavesNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t, ffriver.Config{Scanners: disabled(), JobTimeout: 300 * time.Millisecond})
	c := h.client(true, nil)
	flow := uuid.New()
	p := h.st.Partitions().ForFlow(flow)
	h.Exec(`INSERT INTO ff_flow_core (partition_key, flow_id) VALUES ($1, $2)`, p, flow)
	first := h.Create(executions.CreateParams{Lane: "a", FlowID: flow})
	second := h.Create(executions.CreateParams{Lane: "b", FlowID: flow})
	down := uuid.New()
	h.Exec(`INSERT INTO ff_edge_group (partition_key, flow_id, downstream_eid, cancel_siblings_pending_flag, cancel_siblings_pending_members)
		VALUES ($1, $2, $3, true, $4)`, p, flow, down, []string{first.UUID.String(), second.UUID.String()})
	h.Exec(`INSERT INTO ff_pending_cancel_groups (partition_key, flow_id, downstream_eid) VALUES ($1, $2, $3)`, p, flow, down)

	blocker, err := h.db.Pool.Begin(h.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := blocker.Exec(h.ctx, `SELECT 1 FROM ff_exec_core WHERE partition_key = $1 AND execution_id = $2 FOR UPDATE`, second.Partition, second.UUID); err != nil {
		t.Fatal(err)
	}
	res, err := c.Insert(h.ctx, jobs.CancelGroupArgs{GroupKey: jobs.GroupKey{Partition: p, FlowID: flow, DownstreamEID: down}}, pipeline.ItemInsertOpts(ff.Filter{}))
	if err != nil {
		t.Fatal(err)
	}
	h.Await("the first attempt to fail", func() bool {
		row, err := c.JobGet(h.ctx, res.Job.ID)
		return err == nil && len(row.Errors) > 0
	})
	waiting := state{"runnable", "unowned", "eligible_now", "pending_first_attempt", "waiting"}
	h.WantState(first, waiting) // cancelled inside the rolled-back transaction only
	h.WantEventStrings(first, nil, nil)
	if n := h.Count(`SELECT count(*) FROM ff_pending_cancel_groups`); n != 1 {
		t.Fatalf("%d pending rows after the failed attempt", n)
	}
	_ = blocker.Rollback(h.ctx)

	h.Await("the retry to complete", func() bool {
		row, err := c.JobGet(h.ctx, res.Job.ID)
		return err == nil && row.State == rivertype.JobStateCompleted
	})
	cancelled := state{"terminal", "unowned", "not_applicable", "attempt_terminal", "cancelled"}
	h.WantState(first, cancelled)
	h.WantState(second, cancelled)
	h.WantEventStrings(first, nil, []string{"cancelled//"})
	h.WantEventStrings(second, nil, []string{"cancelled//"})
}
