package executions_test

import (
	"testing"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/actions"
	"github.com/jackc/pgx/v5"
)

// TestStaleIncarnationFenced is issue 36's first reproduction: worker 1
// claims X (attempt 0, epoch 1) and stalls; an operator cancels X;
// retention removes X; the application creates X again with the same id
// and worker 2 claims it, again as attempt 0, epoch 1. Every call of
// worker 1's old lease, plain, ...Tx and batched, must be refused as
// stale, and worker 2's lease must go on working. (Built with
// -tags ffstaleincarnation, the fence of earlier releases, it fails.)
func TestStaleIncarnationFenced(t *testing.T) {
	t.Parallel()
	calls := []struct {
		name string
		call func(f *fixture, old executions.Lease) error
	}{
		{"Complete", func(f *fixture, old executions.Lease) error { return f.st.Complete(f.ctx, old, []byte("worker 1")) }},
		{"Renew", func(f *fixture, old executions.Lease) error {
			_, err := f.st.Renew(f.ctx, old, time.Minute)
			return err
		}},
		{"Fail", func(f *fixture, old executions.Lease) error {
			_, err := f.st.Fail(f.ctx, old, executions.FailParams{Message: "worker 1"})
			return err
		}},
		{"Delay", func(f *fixture, old executions.Lease) error {
			return f.st.Delay(f.ctx, old, time.UnixMilli(f.clock.NowMs()).Add(time.Hour))
		}},
		{"Release", func(f *fixture, old executions.Lease) error { return f.st.Release(f.ctx, old) }},
		{"CompleteTx", func(f *fixture, old executions.Lease) error {
			return inTxErr(f, func(tx pgx.Tx) error { return f.st.CompleteTx(f.ctx, tx, old, nil) })
		}},
		{"FailTx", func(f *fixture, old executions.Lease) error {
			return inTxErr(f, func(tx pgx.Tx) error {
				_, err := f.st.FailTx(f.ctx, tx, old, executions.FailParams{Permanent: true})
				return err
			})
		}},
		{"FinishMany", func(f *fixture, old executions.Lease) error {
			outs, err := f.st.FinishMany(f.ctx, []executions.Finish{{Lease: old, Result: []byte("worker 1")}})
			if err != nil {
				return err
			}
			return outs[0].Err
		}},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			id := f.Create(executions.CreateParams{Lane: "lane-a", RetryPolicy: executions.RetryPolicy{MaxRetries: 3}})
			old := f.ClaimOne("lane-a", time.Hour)
			if err := f.st.Cancel(f.ctx, id, executions.CancelParams{Reason: "operator"}); err != nil {
				t.Fatal(err)
			}
			f.clock.Advance(time.Minute)
			res := f.remove(actions.RemoveParams{Partition: id.Partition, CutoffMs: f.clock.NowMs(), Limit: 100})
			if res.Executions != 1 || f.exists(id) {
				t.Fatalf("retention did not remove %s: %+v", id, res)
			}
			again := f.Create(executions.CreateParams{ID: id.UUID, Lane: "lane-a", RetryPolicy: executions.RetryPolicy{MaxRetries: 3}})
			if again != id {
				t.Fatalf("created again as %s, want %s", again, id)
			}
			live := f.ClaimOne("lane-a", time.Hour)
			if live.AttemptIndex != old.AttemptIndex || live.Epoch != old.Epoch {
				t.Fatalf("the new incarnation's lease is attempt %d epoch %d; the test needs the old one's numbers, %d/%d",
					live.AttemptIndex, live.Epoch, old.AttemptIndex, old.Epoch)
			}

			wantErr(t, c.call(f, old), ff.ErrStaleLease)
			f.WantState(id, state{"active", "leased", "not_applicable", "running_attempt", "active"})
			if err := f.st.Complete(f.ctx, live, []byte("worker 2")); err != nil {
				t.Fatalf("Complete of the live lease after the stale call: %v", err)
			}
			if got := f.Get(id).Result; string(got) != "worker 2" {
				t.Fatalf("result = %q, want worker 2's", got)
			}
		})
	}
}

// inTxErr runs fn in a transaction of its own and returns its error (the
// transaction rolled back) or the commit's.
func inTxErr(f *fixture, fn func(tx pgx.Tx) error) error {
	f.t.Helper()
	return pgx.BeginFunc(f.ctx, f.db.Pool, fn)
}
