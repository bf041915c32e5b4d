package workers_test

import (
	"testing"
	"time"

	"github.com/ffriver/ffriver"
	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/scanners"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

// A tick left "running" by a process that died (River's rescuer only gives
// up on it after --rescue-after) does not stall its scanner: the next ticks
// still run and the due work is done.
func TestStuckTickDoesNotStallItsScanner(t *testing.T) {
	t.Parallel()
	h := newHarness(t, ffriver.Config{Scanners: map[string]scanners.Settings{
		scanners.AttemptTimeout: {Interval: 200 * time.Millisecond, Batch: 1000},
	}})
	// A tick of attempt_timeout, inserted as the periodic job inserts it,
	// then marked running by a process that no longer exists.
	args, err := h.ff.Pipeline().TickArgs(scanners.AttemptTimeout)
	if err != nil {
		t.Fatal(err)
	}
	inserter, err := river.NewClient(riverpgxv5.New(h.db.Pool), &river.Config{Schema: h.db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	res, err := inserter.Insert(h.ctx, args, h.ff.Pipeline().TickInsertOpts())
	if err != nil {
		t.Fatal(err)
	}
	h.exec(`UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now(), attempted_by = '{dead-process}' WHERE id = $1`, res.Job.ID)

	id := h.create(executions.CreateParams{})
	h.claim("lane-a", time.Millisecond)
	h.clock.Advance(time.Second)
	h.client(true, func(rc *river.Config) { rc.RescueStuckJobsAfter = time.Hour })
	h.awaitState(id, state{"terminal", "unowned", "not_applicable", "attempt_terminal", "expired"})
	if n := h.count(`SELECT count(*) FROM river_job WHERE id = $1 AND state = 'running'`, res.Job.ID); n != 1 {
		t.Fatalf("the stuck tick was rescued (%d running); the test proves nothing", n)
	}
}
