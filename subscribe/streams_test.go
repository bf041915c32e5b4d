package subscribe_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/internal/outboxretention"
	"github.com/ffriver/ffriver/outbox"
	"github.com/ffriver/ffriver/subscribe"
	"github.com/jackc/pgx/v5"
)

// openElsewhere opens a transaction that holds a transaction id in another
// database of the same server (postgres): the oldest running transaction of
// the whole server, which the stream must not wait for.
func openElsewhere(t *testing.T, cfg *pgx.ConnConfig) (xid int64, end func()) {
	t.Helper()
	ctx := context.Background()
	c := cfg.Copy()
	c.Database = "postgres"
	conn, err := pgx.ConnectConfig(ctx, c)
	if err != nil {
		t.Fatalf("connecting to the postgres database: %v", err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow(ctx, "SELECT pg_current_xact_id()::text::bigint").Scan(&xid); err != nil {
		t.Fatal(err)
	}
	done := false
	end = func() {
		if !done {
			done = true
			_ = tx.Rollback(ctx)
			_ = conn.Close(ctx)
		}
	}
	t.Cleanup(end)
	return xid, end
}

// An idle transaction holding an xid in another database stalls nothing:
// events written after it began arrive while it is still open.
func TestIdleTransactionElsewhereDoesNotStall(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	s, err := subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	idle, end := openElsewhere(t, db.Pool.Config().ConnConfig)
	defer end()

	var ids []int64
	for range 5 {
		ids = append(ids, insertLease(t, db.Pool, row{}))
	}
	got := collect(t, s, len(ids), wait)
	if !slices.Equal(eventIDs(got), ids) {
		t.Fatalf("got %v, want %v", eventIDs(got), ids)
	}
	// The idle transaction is still open, and older than every event.
	var open bool
	if err := db.Pool.QueryRow(ctx, `SELECT NOT pg_visible_in_snapshot($1::bigint::text::xid8, pg_current_snapshot())`, idle).Scan(&open); err != nil {
		t.Fatal(err)
	}
	if !open {
		t.Fatal("the idle transaction ended before the events arrived")
	}
	for _, ev := range got {
		if ev.Cursor.Xact <= idle {
			t.Fatalf("event %d has xid %d, not after the idle transaction's %d", ev.EventID, ev.Cursor.Xact, idle)
		}
	}
}

// A long writer of the same outbox delays only its own events, which arrive
// once it commits, after the events committed before it; many writers
// committing out of order each arrive exactly once; and resuming after any
// cursor of the run yields exactly the events that followed it.
func TestLongWriterAndResumeFromEveryCursor(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	live, err := subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{Start: subscribe.StartBeginning, PageSize: 3}))
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()

	long, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer long.Rollback(ctx)
	longIDs := []int64{insertLease(t, long, row{}), insertLease(t, long, row{})}

	// Out-of-order commits: open several transactions, commit them in
	// reverse, each with one to three events.
	var order []int64
	cursors := map[int64]subscribe.Cursor{}
	for round := range 4 {
		var txs []pgx.Tx
		var ids [][]int64
		for k := range 4 {
			tx, err := db.Pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			var mine []int64
			for range 1 + (round+k)%3 {
				mine = append(mine, insertLease(t, tx, row{}))
			}
			txs, ids = append(txs, tx), append(ids, mine)
		}
		for k := len(txs) - 1; k >= 0; k-- {
			if err := txs[k].Commit(ctx); err != nil {
				t.Fatal(err)
			}
		}
		got := collect(t, live, len(slices.Concat(ids...)), wait)
		// Each transaction's events together, in event order.
		want := map[int64]bool{}
		for _, id := range slices.Concat(ids...) {
			want[id] = true
		}
		for _, ev := range got {
			if !want[ev.EventID] {
				t.Fatalf("round %d: unexpected event %d", round, ev.EventID)
			}
			delete(want, ev.EventID)
			order = append(order, ev.EventID)
			cursors[ev.EventID] = ev.Cursor
		}
	}
	expectNone(t, live, 100*time.Millisecond) // the long writer's events wait
	if err := long.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	tail := collect(t, live, 2, wait)
	if !slices.Equal(eventIDs(tail), longIDs) {
		t.Fatalf("the long writer's events came as %v, want %v", eventIDs(tail), longIDs)
	}
	order = append(order, longIDs...)
	for _, ev := range tail {
		cursors[ev.EventID] = ev.Cursor
	}
	expectNone(t, live, 100*time.Millisecond)

	// Replay the whole run from the start to get every cursor.
	all, err := subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{Start: subscribe.StartBeginning}))
	if err != nil {
		t.Fatal(err)
	}
	defer all.Close()
	run := collect(t, all, len(order), wait)
	if !slices.Equal(eventIDs(run), order) {
		t.Fatalf("a second reader saw %v, the live one %v", eventIDs(run), order)
	}
	// It read the ticks the live reader walked one by one in runs, yet
	// every event carries the same cursor.
	for _, ev := range run {
		if ev.Cursor != cursors[ev.EventID] {
			t.Fatalf("event %d: cursor %#v, the live reader's %#v", ev.EventID, ev.Cursor, cursors[ev.EventID])
		}
	}
	for i, ev := range run {
		for _, c := range []subscribe.Cursor{ev.Cursor, mustParse(t, ev.Cursor.String())} {
			r, err := subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{Start: subscribe.StartAfter, After: c}))
			if err != nil {
				t.Fatalf("resuming after event %d: %v", i, err)
			}
			rest := collect(t, r, len(run)-i-1, wait)
			if !slices.Equal(eventIDs(rest), order[i+1:]) {
				t.Fatalf("resuming after event %d (%d) gave %v, want %v", i, ev.EventID, eventIDs(rest), order[i+1:])
			}
			expectNone(t, r, 20*time.Millisecond)
			r.Close()
		}
	}
}

func mustParse(t *testing.T, s string) subscribe.Cursor {
	t.Helper()
	c, err := subscribe.ParseCursor(s)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// trim runs the retention action as the outbox_retention job does, deleting
// every event that occurred before cutoffMs.
func trim(t *testing.T, st *executions.Store, pool interface {
	Begin(context.Context) (pgx.Tx, error)
}, cutoffMs int64) int64 {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	n, err := outboxretention.Trim(ctx, tx, dbutil.Schema(st.Schema()), outboxretention.TrimParams{Table: outbox.LeaseTable, CutoffMs: cutoffMs, NowMs: st.NowMs(), Limit: 100_000})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	return n
}

// A consumer whose cursor is before events retention deleted gets a typed
// gap error saying what was lost, never a silent resume past the hole; a
// consumer whose cursor is after them does not.
//
// Retention records what it deleted per run of transaction ids that spans
// no transaction still running, so the error's figures are bounds that
// cover every deleted event after the cursor, not exact counts: how many
// runs there are depends on which transactions of the whole server happen
// to be open when retention runs (other tests', on a busy machine). The
// second case holds one open from the middle of the writes to the trim,
// as another session may.
//
// The check is conservative the other way too: a transaction of another
// session that was open, with an id among the writers', in the snapshot of
// the batch a consumer stopped in, and ended before the trim, could have
// written events that retention deleted after the consumer's batch, so
// even a consumer past the last deleted event gets the gap error (only one
// lagging by about the retention can: here it is the whole point). So
// before the stream reads, the test waits until no such transaction is
// open, other than the one it holds itself.
func TestGapAfterRetention(t *testing.T) {
	t.Parallel()
	t.Run("alone", func(t *testing.T) { testGapAfterRetention(t, -1) })
	t.Run("beside a transaction open meanwhile", func(t *testing.T) { testGapAfterRetention(t, 20) })
}

// testGapAfterRetention writes 200 events, reads 50, trims all; with
// openAt ≥ 0 a transaction of another session takes its id after that
// many events and stays open until the trim has committed.
func testGapAfterRetention(t *testing.T, openAt int) {
	db := newDB(t)
	ctx := context.Background()
	st, err := executions.Open(ctx, db.Pool, executions.Config{})
	if err != nil {
		t.Fatal(err)
	}
	const total, read = 200, 50
	at := time.Now().Add(-time.Hour).UnixMilli()
	var other pgx.Tx
	for i := range total {
		if i == openAt {
			if other, err = db.Pool.Begin(ctx); err != nil {
				t.Fatal(err)
			}
			defer other.Rollback(ctx)
			if _, err := other.Exec(ctx, `SELECT pg_current_xact_id()`); err != nil {
				t.Fatal(err)
			}
		}
		insertLease(t, db.Pool, row{atMs: at + int64(i)})
	}
	var held int64
	if other != nil {
		if err := other.QueryRow(ctx, `SELECT pg_current_xact_id()::text::bigint`).Scan(&held); err != nil {
			t.Fatal(err)
		}
	}
	awaitWritersAlone(t, db, held)
	s, err := subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{Start: subscribe.StartBeginning}))
	if err != nil {
		t.Fatal(err)
	}
	got := collect(t, s, total, wait)
	s.Close()
	stopped, end := got[read-1].Cursor, got[total-1].Cursor

	if n := trim(t, st, db.Pool, at+total); n != total {
		t.Fatalf("trimmed %d events, want %d", n, total)
	}
	if other != nil {
		if err := other.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
	}
	_, err = subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{Start: subscribe.StartAfter, After: stopped}))
	var gap *subscribe.GapError
	if !errors.As(err, &gap) || !errors.Is(err, subscribe.ErrGap) {
		t.Fatalf("resuming before deleted events: %v, want a *GapError", err)
	}
	// Every unread event (read..total-1) is covered; runs may add read
	// ones before them, never fewer.
	firstUnread := got[read]
	if gap.Events < total-read || gap.Events > total ||
		gap.FirstEventID < got[0].EventID || gap.FirstEventID > firstUnread.EventID || gap.LastEventID != got[total-1].EventID ||
		gap.FirstAtMs < at || gap.FirstAtMs > firstUnread.AtMs || gap.LastAtMs != at+total-1 ||
		gap.Cursor != stopped || gap.Stream != "ff_lease_event" {
		t.Fatalf("gap %+v: want %d..%d events, from event %d (at %d) or before, up to event %d (at %d)",
			gap, total-read, total, firstUnread.EventID, firstUnread.AtMs, got[total-1].EventID, at+total-1)
	}

	// After the last event, nothing was lost: the stream carries on.
	after, err := subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{Start: subscribe.StartAfter, After: end}))
	if err != nil {
		t.Fatalf("resuming after every deleted event: %v", err)
	}
	defer after.Close()
	id := insertLease(t, db.Pool, row{})
	if ev := next(t, after, wait); ev.EventID != id {
		t.Fatalf("got %d, want %d", ev.EventID, id)
	}
	// From the start is whatever is left.
	fromStart, err := subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{Start: subscribe.StartBeginning}))
	if err != nil {
		t.Fatal(err)
	}
	defer fromStart.Close()
	if ev := next(t, fromStart, wait); ev.EventID != id {
		t.Fatalf("got %d, want %d", ev.EventID, id)
	}
}

// A running stream that falls behind retention stops with the gap error
// instead of skipping what was deleted under it.
func TestGapUnderARunningStream(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	st, err := executions.Open(ctx, db.Pool, executions.Config{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	at := time.Now().Add(-time.Hour).UnixMilli()
	// The writer is still open when retention deletes its neighbours.
	long, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer long.Rollback(ctx)
	insertLease(t, long, row{atMs: at})
	first := insertLease(t, db.Pool, row{atMs: at + 1})
	if ev := next(t, s, wait); ev.EventID != first {
		t.Fatalf("got %d, want %d", ev.EventID, first)
	}
	// Delete the long writer's event before the stream can read it: no
	// tick can be taken while the trim's transaction holds the tick lock,
	// so the stream cannot see the commit before the trim's.
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `LOCK TABLE ff_stream_tick IN EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	if err := long.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := outboxretention.Trim(ctx, tx, dbutil.Schema(st.Schema()), outboxretention.TrimParams{Table: outbox.LeaseTable, CutoffMs: at + 1, NowMs: st.NowMs(), Limit: 10}); err != nil || n != 1 {
		t.Fatalf("trim: %d, %v", n, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	nctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	_, err = s.Next(nctx)
	var gap *subscribe.GapError
	if !errors.As(err, &gap) || gap.Events != 1 {
		t.Fatalf("Next: %v, want a gap of 1 event", err)
	}
	if _, err := s.Next(nctx); !errors.As(err, &gap) {
		t.Fatalf("Next after the gap: %v, want the same terminal error", err)
	}
}

// A cursor naming transactions this server has not reached (a restored
// copy, another server) fails at subscribe time and says so.
func TestForeignCursor(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	var xmax int64
	if err := db.Pool.QueryRow(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint`).Scan(&xmax); err != nil {
		t.Fatal(err)
	}
	ahead := xmax + 1_000_000
	for _, c := range []subscribe.Cursor{
		subscribe.NewBatch(subscribe.Snapshot{Xmin: ahead, Xmax: ahead}, subscribe.Snapshot{Xmin: ahead, Xmax: ahead + 10, Tick: 5}).Cursor(ahead+2, 7),
		{Xact: ahead, EventID: 3},
	} {
		_, err := subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{Start: subscribe.StartAfter, After: c}))
		var fe *subscribe.ForeignCursorError
		if !errors.As(err, &fe) || !errors.Is(err, subscribe.ErrForeignCursor) || fe.ServerXact < xmax || fe.CursorXact < ahead {
			t.Fatalf("cursor %#v: %v, want a *ForeignCursorError", c, err)
		}
	}
}

// A stream says which open writer of its outbox it waits for, and when
// that writer ends.
func TestOnWaitNamesTheOpenWriter(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	waits := make(chan subscribe.Wait, 16)
	s, err := subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{OnWait: func(w subscribe.Wait) { waits <- w }}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	pid := int(conn.Conn().PgConn().PID())
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	id := insertLease(t, tx, row{})

	recv := func() subscribe.Wait {
		t.Helper()
		select {
		case w := <-waits:
			return w
		case <-time.After(wait):
			t.Fatal("no wait notice")
			return subscribe.Wait{}
		}
	}
	w := recv()
	if w.PID != pid || w.Done || w.Stream != "ff_lease_event" || w.Age < subscribe.WaitNoticeAfter {
		t.Fatalf("notice %+v, want the open writer, pid %d", w, pid)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, s, wait); ev.EventID != id {
		t.Fatalf("got %d, want %d", ev.EventID, id)
	}
	if w := recv(); w.PID != pid || !w.Done {
		t.Fatalf("notice %+v, want the writer's end", w)
	}
}

// A stream started from now says where it started: a later subscription
// after that cursor delivers what the first one would have, including the
// row of a transaction open at subscribe time that commits later, and not
// the rows committed before (what a browser reconnecting before its first
// event needs).
func TestStartCursorOfAStreamFromNow(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	before := insertLease(t, db.Pool, row{})
	open, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = open.Rollback(ctx) }()
	held := insertLease(t, open, row{})

	s, err := subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	start := s.StartCursor()
	s.Close()
	if start.IsZero() {
		t.Fatal("StartCursor of a stream from now is the zero cursor, which means the beginning")
	}
	after := insertLease(t, db.Pool, row{})
	if err := open.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	r, err := subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{Start: subscribe.StartAfter, After: start}))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.StartCursor() != start {
		t.Fatalf("StartCursor of a stream after %s is %s", start, r.StartCursor())
	}
	// Both commit after the start; in one batch they come in xact order.
	got := eventIDs(collect(t, r, 2, 10*time.Second))
	slices.Sort(got)
	if !slices.Equal(got, []int64{held, after}) {
		t.Fatalf("resumed after the start cursor: events %v, want %d and %d (not %d, committed before)", got, held, after, before)
	}
	expectNone(t, r, 300*time.Millisecond)
}

// A stream from the beginning says where it started with a cursor that can
// be stored (not the zero cursor, which a cursor file cannot hold): a later
// subscription after it delivers every event still in the table, the ones
// committed since included, even when the first stream delivered none.
func TestStartCursorOfAStreamFromTheBeginning(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	s, err := subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{Start: subscribe.StartBeginning}))
	if err != nil {
		t.Fatal(err)
	}
	start := s.StartCursor()
	s.Close()
	if start.IsZero() {
		t.Fatal("StartCursor of a stream from the beginning is the zero cursor")
	}
	parsed, err := subscribe.ParseCursor(start.String())
	if err != nil || parsed != start {
		t.Fatalf("StartCursor %s does not parse back: %#v, %v", start, parsed, err)
	}
	first := insertLease(t, db.Pool, row{})
	second := insertLease(t, db.Pool, row{})

	r, err := subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{Start: subscribe.StartAfter, After: start}))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got := eventIDs(collect(t, r, 2, wait)); !slices.Equal(got, []int64{first, second}) {
		t.Fatalf("resumed after the start cursor: events %v, want %d and %d", got, first, second)
	}
}

// A cursor records the stream and schema it was taken from, and the other
// stream, or the same stream of another schema, refuses it saying so (issue
// 23, item 5). A cursor of the older form, which records neither, is
// accepted everywhere as it always was.
func TestCursorOfAnotherStream(t *testing.T) {
	t.Parallel()
	db, other := newDB(t), newDB(t)
	ctx := context.Background()
	id := insertLease(t, db.Pool, row{})
	s, err := subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{Start: subscribe.StartBeginning}))
	if err != nil {
		t.Fatal(err)
	}
	ev := next(t, s, wait)
	s.Close()
	if ev.EventID != id {
		t.Fatalf("event %d, want %d", ev.EventID, id)
	}
	here := subscribe.Origin{Stream: subscribe.StreamLeases, Schema: db.Schema}
	for _, c := range []subscribe.Cursor{ev.Cursor, s.StartCursor()} {
		if o, ok := c.Origin(); !ok || o != here {
			t.Fatalf("cursor %#v records %v, %t; want %v", c, o, ok, here)
		}
	}
	c, err := subscribe.ParseCursor(ev.Cursor.String())
	if err != nil {
		t.Fatal(err)
	}

	opts := fast(t, subscribe.Options{Start: subscribe.StartAfter, After: c})
	refused := func(err error, handedTo subscribe.Origin) {
		t.Helper()
		var oe *subscribe.CursorOriginError
		if !errors.As(err, &oe) || !errors.Is(err, subscribe.ErrCursorOrigin) {
			t.Fatalf("a cursor of %v handed to %v: %v, want a *CursorOriginError", here, handedTo, err)
		}
		if oe.TakenFrom != here || oe.HandedTo != handedTo {
			t.Errorf("the error says taken from %v, handed to %v; want %v and %v", oe.TakenFrom, oe.HandedTo, here, handedTo)
		}
		for _, want := range []string{"leases stream of schema \"" + db.Schema + "\"", handedTo.String(), "--from-start"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the error %q does not say %q", err, want)
			}
		}
	}
	_, err = subscribe.Completions(ctx, db.Pool, opts)
	refused(err, subscribe.Origin{Stream: subscribe.StreamCompletions, Schema: db.Schema})
	o2 := opts
	o2.Schema = other.Schema
	_, err = subscribe.Leases(ctx, db.Pool, o2)
	refused(err, subscribe.Origin{Stream: subscribe.StreamLeases, Schema: other.Schema})

	// Its own stream resumes after it.
	s, err = subscribe.Leases(ctx, db.Pool, opts)
	if err != nil {
		t.Fatalf("its own stream: %v", err)
	}
	id2 := insertLease(t, db.Pool, row{})
	if ev := next(t, s, wait); ev.EventID != id2 {
		t.Fatalf("resumed with event %d, want %d", ev.EventID, id2)
	}
	s.Close()

	// The same position without an origin (the format of saved cursors
	// before this one) is accepted by every stream.
	b, _ := c.BatchOf()
	from, to := b.Snapshots()
	old := subscribe.NewBatch(from, to).Cursor(c.Xact, c.EventID)
	if !strings.HasPrefix(old.String(), "04") {
		t.Fatalf("the older form prints as %s", old)
	}
	for _, open := range []func(subscribe.Options) error{
		func(o subscribe.Options) error {
			s, err := subscribe.Completions(ctx, db.Pool, o)
			closeIf(s, err)
			return err
		},
		func(o subscribe.Options) error {
			o.Schema = other.Schema
			s, err := subscribe.Leases(ctx, db.Pool, o)
			closeIf(s, err)
			return err
		},
	} {
		if err := open(fast(t, subscribe.Options{Start: subscribe.StartAfter, After: old})); err != nil {
			t.Errorf("a cursor of the older form was refused: %v", err)
		}
	}
}

func closeIf[E any](s *subscribe.Stream[E], err error) {
	if err == nil {
		s.Close()
	}
}
