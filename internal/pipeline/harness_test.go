package pipeline_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ffriver/ffriver"
	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/scanners"
	"github.com/ffriver/ffriver/workers"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

// t0 is the manual clock's start.
const t0 = fftest.StartMs

// fast are settings that tick every 50 ms.
func fast(batch int) workers.Settings {
	return workers.Settings{Interval: 50 * time.Millisecond, Batch: batch}
}

// allFast returns overrides making every built-in scanner tick fast.
func allFast(batch int) map[string]workers.Settings {
	m := map[string]workers.Settings{}
	for _, b := range scanners.Builtins(scanners.BuiltinOptions{}) {
		s := b.Scanner
		m[s.Name()] = fast(batch)
	}
	return m
}

// harness is the test kit (fftest.Kit: Create, ClaimOne, AwaitState,
// WantEventStrings, Count, Exec, …) over the store of an ffriver.Service
// on the test's schema, with the short names these tests use for its
// parts.
type harness struct {
	*fftest.Kit
	t     *testing.T
	ctx   context.Context
	db    *fftest.Schema
	clock *ff.ManualClock
	ff    *ffriver.Service
	st    *executions.Store
}

// newHarness migrates a schema and builds ffriver on it; no River client
// runs until start. The kit's Await methods wait 20 s.
func newHarness(t *testing.T, cfg ffriver.Config) *harness {
	t.Helper()
	s := fftest.NewSchema(t, nil)
	clock := ff.NewManualClock(t0)
	cfg.Schema = s.Name
	cfg.Clock = clock
	if cfg.Scanners == nil {
		cfg.Scanners = allFast(1000)
	}
	f, err := ffriver.New(context.Background(), s.Pool, cfg)
	if err != nil {
		t.Fatalf("ffriver.New: %v", err)
	}
	k := fftest.On(t, s, f.Store(), clock)
	k.Within = 20 * time.Second
	return &harness{Kit: k, t: t, ctx: k.Ctx, db: s, clock: clock, ff: f, st: f.Store()}
}

// client starts a River client; leader=true makes it a scheduler (periodic
// jobs), else a worker. It is stopped when the test ends.
func (h *harness) client(leader bool, mutate func(*river.Config)) *river.Client[pgx.Tx] {
	h.t.Helper()
	o := ffriver.ClientOptions{ScanWorkers: 2, ApplyWorkers: 4, TestOnly: true, RescueStuckJobsAfter: time.Minute}
	var rc *river.Config
	var err error
	if leader {
		rc, err = h.ff.SchedulerConfig(o)
	} else {
		rc, err = h.ff.WorkerConfig(o)
	}
	if err != nil {
		h.t.Fatal(err)
	}
	rc.FetchCooldown = 10 * time.Millisecond
	rc.FetchPollInterval = 50 * time.Millisecond
	if mutate != nil {
		mutate(rc)
	}
	c, err := river.NewClient(riverpgxv5.New(h.db.Pool), rc)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := c.Start(h.ctx); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Stop(ctx)
	})
	return c
}

// state is phase, ownership, eligibility, attempt, public.
type state = fftest.State

// outcomes returns the recorded outcomes of completed jobs of kind, sorted.
func (h *harness) outcomes(kind string) []string {
	h.t.Helper()
	out := h.Strings(`SELECT metadata->'output'->>'outcome' FROM river_job WHERE kind = $1 AND state = 'completed'
		AND metadata->'output' IS NOT NULL`, kind)
	slices.Sort(out)
	return out
}

// output decodes the output of the completed jobs of kind.
func (h *harness) outputs(kind string) []map[string]any {
	h.t.Helper()
	return h.outputsWhere("kind = $1", kind)
}

// outputsWhere decodes the output of the completed jobs that match where
// (a predicate on river_job with args), in insertion order.
func (h *harness) outputsWhere(where string, args ...any) []map[string]any {
	h.t.Helper()
	var out []map[string]any
	for _, s := range h.Strings(`SELECT (metadata->'output')::text FROM river_job WHERE `+where+` AND state = 'completed' ORDER BY id`, args...) {
		var m map[string]any
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			h.t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// awaitSettled waits until jobsSettled(); when it times out, the test's
// log also gets the jobs still in flight (kind, state, attempt, errors)
// as last read.
func (h *harness) awaitSettled() {
	h.t.Helper()
	var inFlight []string
	h.t.Cleanup(func() {
		if h.t.Failed() && len(inFlight) > 0 {
			h.t.Logf("jobs still in flight: %s", strings.Join(inFlight, "; "))
		}
	})
	h.Await("jobs to settle", func() bool {
		if h.jobsSettled() {
			return true
		}
		inFlight = h.Strings(`SELECT format('%s %s attempt %s errors [%s]', kind, state, attempt, coalesce(array_to_string(errors, ', '), ''))
			FROM river_job WHERE kind <> 'ff.tick' AND state NOT IN ('completed', 'cancelled', 'discarded') ORDER BY id LIMIT 10`)
		return false
	})
}

// jobsSettled reports whether no job of kinds (none: of any kind but
// ff.tick, which the scheduler keeps inserting) is still queued or running.
// River completes an item's job after its transaction commits, so a test
// that saw the transition awaits this before reading job outputs.
func (h *harness) jobsSettled(kinds ...string) bool {
	return h.Count(`SELECT count(*) FROM river_job WHERE (CASE WHEN coalesce(cardinality($1::text[]), 0) = 0 THEN kind <> 'ff.tick' ELSE kind = ANY($1) END)
		AND state NOT IN ('completed', 'cancelled', 'discarded')`, kinds) == 0
}
