package runner_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/internal/testlog"
	"github.com/ffriver/ffriver/runner"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

const lane = "runner-test"

// fixture is the test kit (fftest.Kit: Create, Get, ClaimOne, Strings,
// …) over a store on the system clock, whose leases run out in real time
// as a runner's do, with the short names these tests use for its parts.
type fixture struct {
	*fftest.Kit
	t   *testing.T
	ctx context.Context
	st  *executions.Store
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	st, schema := fftest.NewStore(t, executions.Config{})
	k := fftest.On(t, schema, st, nil)
	return &fixture{Kit: k, t: t, ctx: k.Ctx, st: st}
}

// create creates n executions with p on the runner's lane.
func (f *fixture) create(n int, p executions.CreateParams) []ff.ExecutionID {
	f.t.Helper()
	p.Lane = lane
	ids := make([]ff.ExecutionID, n)
	for i := range ids {
		ids[i] = f.Create(p)
	}
	return ids
}

// start runs a runner until the test ends or stop is called; stop waits
// for Run to return.
func (f *fixture) start(cfg runner.Config, h runner.Handler) (stop func()) {
	f.t.Helper()
	cfg.Lane = lane
	r, err := runner.New(f.st, cfg, h)
	if err != nil {
		f.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					f.t.Errorf("Run: %v", err)
				}
			case <-time.After(90 * time.Second):
				f.t.Error("Run did not return within 90 s of its context's end")
			}
		})
	}
	f.t.Cleanup(stop)
	return stop
}

// states counts the executions ids by public state.
func (f *fixture) states(ids []ff.ExecutionID) map[string]int {
	f.t.Helper()
	out := map[string]int{}
	for _, id := range ids {
		out[f.Get(id).PublicState]++
	}
	return out
}

func (f *fixture) awaitStates(ids []ff.ExecutionID, state string, n int) {
	f.t.Helper()
	fftest.Await(f.t, 90*time.Second, "executions "+state, func() bool { return f.states(ids)[state] == n })
}

// leaseEvents counts the lease events of the schema by type.
func (f *fixture) leaseEvents() map[string]int {
	f.t.Helper()
	out := map[string]int{}
	for _, typ := range f.Strings(`SELECT event_type FROM ff_lease_event`) {
		out[typ]++
	}
	return out
}

// Every execution runs once, one claim at a time or several at once, and
// never more handlers at once than MaxWorkers.
func TestRunnerRunsEveryExecutionOnce(t *testing.T) {
	t.Parallel()
	for _, claims := range []int{1, 4} {
		t.Run(fmt.Sprintf("claims-in-flight-%d", claims), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			ids := f.create(60, executions.CreateParams{Payload: []byte("abc")})
			reader := sdkmetric.NewManualReader()
			var calls, running, most atomic.Int64
			const workers = 8
			f.start(runner.Config{MaxWorkers: workers, ClaimsInFlight: claims, LeaseTTL: time.Minute,
				MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))},
				func(ctx context.Context, ex *runner.Execution) ([]byte, error) {
					calls.Add(1)
					n := running.Add(1)
					defer running.Add(-1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					time.Sleep(time.Millisecond) // a handler's work, so that handlers overlap
					return bytes.ToUpper(ex.Payload), nil
				})
			f.awaitStates(ids, "completed", len(ids))
			if n := calls.Load(); n != int64(len(ids)) {
				t.Errorf("handler calls = %d, want %d", n, len(ids))
			}
			if m := most.Load(); m > workers {
				t.Errorf("%d handlers ran at once, MaxWorkers is %d", m, workers)
			}
			for _, id := range ids[:5] {
				if e := f.Get(id); string(e.Result) != "ABC" {
					t.Errorf("%s: result %q", id, e.Result)
				}
			}
			if got := f.leaseEvents(); got["acquired"] != len(ids) || got["revoked"] != len(ids) || len(got) != 2 {
				t.Errorf("lease events = %v, want %d acquired and revoked", got, len(ids))
			}
			awaitCounted(t, reader, "completed", int64(len(ids)))
		})
	}
}

// A handler whose lease is revoked while it runs sees its context
// cancelled with ErrLeaseLost, and what it returns is dropped.
func TestRunnerLeaseLostMidHandler(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ids := f.create(1, executions.CreateParams{})
	started := make(chan struct{})
	cause := make(chan error, 1)
	f.start(runner.Config{MaxWorkers: 1, LeaseTTL: 300 * time.Millisecond}, func(ctx context.Context, ex *runner.Execution) ([]byte, error) {
		close(started)
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return []byte("too late"), nil
	})
	<-started
	if err := f.st.Revoke(f.ctx, ids[0], "operator"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-cause:
		if !errors.Is(err, runner.ErrLeaseLost) {
			t.Fatalf("cause = %v, want ErrLeaseLost", err)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("the handler's context was not cancelled after its lease was revoked")
	}
	e := f.Get(ids[0])
	if e.PublicState == "completed" || string(e.Result) == "too late" {
		t.Fatalf("the lost lease completed the execution: %+v", e)
	}
}

// Stopping with executions in hand: a handler that finishes within
// StopTimeout is completed; one that does not is cancelled with
// ErrStopping and its execution released, runnable at once.
func TestRunnerGracefulStop(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ids := f.create(2, executions.CreateParams{})
	var inHand atomic.Int64
	finishQuick := make(chan struct{})
	stop := f.start(runner.Config{MaxWorkers: 2, LeaseTTL: time.Minute, StopTimeout: 2 * time.Second},
		func(ctx context.Context, ex *runner.Execution) ([]byte, error) {
			if inHand.Add(1) == 1 {
				<-finishQuick // finishes once the stop began
				return []byte("done"), nil
			}
			<-ctx.Done() // finishes only when cancelled
			return nil, context.Cause(ctx)
		})
	fftest.Await(t, 90*time.Second, "both executions in hand", func() bool { return inHand.Load() == 2 })
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	close(finishQuick)
	select {
	case <-stopped:
	case <-time.After(90 * time.Second):
		t.Fatal("Run did not return")
	}
	got := f.states(ids)
	if got["completed"] != 1 || got["waiting"] != 1 {
		t.Fatalf("states after stop = %v, want one completed and one waiting (released)", got)
	}
	// The released one is claimable at once, as the same attempt.
	if l := f.ClaimOne(lane, time.Minute); l.AttemptIndex != 0 || l.Epoch != 2 {
		t.Fatalf("claim after release = %+v; want attempt 0 epoch 2", l)
	}
}

// A handler that panics fails its attempt; the runner goes on.
func TestRunnerHandlerPanics(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ids := f.create(3, executions.CreateParams{})
	var n atomic.Int64
	f.start(runner.Config{MaxWorkers: 1, LeaseTTL: time.Minute, Logger: discard()}, func(ctx context.Context, ex *runner.Execution) ([]byte, error) {
		if n.Add(1) == 2 {
			panic("handler bug")
		}
		return nil, nil
	})
	fftest.Await(t, 90*time.Second, "all three ended", func() bool {
		s := f.states(ids)
		return s["completed"]+s["failed"] == 3
	})
	if s := f.states(ids); s["failed"] != 1 {
		t.Fatalf("states = %v, want one failed", s)
	}
	for _, id := range ids {
		if e := f.Get(id); e.PublicState == "failed" && !strings.Contains(e.LastFailureMessage, "panic: handler bug") {
			t.Errorf("failure message = %q", e.LastFailureMessage)
		}
	}
}

// An error retries by the execution's policy; Permanent does not.
func TestRunnerErrorsRetryUnlessPermanent(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ids := f.create(2, executions.CreateParams{RetryPolicy: executions.RetryPolicy{MaxRetries: 1}})
	var mu sync.Mutex
	attempts := map[ff.ExecutionID][]int32{}
	f.start(runner.Config{MaxWorkers: 2, LeaseTTL: time.Minute}, func(ctx context.Context, ex *runner.Execution) ([]byte, error) {
		mu.Lock()
		attempts[ex.ID] = append(attempts[ex.ID], ex.AttemptIndex)
		mu.Unlock()
		if ex.ID == ids[0] {
			return nil, runner.Permanent(errors.New("bad input"))
		}
		if ex.AttemptIndex == 0 {
			return nil, errors.New("flaky")
		}
		return []byte("ok"), nil
	})
	fftest.Await(t, 90*time.Second, "both ended", func() bool {
		s := f.states(ids)
		return s["failed"] == 1 && s["completed"] == 1
	})
	mu.Lock()
	defer mu.Unlock()
	if len(attempts[ids[0]]) != 1 || len(attempts[ids[1]]) != 2 {
		t.Errorf("attempts = %v: want one for the permanent failure, two for the retried one", attempts)
	}
}

// A batch of ends with a stale lease in it: that one does not complete
// its execution, the others commit.
func TestRunnerStaleLeaseInACompleterBatch(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ids := f.create(6, executions.CreateParams{})
	gate := make(chan struct{})
	var inHand atomic.Int64
	reader := sdkmetric.NewManualReader()
	f.start(runner.Config{MaxWorkers: 6, LeaseTTL: time.Hour, MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))},
		func(ctx context.Context, ex *runner.Execution) ([]byte, error) {
			inHand.Add(1)
			<-gate
			return []byte("ok"), nil
		})
	fftest.Await(t, 90*time.Second, "six executions in hand", func() bool { return inHand.Load() == 6 })
	// Hand one execution to another worker behind the runner's back (the
	// lease is an hour long: no renewal notices before the batch).
	if err := f.st.Revoke(f.ctx, ids[2], "hand over"); err != nil {
		t.Fatal(err)
	}
	other := f.ClaimOneWith(executions.ClaimParams{Lane: lane, WorkerID: "other", LeaseTTL: time.Hour})
	close(gate)
	fftest.Await(t, 90*time.Second, "the runner's ends counted", func() bool {
		return counter(t, reader, runner.MetricExecutions, "completed")+counter(t, reader, runner.MetricExecutions, "lost") == 6
	})
	if got := counter(t, reader, runner.MetricExecutions, "lost"); got != 1 {
		t.Errorf("lost = %d, want 1", got)
	}
	if s := f.states(ids); s["completed"] != 5 || s["active"] != 1 {
		t.Fatalf("states = %v, want 5 completed and the handed-over one active", s)
	}
	if err := f.st.Complete(f.ctx, other, nil); err != nil {
		t.Fatalf("the other worker's Complete: %v", err)
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	h := func(context.Context, *runner.Execution) ([]byte, error) { return nil, nil }
	for _, cfg := range []runner.Config{
		{MaxWorkers: 1, LeaseTTL: time.Second},
		{Lane: lane, LeaseTTL: time.Second},
		{Lane: lane, MaxWorkers: 1},
		{Lane: lane, MaxWorkers: 1, LeaseTTL: time.Second, FetchCooldown: -1},
		{Lane: "\xff", MaxWorkers: 1, LeaseTTL: time.Second},
		{Lane: lane, MaxWorkers: 1, LeaseTTL: time.Second, LeaseCheckInterval: time.Millisecond},
		{Lane: lane, MaxWorkers: 4, LeaseTTL: time.Second, ClaimsInFlight: -1},
		{Lane: lane, MaxWorkers: 4, LeaseTTL: time.Second, ClaimsInFlight: 5},
	} {
		if _, err := runner.New(f.st, cfg, h); !errors.Is(err, ff.ErrValidation) {
			t.Errorf("New(%+v) = %v, want a validation error", cfg, err)
		}
	}
}

// awaitCounted fails unless the runner's executions metric counts n ends
// of outcome. A handler's end is counted once its commit returns, just
// after another session can see it: it is awaited, then checked exact.
func awaitCounted(t *testing.T, reader *sdkmetric.ManualReader, outcome string, n int64) {
	t.Helper()
	fftest.Await(t, 90*time.Second, outcome+" ends counted", func() bool {
		return counter(t, reader, runner.MetricExecutions, outcome) >= n
	})
	if got := counter(t, reader, runner.MetricExecutions, outcome); got != n {
		t.Errorf("%s{outcome=%s} = %d, want %d", runner.MetricExecutions, outcome, got, n)
	}
}

// counter reads a counter's value for an outcome from reader.
func counter(t *testing.T, reader *sdkmetric.ManualReader, name, outcome string) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				if v, ok := dp.Attributes.Value("outcome"); ok && v.AsString() == outcome {
					return dp.Value
				}
			}
		}
	}
	return 0
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

// A runner may start before the first execution of its lane exists: it
// registers the lane, and executions created later run.
func TestRunnerStartsBeforeItsLaneExists(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	logs := &testlog.Buffer{}
	f.start(runner.Config{MaxWorkers: 2, LeaseTTL: time.Minute, Logger: slog.New(slog.NewTextHandler(logs, nil))},
		func(context.Context, *runner.Execution) ([]byte, error) { return nil, nil })
	fftest.Await(t, 90*time.Second, "the lane registered", func() bool {
		return f.Count(`SELECT count(*) FROM ff_lane_registry WHERE lane_id = $1`, lane) > 0
	})
	ids := f.create(3, executions.CreateParams{})
	f.awaitStates(ids, "completed", 3)
	if s := logs.String(); strings.Contains(s, "claim failed") {
		t.Errorf("the runner logged claim failures:\n%s", s)
	}
}
