package workers_test

import (
	"testing"
	"time"

	"github.com/ffriver/ffriver"
	"github.com/ffriver/ffriver/internal/jobs"
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
