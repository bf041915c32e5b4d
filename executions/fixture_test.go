package executions_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// t0 is the fixture clock's start: a fixed instant so timestamps are exact.
const t0 = int64(1_800_000_000_000)

type fixture struct {
	t     *testing.T
	ctx   context.Context
	db    *testdb.DB
	st    *executions.Store
	clock *ff.ManualClock
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	db := testdb.New(t, nil)
	clock := ff.NewManualClock(t0)
	st, err := executions.Open(context.Background(), db.Pool, executions.Config{Schema: db.Schema, Clock: clock})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return &fixture{t: t, ctx: context.Background(), db: db, st: st, clock: clock}
}

func (f *fixture) create(p executions.CreateParams) ff.ExecutionID {
	f.t.Helper()
	if p.Lane == "" {
		p.Lane = "lane-a"
	}
	id, err := f.st.Create(f.ctx, p)
	if err != nil {
		f.t.Fatalf("Create: %v", err)
	}
	return id
}

func (f *fixture) flow() uuid.UUID {
	f.t.Helper()
	id, err := f.st.CreateFlow(f.ctx, uuid.Nil)
	if err != nil {
		f.t.Fatalf("CreateFlow: %v", err)
	}
	return id
}

func (f *fixture) claimOne(lane string, ttl time.Duration) executions.Lease {
	f.t.Helper()
	leases, err := f.st.Claim(f.ctx, executions.ClaimParams{Lane: lane, WorkerID: "w", WorkerInstanceID: "w-1", LeaseTTL: ttl})
	if err != nil {
		f.t.Fatalf("Claim(%s): %v", lane, err)
	}
	if len(leases) != 1 {
		f.t.Fatalf("Claim(%s) returned %d leases, want 1", lane, len(leases))
	}
	return leases[0]
}

func (f *fixture) get(id ff.ExecutionID) *executions.Execution {
	f.t.Helper()
	e, err := f.st.Get(f.ctx, id)
	if err != nil {
		f.t.Fatalf("Get(%s): %v", id, err)
	}
	return e
}

// state is the five state columns, in the order phase, ownership,
// eligibility, attempt, public.
type state [5]string

func (f *fixture) wantState(id ff.ExecutionID, want state) *executions.Execution {
	f.t.Helper()
	e := f.get(id)
	got := state{e.LifecyclePhase, e.OwnershipState, e.EligibilityState, e.AttemptState, e.PublicState}
	if got != want {
		f.t.Fatalf("state of %s = %v, want %v", id, got, want)
	}
	return e
}

type leaseRow struct {
	Type, Namespace, InstanceTag string
	Epoch                        int64
	Attempt                      int32
	AtMs                         int64
}

// leaseEvents returns the lease events of id in event_id order.
func (f *fixture) leaseEvents(id ff.ExecutionID) []leaseRow {
	f.t.Helper()
	rows, err := f.db.Pool.Query(f.ctx, `SELECT event_type, COALESCE(namespace, ''), COALESCE(instance_tag, ''),
		COALESCE(lease_epoch, -1), COALESCE(attempt_index, -1), occurred_at_ms
		FROM ff_lease_event WHERE execution_id = $1 AND partition_key = $2 ORDER BY event_id`, id.UUID.String(), int32(id.Partition))
	if err != nil {
		f.t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (leaseRow, error) {
		var l leaseRow
		err := r.Scan(&l.Type, &l.Namespace, &l.InstanceTag, &l.Epoch, &l.Attempt, &l.AtMs)
		return l, err
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return out
}

func (f *fixture) leaseTypes(id ff.ExecutionID) []string {
	f.t.Helper()
	var out []string
	for _, e := range f.leaseEvents(id) {
		out = append(out, e.Type)
	}
	return out
}

func (f *fixture) completionOutcomes(id ff.ExecutionID) []string {
	f.t.Helper()
	rows, err := f.db.Pool.Query(f.ctx, `SELECT outcome FROM ff_completion_event
		WHERE execution_id = $1 AND partition_key = $2 ORDER BY event_id`, id.UUID, id.Partition)
	if err != nil {
		f.t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		f.t.Fatal(err)
	}
	return out
}

func (f *fixture) wantEvents(id ff.ExecutionID, lease, completion []string) {
	f.t.Helper()
	if got := f.leaseTypes(id); !slices.Equal(got, lease) {
		f.t.Errorf("lease events of %s = %v, want %v", id, got, lease)
	}
	if got := f.completionOutcomes(id); !slices.Equal(got, completion) {
		f.t.Errorf("completion events of %s = %v, want %v", id, got, completion)
	}
}

// inTx runs fn in a transaction and commits it.
func (f *fixture) inTx(fn func(tx pgx.Tx) error) error {
	f.t.Helper()
	return pgx.BeginFunc(f.ctx, f.db.Pool, fn)
}

func wantErr(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("err = %v, want %v", err, target)
	}
}
