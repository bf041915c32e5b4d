package executions_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/fftest"
	"github.com/jackc/pgx/v5"
)

// returnSlack is how much later than its deadline a call may return: the
// Store gives up at the deadline, and this covers a busy machine's
// scheduling.
const returnSlack = 2 * time.Second

// rowHolder is another session holding execution rows in an open
// transaction, as an operator's psql or a long report would.
type rowHolder struct {
	conn *pgx.Conn
	tx   pgx.Tx
	pid  int32
	// observer reads pg_stat_activity from outside the Store's pool.
	observer *pgx.Conn
}

// connect opens a connection of its own on the test's schema, outside the
// Store's pool (which a defect may exhaust).
func (f *fixture) connect() *pgx.Conn {
	f.t.Helper()
	cfg, err := pgx.ParseConfig(fftest.DatabaseURL())
	if err != nil {
		f.t.Fatal(err)
	}
	cfg.RuntimeParams["search_path"] = f.db.Name
	conn, err := pgx.ConnectConfig(f.ctx, cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// holdRows locks ids from a connection of its own and keeps its
// transaction open until release.
func (f *fixture) holdRows(ids []ff.ExecutionID) *rowHolder {
	f.t.Helper()
	conn := f.connect()
	h := &rowHolder{conn: conn, observer: f.connect()}
	var err error
	if err := conn.QueryRow(f.ctx, `SELECT pg_backend_pid()`).Scan(&h.pid); err != nil {
		f.t.Fatal(err)
	}
	if h.tx, err = conn.Begin(f.ctx); err != nil {
		f.t.Fatal(err)
	}
	for _, id := range ids {
		if _, err := h.tx.Exec(f.ctx, `SELECT FROM ff_exec_core WHERE partition_key = $1 AND execution_id = $2 FOR UPDATE`,
			id.Partition, id.UUID); err != nil {
			f.t.Fatal(err)
		}
	}
	return h
}

// blocked counts the backends that wait for the holder's locks.
func (h *rowHolder) blocked(f *fixture) int {
	f.t.Helper()
	var n int
	if err := h.observer.QueryRow(f.ctx, `SELECT count(*) FROM pg_stat_activity WHERE $1::int = ANY (pg_blocking_pids(pid))`,
		h.pid).Scan(&n); err != nil {
		f.t.Fatal(err)
	}
	return n
}

func (h *rowHolder) release(f *fixture) {
	f.t.Helper()
	if err := h.tx.Rollback(f.ctx); err != nil {
		f.t.Fatal(err)
	}
}

// claimAll creates n executions on lane-a and claims them all.
func (f *fixture) claimAll(n int) []executions.Lease {
	f.t.Helper()
	for range n {
		f.Create(executions.CreateParams{Lane: "lane-a"})
	}
	leases, err := f.st.Claim(f.ctx, executions.ClaimParams{Lane: "lane-a", WorkerID: "w", LeaseTTL: time.Hour, Max: n})
	if err != nil || len(leases) != n {
		f.t.Fatalf("Claim: %d leases, %v; want %d", len(leases), err, n)
	}
	return leases
}

// TestBatchedCallsBoundedByTheirCallers is issue 36's second reproduction:
// another session holds 20 executions; 60 Completes run at once, the 20 on
// the held rows with a 1 s deadline. Each of those returns by its deadline
// with its context's error; once they have returned no backend of the
// Store waits on the holder, the pool is idle, an unrelated Renew works,
// and when the holder lets go none of the 20 commits after the fact. The
// other 40 complete. (Built with -tags ffunboundedbatch, the coalescer of
// earlier releases, it fails: the held calls go on waiting on the batch's
// context, holding the pool's connections, and commit later.)
func TestBatchedCallsBoundedByTheirCallers(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	leases := f.claimAll(61)
	spare, leases := leases[60], leases[:60]
	held := leases[:20]
	h := f.holdRows(idsOf(held))

	errs := make([]error, len(leases))
	late := make([]time.Duration, len(leases))
	var wg sync.WaitGroup
	for i, l := range leases {
		wg.Go(func() {
			within := 30 * time.Second
			if i < len(held) {
				within = time.Second
			}
			ctx, cancel := context.WithTimeout(f.ctx, within)
			defer cancel()
			deadline, _ := ctx.Deadline()
			errs[i] = f.st.Complete(ctx, l, []byte("done"))
			late[i] = time.Since(deadline)
		})
	}
	wg.Wait()
	for i := range held {
		if !errors.Is(errs[i], context.DeadlineExceeded) {
			t.Fatalf("Complete of held execution %d = %v, want its deadline's error", i, errs[i])
		}
		if late[i] > returnSlack {
			t.Fatalf("Complete of held execution %d returned %s after its deadline (slack %s)", i, late[i], returnSlack)
		}
	}
	for i := len(held); i < len(leases); i++ {
		if errs[i] != nil {
			t.Fatalf("Complete of free execution %d = %v, want nil", i, errs[i])
		}
	}
	fftest.Await(t, 10*time.Second, "no backend waiting on the holder", func() bool { return h.blocked(f) == 0 })
	fftest.Await(t, 10*time.Second, "the Store's pool idle", func() bool { return f.db.Pool.Stat().AcquiredConns() == 0 })
	ctx, cancel := context.WithTimeout(f.ctx, 3*time.Second)
	defer cancel()
	if _, err := f.st.Renew(ctx, spare, time.Hour); err != nil {
		t.Fatalf("an unrelated Renew while the holder keeps its rows: %v", err)
	}

	h.release(f)
	// Nothing of the given-up calls may land now: a Complete that the
	// caller was told failed must not commit behind its back. Another
	// Complete of each, through the Store, shows the rows took no write
	// meanwhile.
	for _, l := range held {
		f.WantState(l.ID, state{"active", "leased", "not_applicable", "running_attempt", "active"})
	}
	for _, l := range held {
		if err := f.st.Complete(f.ctx, l, []byte("again")); err != nil {
			t.Fatalf("Complete after the holder let go: %v", err)
		}
	}
}

// TestCallsStopWaitingOnTheServer: a plain call and a ...Tx call whose
// context ends while they wait for a row lock return by their deadline, and
// their statements stop on the server too: no backend is left waiting on
// the holder, holding a connection slot and its place in the lock queue.
// (pgx does this: a connection dropped mid-statement sends the server a
// cancel request. The test keeps it so, whatever pool configuration or
// wrapper the Store's calls come to run on.)
func TestCallsStopWaitingOnTheServer(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	leases := f.claimAll(2)
	h := f.holdRows(idsOf(leases))
	calls := map[string]func(ctx context.Context) error{
		"Renew": func(ctx context.Context) error {
			_, err := f.st.Renew(ctx, leases[0], time.Hour)
			return err
		},
		"RenewTx": func(ctx context.Context) error {
			tx, err := f.db.Pool.Begin(f.ctx)
			if err != nil {
				return err
			}
			defer func() { _ = tx.Rollback(f.ctx) }()
			_, err = f.st.RenewTx(ctx, tx, leases[1], time.Hour)
			return err
		},
	}
	for name, call := range calls {
		ctx, cancel := context.WithTimeout(f.ctx, 500*time.Millisecond)
		deadline, _ := ctx.Deadline()
		err := call(ctx)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s on a held row = %v, want its deadline's error", name, err)
		}
		if late := time.Since(deadline); late > returnSlack {
			t.Fatalf("%s returned %s after its deadline", name, late)
		}
		fftest.Await(t, 10*time.Second, name+"'s backend no longer waiting on the holder", func() bool { return h.blocked(f) == 0 })
	}
	h.release(f)
	for _, l := range leases {
		if _, err := f.st.Renew(f.ctx, l, time.Hour); err != nil {
			t.Fatalf("Renew after the holder let go: %v", err)
		}
	}
}

func idsOf(leases []executions.Lease) []ff.ExecutionID {
	ids := make([]ff.ExecutionID, len(leases))
	for i, l := range leases {
		ids[i] = l.ID
	}
	return ids
}
