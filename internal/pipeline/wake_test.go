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

// A lease expiry, a delay and a deadline coming due between two periodic
// ticks (an hour apart) are acted on at once: the wake loop inserted a
// tick of each scanner for that due time.
func TestWakeTicksWhenTimersComeDue(t *testing.T) {
	t.Parallel()
	h, c := timerHarness(t, time.Hour)
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan error, 1)
	go func() { done <- h.ff.Wake(ctx, c, ffriver.WakeOptions{Poll: 20 * time.Millisecond}) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Wake: %v", err)
		}
	})

	due := h.clock.NowMs() + 1000
	leased, delayed, deadline := timers(h, due)
	h.clock.Advance(2 * time.Second)
	awaitTimersDone(h, leased, delayed, deadline)

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
