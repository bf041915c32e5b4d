package runner_test

import (
	"context"
	"errors"
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
	"github.com/jackc/pgx/v5/pgxpool"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// lostWithin is the test's bound on how long a handler waits to learn
// that its lease is gone: the design's is LeaseCheckInterval (1 s) and a
// query; 5 s leaves room for two busy cores.
const lostWithin = 5 * time.Second

// A runner with a 30 s lease (its first renewal 20 s away) learns within
// about a second that an operator revoked, or cancelled, an execution in
// hand, or that its deadline passed: the handler's context is cancelled
// with cause ErrLeaseLost, long before a renewal would have told it.
func TestRunnerLearnsOfALostLeaseWithinASecond(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	revoked := f.create(1, executions.CreateParams{})[0]
	cancelled := f.create(1, executions.CreateParams{})[0]
	type lost struct {
		cause error
		at    time.Time
	}
	var mu sync.Mutex
	started := map[ff.ExecutionID]bool{}
	causes := map[ff.ExecutionID]chan lost{revoked: make(chan lost, 1), cancelled: make(chan lost, 1)}
	var deadlined ff.ExecutionID // created below, once the runner runs
	deadlineCause := make(chan lost, 1)
	f.start(runner.Config{MaxWorkers: 4, LeaseTTL: 30 * time.Second},
		func(ctx context.Context, ex *runner.Execution) ([]byte, error) {
			mu.Lock()
			first := !started[ex.ID]
			started[ex.ID] = true
			out := causes[ex.ID]
			if ex.ID == deadlined {
				out = deadlineCause
			}
			mu.Unlock()
			if !first || out == nil {
				return nil, nil // the revoked execution, claimed again
			}
			<-ctx.Done()
			out <- lost{context.Cause(ctx), time.Now()}
			return []byte("too late"), nil
		})
	inHand := func(id ff.ExecutionID) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			return started[id]
		}
	}
	await := func(what string, ch chan lost, since time.Time) {
		t.Helper()
		select {
		case l := <-ch:
			if !errors.Is(l.cause, runner.ErrLeaseLost) {
				t.Fatalf("%s: the handler's context ended with %v, want ErrLeaseLost", what, l.cause)
			}
			t.Logf("%s: the handler knew after %s", what, l.at.Sub(since).Round(time.Millisecond))
		case <-time.After(lostWithin):
			t.Fatalf("%s: the handler's context was not cancelled within %s", what, lostWithin)
		}
	}

	fftest.Await(t, 90*time.Second, "the executions in hand", func() bool { return inHand(revoked)() && inHand(cancelled)() })
	at := time.Now()
	if err := f.st.Revoke(f.ctx, revoked, "operator"); err != nil {
		t.Fatal(err)
	}
	await("revoked", causes[revoked], at)
	at = time.Now()
	if err := f.st.Cancel(f.ctx, cancelled, executions.CancelParams{}); err != nil {
		t.Fatal(err)
	}
	await("cancelled", causes[cancelled], at)

	// The deadline: nothing but the runner's check can tell the handler
	// (no scanner runs here, and no renewal is due).
	deadline := time.Now().Add(1500 * time.Millisecond)
	mu.Lock()
	deadlined = f.create(1, executions.CreateParams{Deadline: deadline})[0]
	mu.Unlock()
	fftest.Await(t, 90*time.Second, "the execution with a deadline in hand", inHand(deadlined))
	await("past its deadline", deadlineCause, deadline)

	f.awaitStates([]ff.ExecutionID{revoked}, "completed", 1)
	if e := f.Get(cancelled); e.PublicState != "cancelled" {
		t.Fatalf("the cancelled execution is %s", e.PublicState)
	}
}

// Ends whose commits are cut off (their connections terminated while they
// commit) are resolved, not abandoned: every execution whose handler
// succeeded ends completed, at attempt 0 (no retry spent, none expired
// with MaxRetries 0), exactly once.
func TestRunnerResolvesEndsCutOffWhileTheyCommit(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const n = 200
	ids := f.create(n, executions.CreateParams{})

	// The runner's store, on a pool of its own whose backends are found by
	// their application_name.
	app := "ffrunner-" + f.Schema.Name
	if len(app) > 63 {
		app = app[:63]
	}
	cfg, err := pgxpool.ParseConfig(fftest.DatabaseURL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 8
	cfg.ConnConfig.RuntimeParams["search_path"] = f.Schema.Name
	cfg.ConnConfig.RuntimeParams["application_name"] = app
	pool, err := pgxpool.NewWithConfig(f.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	st, err := executions.Open(f.ctx, pool, executions.Config{Schema: f.Schema.Name})
	if err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	calls := map[ff.ExecutionID]int{}
	gate := make(chan struct{})
	logs := &testlog.Buffer{}
	reader := sdkmetric.NewManualReader()
	r, err := runner.New(st, runner.Config{Lane: lane, MaxWorkers: n, LeaseTTL: 30 * time.Second,
		Logger:        slog.New(slog.NewTextHandler(logs, nil)),
		MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))},
		func(ctx context.Context, ex *runner.Execution) ([]byte, error) {
			mu.Lock()
			calls[ex.ID]++
			mu.Unlock()
			<-gate
			return []byte(ex.ID.String()), nil
		})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	fftest.Await(t, 90*time.Second, "every execution in hand", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(calls) == n
	})

	// Terminate the store's backends every few milliseconds from before
	// the ends commit until a tenth of them were cut off (or, should the
	// ends slip through, every one committed), and then let them through.
	killing, stopKilling := context.WithCancel(f.ctx)
	var kills atomic.Int64
	killed := make(chan struct{})
	kill := func() {
		var k int64
		_ = f.Pool.QueryRow(killing, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE application_name = $1`, app).Scan(&k)
		kills.Add(k)
	}
	fftest.Await(t, 90*time.Second, "the runner's connections terminated", func() bool { kill(); return kills.Load() > 0 })
	go func() {
		defer close(killed)
		tick := time.NewTicker(3 * time.Millisecond)
		defer tick.Stop()
		for {
			kill()
			select {
			case <-killing.Done():
				return
			case <-tick.C:
			}
		}
	}()
	close(gate)
	cutOff := func() int { return strings.Count(logs.String(), "may not have committed") }
	completed := func() int { return f.Count(`SELECT count(*) FROM ff_exec_core WHERE public_state = 'completed'`) }
	fftest.Await(t, 90*time.Second, "a tenth of the ends cut off", func() bool { return cutOff() >= n/10 || completed() == n })
	stopKilling()
	<-killed
	fftest.Await(t, 90*time.Second, "every execution completed", func() bool { return completed() == n })
	t.Logf("%d backends terminated; %d ends cut off and resolved, %d of them of unknown outcome",
		kills.Load(), cutOff(), strings.Count(logs.String(), "outcome unknown"))
	if cutOff() == 0 {
		t.Fatal("no end was cut off: the test tested nothing")
	}

	mu.Lock()
	for _, id := range ids {
		if calls[id] != 1 {
			t.Errorf("%s: %d handler calls, want 1", id, calls[id])
		}
	}
	mu.Unlock()
	for _, id := range ids {
		if e := f.Get(id); e.AttemptIndex != 0 || string(e.Result) != id.String() {
			t.Fatalf("%s: attempt %d, result %q: want attempt 0 and its own result", id, e.AttemptIndex, e.Result)
		}
	}
	if got := f.Count(`SELECT count(*) FROM ff_attempt`); got != n {
		t.Errorf("%d attempts, want %d (one each)", got, n)
	}
	if got := f.Count(`SELECT count(DISTINCT execution_id) FROM ff_completion_event WHERE outcome = 'success'`); got != n {
		t.Errorf("%d executions with a success event, want %d", got, n)
	}
	if got := f.Count(`SELECT count(*) FROM ff_completion_event`); got != n {
		t.Errorf("%d completion events, want %d (one each)", got, n)
	}
	if got := f.leaseEvents(); got["acquired"] != n || got["revoked"] != n || len(got) != 2 {
		t.Errorf("lease events = %v, want %d acquired and %d revoked", got, n, n)
	}
	awaitCounted(t, reader, "completed", int64(n))
	if s := logs.String(); strings.Contains(s, "could not commit") {
		t.Errorf("the runner gave up on an end:\n%s", s)
	}
}

// unknownStore is a runner's Store whose Complete calls lose their answer,
// once per execution: those in committed commit first, the others do not
// reach the store at all; either way the runner gets ff.ErrOutcomeUnknown,
// as when a connection drops with a COMMIT's answer.
type unknownStore struct {
	*executions.Store
	committed map[ff.ExecutionID]bool
	mu        sync.Mutex
	calls     map[ff.ExecutionID]int
}

func (s *unknownStore) Complete(ctx context.Context, l executions.Lease, result []byte) error {
	s.mu.Lock()
	s.calls[l.ID]++
	first := s.calls[l.ID] == 1
	s.mu.Unlock()
	if !first {
		return s.Store.Complete(ctx, l, result)
	}
	if s.committed[l.ID] {
		if err := s.Store.Complete(ctx, l, result); err != nil {
			return err
		}
	}
	return ff.OutcomeUnknown("complete: committing", errors.New("connection lost"))
}

// An end of unknown outcome is counted once: one that committed is not
// sent again (it would be refused as not active and counted lost), one
// that did not is sent again; both executions end completed at attempt 0.
func TestRunnerResolvesEndsOfUnknownOutcome(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ids := f.create(10, executions.CreateParams{})
	st := &unknownStore{Store: f.st, committed: map[ff.ExecutionID]bool{}, calls: map[ff.ExecutionID]int{}}
	for _, id := range ids[:5] {
		st.committed[id] = true
	}
	reader := sdkmetric.NewManualReader()
	r, err := runner.New(st, runner.Config{Lane: lane, MaxWorkers: 4, LeaseTTL: 30 * time.Second, Logger: discard(),
		MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))},
		func(ctx context.Context, ex *runner.Execution) ([]byte, error) { return []byte("ok"), nil })
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	f.awaitStates(ids, "completed", len(ids))
	awaitCounted(t, reader, "completed", int64(len(ids)))
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, id := range ids {
		want := 2
		if st.committed[id] {
			want = 1
		}
		if st.calls[id] != want {
			t.Errorf("%s (committed at once: %v): %d Complete calls, want %d", id, st.committed[id], st.calls[id], want)
		}
		if e := f.Get(id); e.AttemptIndex != 0 {
			t.Errorf("%s: attempt %d, want 0", id, e.AttemptIndex)
		}
	}
	for _, outcome := range []string{"lost", "error"} {
		if got := counter(t, reader, runner.MetricExecutions, outcome); got != 0 {
			t.Errorf("%s{outcome=%s} = %d, want 0", runner.MetricExecutions, outcome, got)
		}
	}
}
