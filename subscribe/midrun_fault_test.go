package subscribe_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ffriver/ffriver/subscribe"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// queryFault ends the server session of a stream's connection just before
// the stream sends its n-th query (LISTEN aside), as a server restart or
// pg_terminate_backend does between two statements: the query then fails
// on a dead connection.
type queryFault struct {
	admin *pgxpool.Pool
	app   string

	mu    sync.Mutex
	left  int    // queries to let through before the fault
	fired bool   // the fault happened
	sql   string // the query it failed
	err   error  // terminating the session failed
}

func (f *queryFault) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	if conn.Config().RuntimeParams["application_name"] != f.app || strings.HasPrefix(data.SQL, "LISTEN") {
		return ctx
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fired {
		return ctx
	}
	if f.left > 0 {
		f.left--
		return ctx
	}
	f.fired, f.sql = true, data.SQL
	pid := conn.PgConn().PID()
	bg := context.Background()
	if _, err := f.admin.Exec(bg, `SELECT pg_terminate_backend($1)`, pid); err != nil {
		f.err = fmt.Errorf("terminating pid %d: %w", pid, err)
		return ctx
	}
	// The query must meet a session that is gone, not one still exiting.
	for {
		var alive bool
		if err := f.admin.QueryRow(bg, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)`, pid).Scan(&alive); err != nil {
			f.err = fmt.Errorf("waiting for pid %d to exit: %w", pid, err)
			return ctx
		}
		if !alive {
			return ctx
		}
	}
}

func (f *queryFault) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (f *queryFault) state() (fired bool, sql string, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fired, f.sql, f.err
}

// A connection lost at any query of a stream, whatever the stream was doing
// (reading ticks, the rows of transactions that finished at a later tick of
// a run, a page of a batch, the trim records), costs the stream nothing:
// after reconnecting it delivers exactly what a stream that never lost its
// connection delivered, in the same order with the same cursors. The ticks
// are laid out so that runs of ticks hold transactions that were in
// progress at one tick and finished by the next (their rows are read ahead
// and slotted into a later batch of the run), both fewer and more than a
// page of them.
func TestConnectionLostAtEveryQuery(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	lease := func(q querier, n int) {
		t.Helper()
		for range n {
			insertLease(t, q, row{})
		}
	}
	begin := func(n int) pgx.Tx {
		t.Helper()
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback(ctx) })
		lease(tx, n)
		return tx
	}
	commit := func(tx pgx.Tx) {
		t.Helper()
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	tick := func() {
		t.Helper()
		if _, err := db.Pool.Exec(ctx,
			`SELECT FROM ff_stream_ticks((SELECT coalesce(max(tick_id), 0) FROM ff_stream_tick), 1)`); err != nil {
			t.Fatal(err)
		}
	}
	lease(db.Pool, 2)
	tick() // t0: the start's batch ends here
	d, tx1, tx2 := begin(2), begin(3), begin(1)
	lease(db.Pool, 2)
	tick() // t1: d, tx1, tx2 in progress
	commit(d)
	lease(db.Pool, 1)
	tick() // t2: tx1, tx2 in progress; d finished
	commit(tx1)
	tick() // t3: tx2 in progress; tx1 finished
	commit(tx2)
	lease(db.Pool, 2)
	tick() // t4
	const total = 2 + 2 + 3 + 1 + 2 + 1 + 2

	for _, pageSize := range []int{2, 100} {
		t.Run(fmt.Sprintf("page size %d", pageSize), func(t *testing.T) {
			opts := subscribe.Options{Start: subscribe.StartBeginning, PageSize: pageSize}
			ref, err := subscribe.Leases(ctx, db.Pool, fast(t, opts))
			if err != nil {
				t.Fatal(err)
			}
			want := collect(t, ref, total, 10*time.Second)
			ref.Close()

			for n := 0; ; n++ {
				if n > 100 {
					t.Fatal("the stream kept querying before delivering its events")
				}
				app := appName(t)
				fault := &queryFault{admin: db.Pool, app: app, left: n}
				cfg := db.Pool.Config()
				cfg.ConnConfig.Tracer = fault
				pool, err := pgxpool.NewWithConfig(ctx, cfg)
				if err != nil {
					t.Fatal(err)
				}
				o := opts
				o.ApplicationName = app
				s, err := subscribe.Leases(ctx, pool, fast(t, o))
				if err != nil {
					pool.Close()
					if fired, _, ferr := fault.state(); fired && ferr == nil {
						continue // a query of the start: Leases reports it
					}
					t.Fatal(err)
				}
				got, lost := drainLeases(s, total, 10*time.Second)
				fired, sql, ferr := fault.state()
				where := fmt.Sprintf("connection lost before query %d (%s)", n+1, firstLine(sql))
				if fired && lost == 0 && ferr == nil {
					// The fault came after the last event: the stream
					// reports it, and delivers nothing more.
					more, lost2 := drainLeases(s, 0, 10*time.Second)
					got, lost = append(got, more...), lost2
					if lost == 0 {
						t.Errorf("%s: the stream reported no lost connection", where)
					}
				}
				s.Close()
				pool.Close()
				if ferr != nil {
					t.Fatal(ferr)
				}
				if !slices.Equal(eventIDs(got), eventIDs(want)) {
					t.Fatalf("%s: delivered %v, want %v (missing %v)", where, eventIDs(got), eventIDs(want), missing(got, want))
				}
				for i := range got {
					if got[i].Cursor != want[i].Cursor {
						t.Fatalf("%s: event %d has cursor %#v, want %#v", where, got[i].EventID, got[i].Cursor, want[i].Cursor)
					}
				}
				if !fired {
					return // every event came before the n-th query
				}
			}
		})
	}
}

// drainLeases reads events until total arrived and no more followed within
// 100 ms, more arrived than that, or d passed without an event or a
// disconnection (total 0: without a disconnection); it counts the
// disconnections.
func drainLeases(s *subscribe.Stream[subscribe.LeaseEvent], total int, d time.Duration) (got []subscribe.LeaseEvent, lost int) {
	for {
		limit := d
		if len(got) >= total && (total > 0 || lost > 0) {
			limit = 100 * time.Millisecond // room for a repeated event
		}
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		ev, err := s.Next(ctx)
		cancel()
		var disc *subscribe.DisconnectedError
		switch {
		case errors.As(err, &disc):
			lost++
		case err != nil:
			return got, lost
		default:
			got = append(got, ev)
			if len(got) > total {
				return got, lost
			}
		}
	}
}

func missing(got, want []subscribe.LeaseEvent) []int64 {
	var out []int64
	for _, w := range want {
		if !slices.ContainsFunc(got, func(g subscribe.LeaseEvent) bool { return g.EventID == w.EventID }) {
			out = append(out, w.EventID)
		}
	}
	return out
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}
