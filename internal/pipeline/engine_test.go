package pipeline_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ffriver/ffriver"
	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/pipeline"
	"github.com/ffriver/ffriver/jobs"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// expiredLeases creates n executions, one per lane, claims each with a
// one-second lease and moves the clock past it.
func (h *harness) expiredLeases(n int) []ff.ExecutionID {
	h.t.Helper()
	var ids []ff.ExecutionID
	for i := range n {
		lane := fmt.Sprintf("lane-%d", i)
		h.Create(executions.CreateParams{Lane: lane})
		ids = append(ids, h.ClaimOne(lane, time.Second).ID)
	}
	h.clock.Advance(2 * time.Second)
	return ids
}

// Many concurrent item jobs of a grouped kind, one lane: they share
// transactions, and still every execution transitions once, writes its
// event once, and has its own completed River job with its own output.
func TestGroupApplyThroughRiver(t *testing.T) {
	t.Parallel()
	const n = 300
	h := newHarness(t, ffriver.Config{Scanners: disabled(), GroupLanes: 1})
	ids := h.expiredLeases(n)
	var params []river.InsertManyParams
	for _, id := range ids {
		params = append(params, river.InsertManyParams{Args: jobs.ExpireAttemptArgs{ID: id}, InsertOpts: pipeline.ItemInsertOpts(ff.Filter{})})
	}
	c := h.client(true, func(rc *river.Config) {
		qc := rc.Queues[jobs.QueueApply]
		qc.MaxWorkers = 32
		rc.Queues[jobs.QueueApply] = qc
	})
	if _, err := c.InsertMany(h.ctx, params); err != nil {
		t.Fatal(err)
	}
	h.Await("every item job completed", func() bool {
		return h.Count(`SELECT count(*) FROM river_job WHERE kind = $1 AND state = 'completed'`, jobs.KindExpireAttempt) == n
	})
	for _, id := range ids {
		h.WantState(id, terminalExpired)
		h.WantEventStrings(id, []string{"acquired///1", "expired///1"}, []string{"expired//"})
	}
	if got := h.outcomes(jobs.KindExpireAttempt); len(got) != n || got[0] != "processed" || got[n-1] != "processed" {
		t.Fatalf("outcomes: %d recorded, first %q, last %q; want %d processed", len(got), got[0], got[len(got)-1], n)
	}
	// Transactions that wrote the expired events: fewer than the items, or
	// nothing was grouped.
	if tx := h.Count(`SELECT count(DISTINCT xact_id) FROM ff_lease_event WHERE event_type = 'expired'`); tx >= n {
		t.Errorf("%d transactions for %d items: no group formed", tx, n)
	}
}

// A process that dies after an item's commit but before River completes its
// job leaves the job running; the re-run (River's rescuer) finds the row
// already changed and records no_op: one transition, one event.
func TestItemRerunAfterCommitIsNoOp(t *testing.T) {
	t.Parallel()
	h := newHarness(t, ffriver.Config{Scanners: disabled()})
	id := h.expiredLeases(1)[0]
	c := h.client(true, nil)
	row := h.insertItem(c, jobs.ExpireAttemptArgs{ID: id})
	if got := outcomeOf(t, row); got != "processed" {
		t.Fatalf("first run: %s", got)
	}
	// As if the completion had never landed and the rescuer made the job
	// available again.
	h.Exec(`UPDATE river_job SET state = 'available', finalized_at = NULL, scheduled_at = now() WHERE id = $1`, row.ID)
	h.Await("the re-run to finish", func() bool {
		r, err := c.JobGet(h.ctx, row.ID)
		if err != nil {
			t.Fatal(err)
		}
		row = r
		return r.State == rivertype.JobStateCompleted && r.Attempt == 2
	})
	if got := outcomeOf(t, row); got != "no_op" {
		t.Errorf("re-run: %s, want no_op", got)
	}
	h.WantState(id, terminalExpired)
	h.WantEventStrings(id, []string{"acquired///1", "expired///1"}, []string{"expired//"})
}

// An item job left running by a process that died is re-queued by ff.rescue
// once it has run past the job timeout (plus RescueGrace), long before
// River's own rescuer would (here: an hour), and its execution transitions
// once.
func TestDeadProcessItemRescuedEarly(t *testing.T) {
	t.Parallel()
	h := newHarness(t, ffriver.Config{Scanners: disabled(), JobTimeout: time.Second})
	id := h.expiredLeases(1)[0]
	inserter := h.insertOnly()
	res, err := inserter.Insert(h.ctx, jobs.ExpireAttemptArgs{ID: id}, pipeline.ItemInsertOpts(ff.Filter{}))
	if err != nil {
		t.Fatal(err)
	}
	// Fetched by a process that then died.
	h.Exec(`UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now(), attempted_by = '{dead-process}' WHERE id = $1`, res.Job.ID)
	start := time.Now()
	c := h.client(true, func(rc *river.Config) { rc.RescueStuckJobsAfter = time.Hour })
	h.Await("the rescued item to complete", func() bool {
		row, err := c.JobGet(h.ctx, res.Job.ID)
		if err != nil {
			t.Fatal(err)
		}
		return row.State == rivertype.JobStateCompleted
	})
	if took := time.Since(start); took > time.Second+pipeline.RescueGrace+2*pipeline.RescueInterval+5*time.Second {
		t.Errorf("rescued after %s", took)
	}
	h.WantState(id, terminalExpired)
	h.WantEventStrings(id, []string{"acquired///1", "expired///1"}, []string{"expired//"})
	if n := h.Count(`SELECT count(*) FROM river_job WHERE id = $1 AND array_length(errors, 1) = 1 AND errors[1]->>'error' LIKE '%ff.rescue%'`, res.Job.ID); n != 1 {
		t.Error("the rescued job does not say who re-queued it")
	}
	if tags := h.Strings(`SELECT DISTINCT unnest(tags) FROM river_job WHERE kind = 'ff.rescue' ORDER BY 1`); !slices.Equal(tags, []string{pipeline.TagRescue}) {
		t.Errorf("ff.rescue tags %q, want %q", tags, pipeline.TagRescue)
	}
}
