package pipeline_test

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ffriver/ffriver"
	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/pipeline"
	"github.com/ffriver/ffriver/jobs"
	"github.com/ffriver/ffriver/scanners"
	"github.com/ffriver/ffriver/workers"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// timerScanners are the built-in scanners the wake loop ticks.
var timerScanners = []string{scanners.AttemptTimeout, scanners.DelayedPromoter, scanners.ExecutionDeadline}

// timerHarness is a harness whose timer scanners tick every interval and
// whose other scanners are off, with a scheduler client running.
func timerHarness(t *testing.T, interval time.Duration) (*harness, *river.Client[pgx.Tx]) {
	t.Helper()
	over := disabled()
	for _, s := range timerScanners {
		over[s] = workers.Settings{Interval: interval, Batch: 100}
	}
	h := newHarness(t, ffriver.Config{Scanners: over})
	c := h.client(true, nil)
	// The periodic ticks run when the client starts leading: they are out
	// of the way before anything comes due.
	h.Await("the first periodic ticks", func() bool {
		return h.Count(`SELECT count(DISTINCT args->>'scanner') FROM river_job WHERE kind = 'ff.tick' AND state = 'completed'`) == len(timerScanners)
	})
	return h, c
}

// timers creates, by the harness's clock, a lease, a delay and a deadline
// all due at dueMs, and returns the three executions.
func timers(h *harness, dueMs int64) (leased, delayed, deadline ff.ExecutionID) {
	h.Create(executions.CreateParams{Lane: "leased"})
	leased = h.ClaimOne("leased", time.Duration(dueMs-h.clock.NowMs())*time.Millisecond).ID
	delayed = h.Create(executions.CreateParams{Lane: "delayed", DelayUntil: time.UnixMilli(dueMs)})
	deadline = h.Create(executions.CreateParams{Lane: "deadline", Deadline: time.UnixMilli(dueMs)})
	return leased, delayed, deadline
}

// awaitTimersDone waits until the lease has expired, the delayed execution
// is eligible and the deadline has expired its execution.
func awaitTimersDone(h *harness, leased, delayed, deadline ff.ExecutionID) {
	h.t.Helper()
	for what, want := range map[string]struct {
		id    ff.ExecutionID
		state string
	}{"the lease expired": {leased, "expired"}, "the delay promoted": {delayed, "waiting"}, "the deadline expired": {deadline, "expired"}} {
		h.Await(what, func() bool {
			return h.Count(`SELECT count(*) FROM ff_exec_core WHERE partition_key = $1 AND execution_id = $2 AND public_state = $3`,
				want.id.Partition, want.id.UUID, want.state) == 1
		})
	}
}

// timerRound creates a lease, a delay and a deadline due a second from
// now by the harness's clock, moves the clock past them, waits until all
// three are acted on and returns their due time.
func timerRound(h *harness) int64 {
	h.t.Helper()
	due := h.clock.NowMs() + 1000
	leased, delayed, deadline := timers(h, due)
	h.clock.Advance(2 * time.Second)
	awaitTimersDone(h, leased, delayed, deadline)
	return due
}

// A lease expiry, a delay and a deadline coming due between two periodic
// ticks (an hour apart) are acted on at once: the wake loop inserted a
// tick of each scanner for that due time.
func TestWakeTicksWhenTimersComeDue(t *testing.T) {
	t.Parallel()
	h, c := timerHarness(t, time.Hour)
	wakeLoop(t, h, c)
	due := timerRound(h)

	woke := h.Strings(`SELECT args->>'scanner' FROM river_job WHERE kind = 'ff.tick' AND 'wake' = ANY(tags)
		AND (metadata->>$1)::bigint = $2`, pipeline.WakeDueKey, due)
	slices.Sort(woke)
	if want := slices.Sorted(slices.Values(timerScanners)); !slices.Equal(woke, want) {
		t.Errorf("wake ticks for due time %d: %v, want one of each of %v", due, woke, want)
	}
}

// lostWakes is a TickInserter that loses every wake tick: it records the
// due time it was asked for and inserts nothing, as if the tick job had
// been deleted before a worker fetched it.
type lostWakes struct {
	mu   sync.Mutex
	dues map[string][]int64
}

func (l *lostWakes) Insert(_ context.Context, args river.JobArgs, opts *river.InsertOpts) (*rivertype.JobInsertResult, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var meta map[string]int64
	if err := json.Unmarshal(opts.Metadata, &meta); err != nil {
		return nil, err
	}
	scanner := args.(jobs.TickArgs).Scanner
	l.dues[scanner] = append(l.dues[scanner], meta[pipeline.WakeDueKey])
	return &rivertype.JobInsertResult{Job: &rivertype.JobRow{}}, nil
}

func (l *lostWakes) lost(scanner string, due int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Contains(l.dues[scanner], due)
}

// A lost wake-up delays, never loses: with every wake tick lost, the
// timers are acted on by the periodic ticks.
func TestLostWakeIsLeftToThePeriodicTick(t *testing.T) {
	t.Parallel()
	h, c := timerHarness(t, 300*time.Millisecond)
	lost := &lostWakes{dues: map[string][]int64{}}
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan error, 1)
	go func() {
		done <- pipeline.Of(h.ff).Wake(ctx, lost, pipeline.WakeOptions{ClientID: c.ID(), RiverSchema: h.ff.RiverSchema(), Poll: 20 * time.Millisecond})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Wake: %v", err)
		}
	})

	due := h.clock.NowMs() + 1000
	leased, delayed, deadline := timers(h, due)
	h.clock.Advance(2 * time.Second)
	h.Await("the wake-ups lost", func() bool {
		for _, s := range timerScanners {
			if !lost.lost(s, due) {
				return false
			}
		}
		return true
	})
	awaitTimersDone(h, leased, delayed, deadline)
	if n := h.Count(`SELECT count(*) FROM river_job WHERE kind = 'ff.tick' AND 'wake' = ANY(tags)`); n != 0 {
		t.Fatalf("%d wake ticks in river_job: the test proves nothing", n)
	}
}

// wakeLoop runs the wake loop on h's scheduler c until the test ends.
func wakeLoop(t *testing.T, h *harness, c *river.Client[pgx.Tx]) {
	t.Helper()
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan error, 1)
	go func() { done <- h.ff.Wake(ctx, c, ffriver.WakeOptions{Poll: 20 * time.Millisecond}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Wake: %v", err)
		}
	})
}

// wakeOutputs returns the outputs of the completed wake ticks of scanner
// for due time due.
func wakeOutputs(h *harness, scanner string, due int64) []map[string]any {
	h.t.Helper()
	return h.outputsWhere(`kind = 'ff.tick' AND 'wake' = ANY(tags) AND args->>'scanner' = $1 AND (metadata->>$2)::bigint = $3`,
		scanner, pipeline.WakeDueKey, due)
}

// A wake tick inserts the items that came due since the previous one
// itself (workers.RangeScanner), without a scan job: after a first round
// of timers (whose wake ticks count everything, as the loop has no
// horizon yet), a second round is acted on with no scan inserted, and each
// scanner's wake tick says it inserted its item.
func TestWakeTickInsertsItsItems(t *testing.T) {
	t.Parallel()
	h, c := timerHarness(t, time.Hour)
	wakeLoop(t, h, c)

	timerRound(h)
	h.Await("the first round's jobs settled", func() bool { return h.jobsSettled() })
	scans := h.Count(`SELECT count(*) FROM river_job WHERE kind = 'ff.scan'`)

	second := timerRound(h)
	if n := h.Count(`SELECT count(*) FROM river_job WHERE kind = 'ff.scan'`); n != scans {
		t.Errorf("%d scans inserted for the second round, want none", n-scans)
	}
	h.Await("the second round's jobs settled", func() bool { return h.jobsSettled() })
	for _, s := range timerScanners {
		outs := wakeOutputs(h, s, second)
		if len(outs) != 1 || outs[0]["direct"] != true || outs[0]["items_inserted"] != 1.0 || outs[0]["due_partitions"] != 1.0 {
			t.Errorf("%s: wake tick outputs for the second round %v, want one that inserted its item directly", s, outs)
		}
	}
}

// A wake tick that finds more than a batch come due fans out scans, as a
// periodic tick does, and every item is still acted on.
func TestWakeTickOverABatchScans(t *testing.T) {
	t.Parallel()
	over := disabled()
	over[scanners.AttemptTimeout] = workers.Settings{Interval: time.Hour, Batch: 2}
	h := newHarness(t, ffriver.Config{Scanners: over})
	c := h.client(true, nil)
	h.Await("the first periodic tick", func() bool {
		return h.Count(`SELECT count(*) FROM river_job WHERE kind = 'ff.tick' AND state = 'completed'`) == 1
	})
	wakeLoop(t, h, c)
	expired := state{"terminal", "unowned", "not_applicable", "attempt_terminal", "expired"}

	// A first lease, so that the loop has a horizon (its first wake tick
	// counts everything).
	h.Create(executions.CreateParams{Lane: "l"})
	id := h.ClaimOne("l", time.Second).ID
	h.clock.Advance(2 * time.Second)
	h.AwaitState(id, expired)

	second := h.clock.NowMs() + 1000
	var ids []ff.ExecutionID
	for range 3 {
		h.Create(executions.CreateParams{Lane: "l"})
		ids = append(ids, h.ClaimOne("l", time.Second).ID)
	}
	h.clock.Advance(2 * time.Second)
	for _, id := range ids {
		h.AwaitState(id, expired)
	}
	h.Await("the jobs settled", func() bool { return h.jobsSettled() })
	outs := wakeOutputs(h, scanners.AttemptTimeout, second)
	if len(outs) != 1 || outs[0]["direct"] == true || outs[0]["scans_inserted"] == nil || outs[0]["scans_inserted"].(float64) < 1 {
		t.Errorf("wake tick outputs for three leases over a batch of two: %v, want one that inserted scans", outs)
	}
}
