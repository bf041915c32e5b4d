package fftest

import (
	"context"
	"testing"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/google/uuid"
)

// StartMs is where the manual clock of a Kit from New starts (unless its
// options give another clock): a fixed instant, 2027-01-15 08:00 UTC, so
// that a test can compare timestamps exactly (StartMs+1000 after a
// Clock.Advance(time.Second)).
const StartMs int64 = 1_800_000_000_000

// DefaultLane is the lane Kit.Create puts an execution on when its
// parameters name none.
const DefaultLane = "lane-a"

// defaultWithin is how long the Await methods of a Kit wait when its
// Within is zero.
const defaultWithin = 20 * time.Second

// Kit is one test's ffriver: its schema, an execution store on it, the
// store's manual clock, and helpers that fail the test on an error. Its DB
// runs plain SQL on the schema's pool. Build one with New, or with On over
// a store the test opened itself.
//
// A Kit is used from the test's goroutine: its helpers fail the test with
// TB.Fatalf.
type Kit struct {
	// DB runs plain SQL on the schema's pool. Its TB and Ctx are the
	// kit's: the test the helpers fail and the context of their calls
	// (context.Background(), so that they work in a Cleanup function too).
	DB
	// Schema is the test's schema; DB.Pool is its pool.
	Schema *Schema
	// Store is the store the helpers create, claim and read through.
	Store *executions.Store
	// Clock is the store's clock when it is a manual one, else nil.
	Clock *ff.ManualClock
	// Within is how long the Await methods wait (20 s when zero).
	Within time.Duration
}

// KitOptions tune New.
type KitOptions struct {
	// Schema tunes the test's schema (see NewSchema).
	Schema Options
	// Config opens the store. Its Schema is set to the test's, and a nil
	// Clock becomes ff.NewManualClock(StartMs).
	Config executions.Config
}

// New creates the test's schema (NewSchema), opens an execution store on
// it and returns a Kit over both. opts may be nil.
func New(tb testing.TB, opts *KitOptions) *Kit {
	tb.Helper()
	if opts == nil {
		opts = &KitOptions{}
	}
	s := NewSchema(tb, &opts.Schema)
	cfg := opts.Config
	if cfg.Clock == nil {
		cfg.Clock = ff.NewManualClock(StartMs)
	}
	clock, _ := cfg.Clock.(*ff.ManualClock)
	return On(tb, s, openStore(tb, s, cfg), clock)
}

// On returns a Kit over st, a store the test opened on s itself: an
// ffriver.Service's Store(), say, whose commits wake the service's
// workers. clock is st's clock when the test holds it, else nil.
func On(tb testing.TB, s *Schema, st *executions.Store, clock *ff.ManualClock) *Kit {
	return &Kit{DB: DB{TB: tb, Ctx: context.Background(), Pool: s.Pool}, Schema: s, Store: st, Clock: clock}
}

// Create creates an execution with p, on DefaultLane unless p.Lane is set.
func (k *Kit) Create(p executions.CreateParams) ff.ExecutionID {
	k.TB.Helper()
	if p.Lane == "" {
		p.Lane = DefaultLane
	}
	ctx, cancel := k.queryCtx()
	defer cancel()
	id, err := k.Store.Create(ctx, p)
	if err != nil {
		k.TB.Fatalf("Create: %v", err)
	}
	return id
}

// Flow creates a flow and returns its id.
func (k *Kit) Flow() uuid.UUID {
	k.TB.Helper()
	ctx, cancel := k.queryCtx()
	defer cancel()
	id, err := k.Store.CreateFlow(ctx, uuid.Nil)
	if err != nil {
		k.TB.Fatalf("CreateFlow: %v", err)
	}
	return id
}

// ClaimOne claims the one execution due on lane for worker "w", instance
// "w-1", with a lease of ttl, and fails the test unless it gets exactly
// one lease.
func (k *Kit) ClaimOne(lane string, ttl time.Duration) executions.Lease {
	k.TB.Helper()
	return k.ClaimOneWith(executions.ClaimParams{Lane: lane, LeaseTTL: ttl})
}

// ClaimOneWith claims with p (WorkerID "w" when unset, WorkerInstanceID
// WorkerID+"-1" when unset) and fails the test unless it gets exactly one
// lease.
func (k *Kit) ClaimOneWith(p executions.ClaimParams) executions.Lease {
	k.TB.Helper()
	if p.WorkerID == "" {
		p.WorkerID = "w"
	}
	if p.WorkerInstanceID == "" {
		p.WorkerInstanceID = p.WorkerID + "-1"
	}
	ctx, cancel := k.queryCtx()
	defer cancel()
	leases, err := k.Store.Claim(ctx, p)
	if err != nil {
		k.TB.Fatalf("Claim(%s): %v", p.Lane, err)
	}
	if len(leases) != 1 {
		k.TB.Fatalf("Claim(%s) returned %d leases, want 1", p.Lane, len(leases))
	}
	return leases[0]
}

// Get returns the execution id.
func (k *Kit) Get(id ff.ExecutionID) *executions.Execution {
	k.TB.Helper()
	ctx, cancel := k.queryCtx()
	defer cancel()
	e, err := k.Store.Get(ctx, id)
	if err != nil {
		k.TB.Fatalf("Get(%s): %v", id, err)
	}
	return e
}

// State is an execution's five state columns, in the order lifecycle
// phase, ownership, eligibility, attempt state, public state:
// State{"runnable", "unowned", "eligible_now", "pending_first_attempt", "waiting"}.
type State [5]string

// stateOf returns e's State.
func stateOf(e *executions.Execution) State {
	return State{e.LifecyclePhase, e.OwnershipState, e.EligibilityState, e.AttemptState, e.PublicState}
}

// State returns the State of id.
func (k *Kit) State(id ff.ExecutionID) State {
	k.TB.Helper()
	return stateOf(k.Get(id))
}

// WantState fails the test unless id is in state want, and returns the
// execution.
func (k *Kit) WantState(id ff.ExecutionID, want State) *executions.Execution {
	k.TB.Helper()
	e := k.Get(id)
	if got := stateOf(e); got != want {
		k.TB.Fatalf("state of %s = %v, want %v", id, got, want)
	}
	return e
}

// Await waits until cond holds, and fails the test when it still does not
// after Within.
func (k *Kit) Await(what string, cond func() bool) {
	k.TB.Helper()
	Await(k.TB, k.within(), what, cond)
}

// AwaitState waits until id is in state want, and fails the test when it
// is not after Within.
func (k *Kit) AwaitState(id ff.ExecutionID, want State) {
	k.TB.Helper()
	var got State
	if !poll(k.within(), func() bool { got = k.State(id); return got == want }) {
		k.TB.Fatalf("timed out after %s waiting for %s to be %v: it is %v", k.within(), id, want, got)
	}
}

// AwaitPublicState waits until the public state of id is public (one of
// ff's Public* constants), and fails the test when it is not after Within.
func (k *Kit) AwaitPublicState(id ff.ExecutionID, public string) {
	k.TB.Helper()
	var got string
	if !poll(k.within(), func() bool { got = k.Get(id).PublicState; return got == public }) {
		k.TB.Fatalf("timed out after %s waiting for %s to be %s: it is %s", k.within(), id, public, got)
	}
}

func (k *Kit) within() time.Duration {
	if k.Within > 0 {
		return k.Within
	}
	return defaultWithin
}
