package pipeline_test

import (
	"testing"
	"time"

	"github.com/ffriver/ffriver"
	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/pipeline"
	"github.com/ffriver/ffriver/jobs"
	"github.com/ffriver/ffriver/scanners"
	"github.com/ffriver/ffriver/workers"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

// A tick left "running" by a process that died (River's rescuer only gives
// up on it after --rescue-after) does not stall its scanner: the next ticks
// still run and the due work is done.
func TestStuckTickDoesNotStallItsScanner(t *testing.T) {
	t.Parallel()
	h := newHarness(t, ffriver.Config{Scanners: map[string]workers.Settings{
		scanners.AttemptTimeout: {Interval: 200 * time.Millisecond, Batch: 1000},
	}})
	// A tick of attempt_timeout, inserted as the periodic job inserts it,
	// then marked running by a process that no longer exists.
	args, err := pipeline.Of(h.ff).TickArgs(scanners.AttemptTimeout)
	if err != nil {
		t.Fatal(err)
	}
	inserter, err := river.NewClient(riverpgxv5.New(h.db.Pool), &river.Config{Schema: h.db.Name})
	if err != nil {
		t.Fatal(err)
	}
	res, err := inserter.Insert(h.ctx, args, pipeline.Of(h.ff).TickInsertOpts())
	if err != nil {
		t.Fatal(err)
	}
	h.Exec(`UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now(), attempted_by = '{dead-process}' WHERE id = $1`, res.Job.ID)

	id := h.Create(executions.CreateParams{})
	h.ClaimOne("lane-a", time.Millisecond)
	h.clock.Advance(time.Second)
	h.client(true, func(rc *river.Config) { rc.RescueStuckJobsAfter = time.Hour })
	h.AwaitState(id, state{"terminal", "unowned", "not_applicable", "attempt_terminal", "expired"})
	if n := h.Count(`SELECT count(*) FROM river_job WHERE id = $1 AND state = 'running'`, res.Job.ID); n != 1 {
		t.Fatalf("the stuck tick was rescued (%d running); the test proves nothing", n)
	}
}

// A tick counts each partition's due items up to its batch, and says when
// it stopped there (issue 27, item 3): 12 expired leases in one partition
// and 3 in another, batch 5, are "at least 8" in the tick's output, over 2
// partitions, and every lease is still expired (the full partition gets a
// scan of its own, which continues past its batch).
func TestTickCountsUpToItsBatch(t *testing.T) {
	t.Parallel()
	over := disabled()
	over[scanners.AttemptTimeout] = fast(5)
	h := newHarness(t, ffriver.Config{Scanners: over})
	var ids []ff.ExecutionID
	for lane, n := range map[string]int{"full": 12, "few": 3} {
		for range n {
			h.Create(executions.CreateParams{Lane: lane})
			ids = append(ids, h.ClaimOne(lane, time.Second).ID)
		}
	}
	if ids[0].Partition == ids[len(ids)-1].Partition {
		t.Fatal("both lanes share a partition; the test proves nothing")
	}
	h.clock.Advance(2 * time.Second)
	h.client(true, nil)
	h.Await("every lease expired", func() bool {
		return h.Count(`SELECT count(*) FROM ff_lease_event WHERE event_type = 'expired'`) == len(ids)
	})
	var first bool
	for _, o := range h.outputs("ff.tick") {
		if n := o["due_items"].(float64); n > 8 {
			t.Errorf("tick output %v: more than a batch counted in a partition", o)
		}
		if o["due_items"] == 8.0 && o["due_items_at_least"] == true && o["due_partitions"] == 2.0 {
			first = true
		}
	}
	if !first {
		t.Errorf("no tick output says at least 8 due over 2 partitions: %v", h.outputs("ff.tick"))
	}
}

// A tick whose scan River skips as the duplicate of a scan running now
// (which may have read its candidates before the tick's items came due;
// here one left running by a process that died) inserts a scan behind it:
// the expired leases are acted on without waiting for the running scan to
// end or be rescued. The scan behind fills its batch of one and continues
// as any scan does, not as a second scan behind.
func TestTickScansBehindARunningScan(t *testing.T) {
	t.Parallel()
	over := disabled()
	over[scanners.AttemptTimeout] = fast(1)
	h := newHarness(t, ffriver.Config{Scanners: over})
	id := h.Create(executions.CreateParams{})
	h.ClaimOne("lane-a", time.Millisecond)
	other := h.Create(executions.CreateParams{}) // the same lane: the same partition
	h.ClaimOne("lane-a", time.Millisecond)

	// The scan of the lease's partition, as the tick inserts it, running
	// in a process that no longer exists.
	args, err := pipeline.Of(h.ff).TickArgs(scanners.AttemptTimeout)
	if err != nil {
		t.Fatal(err)
	}
	tick := args.(jobs.TickArgs)
	scan := jobs.ScanArgs{Scanner: tick.Scanner, Partition: id.Partition, Batch: tick.Batch, Params: tick.Params, Filter: tick.Filter,
		SweepMs: tick.SweepMs}
	inserter, err := river.NewClient(riverpgxv5.New(h.db.Pool), &river.Config{Schema: h.db.Name})
	if err != nil {
		t.Fatal(err)
	}
	res, err := inserter.Insert(h.ctx, scan, pipeline.ScanInsertOpts(ff.Filter{}))
	if err != nil {
		t.Fatal(err)
	}
	h.Exec(`UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now(), attempted_by = '{dead-process}' WHERE id = $1`, res.Job.ID)

	h.clock.Advance(time.Second)
	h.client(true, func(rc *river.Config) { rc.RescueStuckJobsAfter = time.Hour })
	h.AwaitState(id, state{"terminal", "unowned", "not_applicable", "attempt_terminal", "expired"})
	h.AwaitState(other, state{"terminal", "unowned", "not_applicable", "attempt_terminal", "expired"})
	if n := h.Count(`SELECT count(*) FROM river_job WHERE id = $1 AND state = 'running'`, res.Job.ID); n != 1 {
		t.Fatalf("the running scan was rescued (%d running); the test proves nothing", n)
	}
	if n := h.Count(`SELECT count(*) FROM river_job WHERE kind = 'ff.scan' AND args->>'behind' = 'true' AND (args ? 'after' OR args ? 'round')`); n != 0 {
		t.Errorf("%d continuations marked behind, want none", n)
	}
	if n := h.Count(`SELECT count(*) FROM river_job WHERE kind = 'ff.scan' AND args->>'behind' IS NULL AND (args ? 'after' OR args ? 'round')`); n == 0 {
		t.Error("no scan continued: the test proves nothing about continuations")
	}
	h.Await("the tick's output", func() bool {
		for _, o := range h.outputs("ff.tick") {
			if o["scans_in_flight"] == 1.0 && o["scans_behind"] == 1.0 {
				return true
			}
		}
		return false
	})
	// One scan behind the running one at a time: the ticks after it find
	// it queued (or running) and insert no other.
	if n := h.Count(`SELECT count(*) FROM river_job WHERE kind = 'ff.scan' AND args->>'behind' = 'true'
		AND state NOT IN ('completed', 'cancelled', 'discarded')`); n > 1 {
		t.Errorf("%d scans behind the running one in flight, want at most 1", n)
	}
}
