package workers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ffriver/ffriver"
	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/ffriver/ffriver/scanners"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

// t0 is the manual clock's start.
const t0 = int64(1_800_000_000_000)

// fast are settings that tick every 50 ms.
func fast(batch int) scanners.Settings {
	return scanners.Settings{Interval: 50 * time.Millisecond, Batch: batch}
}

// allFast returns overrides making every built-in scanner tick fast.
func allFast(batch int) map[string]scanners.Settings {
	m := map[string]scanners.Settings{}
	for _, s := range scanners.Builtins(scanners.BuiltinOptions{}) {
		m[s.Name()] = fast(batch)
	}
	return m
}

type harness struct {
	t     *testing.T
	ctx   context.Context
	db    *testdb.DB
	clock *ff.ManualClock
	ff    *ffriver.Service
	st    *executions.Store
}

// newHarness migrates a schema and builds ffriver on it; no River client
// runs until start.
func newHarness(t *testing.T, cfg ffriver.Config) *harness {
	t.Helper()
	db := testdb.New(t, nil)
	clock := ff.NewManualClock(t0)
	cfg.Schema = db.Schema
	cfg.Clock = clock
	if cfg.Scanners == nil {
		cfg.Scanners = allFast(1000)
	}
	f, err := ffriver.New(context.Background(), db.Pool, cfg)
	if err != nil {
		t.Fatalf("ffriver.New: %v", err)
	}
	return &harness{t: t, ctx: context.Background(), db: db, clock: clock, ff: f, st: f.Store()}
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

// await waits up to 20 s for cond (fftest.Await).
func (h *harness) await(what string, cond func() bool) {
	h.t.Helper()
	fftest.Await(h.t, 20*time.Second, what, cond)
}

func (h *harness) create(p executions.CreateParams) ff.ExecutionID {
	h.t.Helper()
	if p.Lane == "" {
		p.Lane = "lane-a"
	}
	id, err := h.st.Create(h.ctx, p)
	if err != nil {
		h.t.Fatalf("Create: %v", err)
	}
	return id
}

func (h *harness) claim(lane string, ttl time.Duration) executions.Lease {
	h.t.Helper()
	ls, err := h.st.Claim(h.ctx, executions.ClaimParams{Lane: lane, WorkerID: "w", WorkerInstanceID: "w-1", LeaseTTL: ttl})
	if err != nil || len(ls) != 1 {
		h.t.Fatalf("Claim(%s) = %d leases, %v", lane, len(ls), err)
	}
	return ls[0]
}

func (h *harness) get(id ff.ExecutionID) *executions.Execution {
	h.t.Helper()
	e, err := h.st.Get(h.ctx, id)
	if err != nil {
		h.t.Fatalf("Get(%s): %v", id, err)
	}
	return e
}

// state is phase, ownership, eligibility, attempt, public.
type state [5]string

func (h *harness) state(id ff.ExecutionID) state {
	e := h.get(id)
	return state{e.LifecyclePhase, e.OwnershipState, e.EligibilityState, e.AttemptState, e.PublicState}
}

func (h *harness) awaitState(id ff.ExecutionID, want state) {
	h.t.Helper()
	h.await(fmt.Sprintf("%s to be %v", id, want), func() bool { return h.state(id) == want })
}

func (h *harness) wantState(id ff.ExecutionID, want state) {
	h.t.Helper()
	if got := h.state(id); got != want {
		h.t.Fatalf("state of %s = %v, want %v", id, got, want)
	}
}

// leaseEvents returns "type/ns/tag/epoch" of id's lease events in order.
func (h *harness) leaseEvents(id ff.ExecutionID) []string {
	h.t.Helper()
	return h.strings(`SELECT event_type || '/' || COALESCE(namespace, '') || '/' || COALESCE(instance_tag, '') || '/' || COALESCE(lease_epoch::text, '')
		FROM ff_lease_event WHERE execution_id = $1 AND partition_key = $2 ORDER BY event_id`, id.UUID.String(), int32(id.Partition))
}

// completions returns "outcome/ns/tag" of id's completion events in order.
func (h *harness) completions(id ff.ExecutionID) []string {
	h.t.Helper()
	return h.strings(`SELECT outcome || '/' || COALESCE(namespace, '') || '/' || COALESCE(instance_tag, '')
		FROM ff_completion_event WHERE execution_id = $1 AND partition_key = $2 ORDER BY event_id`, id.UUID, id.Partition)
}

func (h *harness) wantEvents(id ff.ExecutionID, lease, completion []string) {
	h.t.Helper()
	if got := h.leaseEvents(id); !slices.Equal(got, lease) {
		h.t.Errorf("lease events of %s = %q, want %q", id, got, lease)
	}
	if got := h.completions(id); !slices.Equal(got, completion) {
		h.t.Errorf("completion events of %s = %q, want %q", id, got, completion)
	}
}

func (h *harness) strings(q string, args ...any) []string {
	h.t.Helper()
	rows, err := h.db.Pool.Query(h.ctx, q, args...)
	if err != nil {
		h.t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		h.t.Fatal(err)
	}
	return out
}

func (h *harness) count(q string, args ...any) int {
	h.t.Helper()
	var n int
	if err := h.db.Pool.QueryRow(h.ctx, q, args...).Scan(&n); err != nil {
		h.t.Fatalf("%s: %v", q, err)
	}
	return n
}

func (h *harness) exec(q string, args ...any) {
	h.t.Helper()
	if _, err := h.db.Pool.Exec(h.ctx, q, args...); err != nil {
		h.t.Fatalf("%s: %v", q, err)
	}
}

// outcomes returns the recorded outcomes of completed jobs of kind, sorted.
func (h *harness) outcomes(kind string) []string {
	h.t.Helper()
	out := h.strings(`SELECT metadata->'output'->>'outcome' FROM river_job WHERE kind = $1 AND state = 'completed'
		AND metadata->'output' IS NOT NULL`, kind)
	slices.Sort(out)
	return out
}

// output decodes the output of the completed jobs of kind.
func (h *harness) outputs(kind string) []map[string]any {
	h.t.Helper()
	var out []map[string]any
	for _, s := range h.strings(`SELECT (metadata->'output')::text FROM river_job WHERE kind = $1 AND state = 'completed' ORDER BY id`, kind) {
		var m map[string]any
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			h.t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// jobsSettled reports whether no job of kinds (none: of any kind but
// ff.tick, which the scheduler keeps inserting) is still queued or running.
// River completes an item's job after its transaction commits, so a test
// that saw the transition awaits this before reading job outputs.
func (h *harness) jobsSettled(kinds ...string) bool {
	return h.count(`SELECT count(*) FROM river_job WHERE (CASE WHEN coalesce(cardinality($1::text[]), 0) = 0 THEN kind <> 'ff.tick' ELSE kind = ANY($1) END)
		AND state NOT IN ('completed', 'cancelled', 'discarded')`, kinds) == 0
}
