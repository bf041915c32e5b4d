package pipeline_test

import (
	"testing"
	"time"

	"github.com/ffriver/ffriver"
	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/jobs"
	"github.com/ffriver/ffriver/scanners"
	"github.com/ffriver/ffriver/workers"
	"github.com/riverqueue/river"
)

// scanOnly makes a client work the scan queue only: item jobs stay queued.
func scanOnly(rc *river.Config) { delete(rc.Queues, jobs.QueueApply) }

// With scan cursors, an item still queued is not read again by later ticks;
// what becomes due later is; an item whose job is deleted or cancelled is
// found again by the next sweep; and once items are worked, every lease
// expires exactly once.
func TestScanCursorsSkipWorkInFlightAndSweepLostJobs(t *testing.T) {
	t.Parallel()
	settings := disabled()
	settings[scanners.AttemptTimeout] = workers.Settings{Interval: 50 * time.Millisecond, Batch: 1000, Sweep: time.Hour}
	h := newHarness(t, ffriver.Config{Scanners: settings})
	first := h.expiredLeases(20)
	h.client(true, scanOnly)
	items := func() int {
		return h.Count(`SELECT count(*) FROM river_job WHERE kind = $1`, jobs.KindExpireAttempt)
	}
	h.Await("an item job per expired lease", func() bool { return items() == len(first) })
	scans := func() int {
		return h.Count(`SELECT count(*) FROM river_job WHERE kind = $1 AND state = 'completed'`, jobs.KindScan)
	}
	// Ticks keep scanning the partitions with due (queued) items.
	done := scans()
	h.Await("ten more scans", func() bool { return scans() >= done+10 })
	if n := h.Count(`SELECT COALESCE(sum((metadata->'output'->>'items_in_flight')::int), 0) FROM river_job WHERE kind = $1`, jobs.KindScan); n != 0 {
		t.Errorf("scans re-read %d items whose jobs were queued; want 0 with cursors", n)
	}
	if n := items(); n != len(first) {
		t.Fatalf("%d item jobs, want %d", n, len(first))
	}

	// New leases expire after the cursor: found by the next scans.
	second := h.expiredLeases(5)
	h.Await("the new leases' items", func() bool { return items() == len(first)+len(second) })

	// Jobs that vanish (deleted, cancelled in River UI) are not rescanned
	// before a sweep...
	h.Exec(`DELETE FROM river_job WHERE id IN (SELECT id FROM river_job WHERE kind = $1 ORDER BY id LIMIT 3)`, jobs.KindExpireAttempt)
	h.Exec(`UPDATE river_job SET state = 'cancelled', finalized_at = now() WHERE id IN (
		SELECT id FROM river_job WHERE kind = $1 AND state = 'available' ORDER BY id LIMIT 2)`, jobs.KindExpireAttempt)
	done = scans()
	h.Await("ten more scans", func() bool { return scans() >= done+10 })
	if n := h.Count(`SELECT count(*) FROM river_job WHERE kind = $1 AND state = 'available'`, jobs.KindExpireAttempt); n != 20 {
		t.Fatalf("%d queued items before the sweep, want 20", n)
	}
	// ... which finds them again: the next scan of each partition sweeps.
	h.Exec(`UPDATE ff_scan_cursor SET swept_at_ms = 0`)
	h.Await("the vanished items re-queued", func() bool {
		return h.Count(`SELECT count(*) FROM river_job WHERE kind = $1 AND state = 'available'`, jobs.KindExpireAttempt) == 25
	})

	// Worked, every lease expires once.
	h.client(false, nil)
	for _, id := range append(first, second...) {
		h.AwaitState(id, terminalExpired)
	}
	h.Await("settled", func() bool { return h.jobsSettled(jobs.KindExpireAttempt) })
	for _, id := range append(first, second...) {
		h.WantEventStrings(id, []string{"acquired///1", "expired///1"}, []string{"expired//"})
	}
}

// A due time written behind a partition's scan cursor (by a writer whose
// clock is behind the scanner's, or by a commit slower than the lease) is
// found by a catch-up long before the next sweep: the tick sees the
// partition's oldest due item overdue by a tenth of the sweep period, and
// the partition's scan sweeps early. The scanners' clock moves 10 s here,
// past a tenth of the 1-minute sweep period and short of the period: without
// the catch-up the lease would not expire before the clock reached the
// sweep. Found by the lease checker with ffscheduler's and ffworker's
// clocks 0.7 s apart: leases waited 30 s to expire.
func TestScanCursorsCatchUpWithDueTimesWrittenBehindThem(t *testing.T) {
	t.Parallel()
	settings := disabled()
	settings[scanners.AttemptTimeout] = workers.Settings{Interval: 50 * time.Millisecond, Batch: 1000, Sweep: time.Minute}
	h := newHarness(t, ffriver.Config{Scanners: settings})
	first := h.expiredLeases(5)
	h.client(true, nil)
	for _, id := range first {
		h.AwaitState(id, terminalExpired)
	}
	part := h.st.Partitions().ForLane("lane-0")
	if n := h.Count(`SELECT count(*) FROM ff_scan_cursor WHERE scanner = $1 AND partition_key = $2 AND after IS NOT NULL`,
		scanners.AttemptTimeout, part); n == 0 {
		t.Fatalf("lane-0's partition %d has no scan cursor position", part)
	}

	// A process whose clock is 10 s behind claims with a 1 s lease on
	// lane-0, whose partition's cursor is past the first leases' expiries:
	// its expiry lies 9 s behind the scanners' now, behind the cursor.
	// (A partition without a position yet would read from the beginning.)
	behind := ff.NewManualClock(h.clock.NowMs() - 10_000)
	st, err := executions.Open(h.ctx, h.db.Pool, executions.Config{Schema: h.db.Name, Clock: behind})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Create(h.ctx, executions.CreateParams{Lane: "lane-0"}); err != nil {
		t.Fatal(err)
	}
	leases, err := st.Claim(h.ctx, executions.ClaimParams{Lane: "lane-0", WorkerID: "w", WorkerInstanceID: "w-1", LeaseTTL: time.Second, Max: 1})
	if err != nil || len(leases) != 1 {
		t.Fatalf("Claim = %v, %v; want one lease", leases, err)
	}
	h.clock.Advance(10 * time.Second)
	h.AwaitState(leases[0].ID, terminalExpired)
	if n := h.Count(`SELECT COALESCE(sum((metadata->'output'->>'caught_up')::int), 0) FROM river_job WHERE kind = $1`, jobs.KindScan); n == 0 {
		t.Error("no scan output counts a candidate caught up; want the expired lease found by a catch-up")
	}
	if n := h.Count(`SELECT COALESCE(sum((metadata->'output'->>'sweeps')::int), 0) FROM river_job WHERE kind = $1`, jobs.KindScan); n != 0 {
		t.Errorf("%d full sweeps 12 s into a 1-minute sweep period; want 0", n)
	}
}
