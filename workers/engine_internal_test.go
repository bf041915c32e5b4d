package workers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/internal/actions"
	"github.com/ffriver/ffriver/internal/apply"
	"github.com/ffriver/ffriver/jobs"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// engineFixture is the test kit (fftest.Kit) with n executions whose
// leases have expired, each in a lane of its own, and the short names
// these tests use for its parts.
type engineFixture struct {
	*fftest.Kit
	ctx   context.Context
	db    *fftest.Schema
	store *executions.Store
	ids   []ff.ExecutionID
}

func newEngineFixture(t *testing.T, n int) *engineFixture {
	t.Helper()
	k := fftest.New(t, nil)
	f := &engineFixture{Kit: k, ctx: k.Ctx, db: k.Schema, store: k.Store}
	for i := range n {
		lane := fmt.Sprintf("lane-%d", i)
		k.Create(executions.CreateParams{Lane: lane})
		f.ids = append(f.ids, k.ClaimOne(lane, time.Second).ID)
	}
	k.Clock.Advance(2 * time.Second)
	return f
}

// group returns one engine entry per id, as River would hand them over.
func (f *engineFixture) group(ids ...ff.ExecutionID) []*entry[jobs.ExpireAttemptArgs] {
	var out []*entry[jobs.ExpireAttemptArgs]
	for i, id := range ids {
		job := &river.Job[jobs.ExpireAttemptArgs]{JobRow: &rivertype.JobRow{ID: int64(i + 1), Kind: jobs.KindExpireAttempt, Attempt: 1},
			Args: jobs.ExpireAttemptArgs{ID: id}}
		out = append(out, &entry[jobs.ExpireAttemptArgs]{job: job, done: make(chan bool, 1)})
	}
	return out
}

// expired returns id's count of lease "expired" events and the
// (top-level) transaction that wrote the last of them.
func (f *engineFixture) expired(t *testing.T, id ff.ExecutionID) (events int, xact string) {
	t.Helper()
	if err := f.db.Pool.QueryRow(f.ctx, `SELECT count(*), COALESCE(max(xact_id)::text, '') FROM ff_lease_event
		WHERE execution_id = $1 AND partition_key = $2 AND event_type = 'expired'`, id.UUID.String(), int32(id.Partition)).Scan(&events, &xact); err != nil {
		t.Fatal(err)
	}
	return events, xact
}

// wantFailedAlone checks that group's item for failed got its error and
// wrote nothing, while every other item was processed, with one expired
// event, all in one transaction.
func (f *engineFixture) wantFailedAlone(t *testing.T, group []*entry[jobs.ExpireAttemptArgs], failed ff.ExecutionID) {
	t.Helper()
	var xact string
	for i, e := range group {
		id := e.job.Args.ID
		n, x := f.expired(t, id)
		if id == failed {
			if e.err == nil || n != 0 {
				t.Errorf("failing item: err %v, %d expired events; want its error and nothing written", e.err, n)
			}
			continue
		}
		if e.err != nil || e.out.Outcome != actions.Processed || n != 1 {
			t.Errorf("item %d: %v, %s, %d expired events; want processed with one event", i, e.err, e.out.Outcome, n)
		}
		if xact == "" {
			xact = x
		} else if x != xact {
			t.Errorf("item %d committed by transaction %s, another by %s: want one group transaction", i, x, xact)
		}
	}
}

// A group in which one item fails commits the others in one transaction,
// and the failing item's own writes (done before it failed) roll back.
func TestGroupFailingItemRollsBackAlone(t *testing.T) {
	t.Parallel()
	f := newEngineFixture(t, 4)
	poison := f.ids[2]
	env := &Env{Store: f.store, Logger: slog.New(slog.DiscardHandler)}
	g := newEngine(env, apply.Config{}, func(ctx context.Context, tx pgx.Tx, a jobs.ExpireAttemptArgs) (Output, error) {
		out, err := actions.Of(f.store.Pipeline()).ExpireAttempt(ctx, tx, a.ID, a.AttemptIndex)
		if err == nil && a.ID == poison {
			err = errors.New("poisoned after its writes")
		}
		return Output{Outcome: out}, err
	}, true)
	group := f.group(f.ids...)
	g.run(f.ctx, group)

	f.wantFailedAlone(t, group, poison)
	// The failed item alone, retried (here: without the poison) is applied
	// once; the others re-run find nothing to do.
	g2 := newEngine(env, apply.Config{}, func(ctx context.Context, tx pgx.Tx, a jobs.ExpireAttemptArgs) (Output, error) {
		out, err := actions.Of(f.store.Pipeline()).ExpireAttempt(ctx, tx, a.ID, a.AttemptIndex)
		return Output{Outcome: out}, err
	}, true)
	again := f.group(f.ids...)
	g2.run(f.ctx, again)
	for i, e := range again {
		want := actions.NoOp
		if f.ids[i] == poison {
			want = actions.Processed
		}
		if n, _ := f.expired(t, f.ids[i]); e.err != nil || e.out.Outcome != want || n != 1 {
			t.Errorf("re-run item %d: %v, %s, %d expired events; want %s with one event in all", i, e.err, e.out.Outcome, n, want)
		}
	}
}

// An item whose execution is locked elsewhere records skipped_locked without
// waiting, and the rest of its group commits.
func TestGroupLockedItemDoesNotBlockOthers(t *testing.T) {
	t.Parallel()
	f := newEngineFixture(t, 3)
	blocker, err := f.db.Pool.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = blocker.Rollback(f.ctx) }()
	locked := f.ids[1]
	if _, err := blocker.Exec(f.ctx, `SELECT 1 FROM ff_exec_core WHERE partition_key = $1 AND execution_id = $2 FOR UPDATE`, locked.Partition, locked.UUID); err != nil {
		t.Fatal(err)
	}
	env := &Env{Store: f.store, Logger: slog.New(slog.DiscardHandler)}
	g := newEngine(env, apply.Config{JobTimeout: 5 * time.Second}, func(ctx context.Context, tx pgx.Tx, a jobs.ExpireAttemptArgs) (Output, error) {
		out, err := actions.Of(f.store.Pipeline()).ExpireAttempt(ctx, tx, a.ID, a.AttemptIndex)
		return Output{Outcome: out}, err
	}, true)
	group := f.group(f.ids...)
	g.run(f.ctx, group)
	for i, e := range group {
		want, wantEvents := actions.Processed, 1
		if f.ids[i] == locked {
			want, wantEvents = actions.SkippedLocked, 0
		}
		if n, _ := f.expired(t, f.ids[i]); e.err != nil || e.out.Outcome != want || n != wantEvents {
			t.Errorf("item %d: %v, %s, %d expired events; want %s, %d", i, e.err, e.out.Outcome, n, want, wantEvents)
		}
	}
}

// The built-in expire item applies its group with one set-based pass; a
// poison row that makes the pass fail (here: one the database refuses to
// move out of active, by a check constraint) fails its own job only: the
// others commit together, once each, and the poison row is left as it was.
func TestGroupPassPoisonRowFailsAlone(t *testing.T) {
	t.Parallel()
	f := newEngineFixture(t, 5)
	poison := f.ids[3]
	f.Exec(fmt.Sprintf(`ALTER TABLE ff_exec_core ADD CONSTRAINT poison
		CHECK (execution_id <> '%s' OR lifecycle_phase = 'active') NOT VALID`, poison.UUID))
	env := &Env{Store: f.store, Logger: slog.New(slog.DiscardHandler)}
	g := newEngine(env, apply.Config{}, func(ctx context.Context, tx pgx.Tx, a jobs.ExpireAttemptArgs) (Output, error) {
		out, err := actions.Of(env.Store.Pipeline()).ExpireAttempt(ctx, tx, a.ID, a.AttemptIndex)
		return Output{Outcome: out}, err
	}, true)
	passes := 0
	g.many = func(ctx context.Context, tx pgx.Tx, as []jobs.ExpireAttemptArgs) ([]Output, error) {
		passes++
		refs := make([]actions.AttemptRef, len(as))
		for i, a := range as {
			refs[i] = actions.AttemptRef{ID: a.ID, AttemptIndex: a.AttemptIndex}
		}
		outs, err := actions.Of(env.Store.Pipeline()).ExpireAttemptMany(ctx, tx, refs)
		res := make([]Output, len(outs))
		for i, o := range outs {
			res[i] = Output{Outcome: o}
		}
		return res, err
	}
	group := f.group(f.ids...)
	g.run(f.ctx, group)
	if passes != 1 {
		t.Errorf("%d set-based passes, want 1 (then one by one)", passes)
	}
	f.wantFailedAlone(t, group, poison)
	var phase string
	if err := f.db.Pool.QueryRow(f.ctx, `SELECT lifecycle_phase FROM ff_exec_core WHERE partition_key = $1 AND execution_id = $2`,
		poison.Partition, poison.UUID).Scan(&phase); err != nil || phase != "active" {
		t.Errorf("poison row: phase %q, %v; want it left active", phase, err)
	}
	// Without the poison the group's pass commits all at once.
	g.run(f.ctx, f.group(f.ids[:3]...))
	if passes != 2 {
		t.Errorf("%d passes after a clean group, want 2", passes)
	}
}
