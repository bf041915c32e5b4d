package subscribe_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/outbox"
	"github.com/ffriver/ffriver/subscribe"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// wait bounds how long a test waits for an event. It is generous for a
// server loaded by the other suites sharing it, not for their
// transactions: streams deliver by pairs of snapshots, so a transaction
// still open delays only its own rows (doc.go), never another test's.
const wait = 30 * time.Second

// fast returns o with a short poll interval and the test's logger.
func fast(t testing.TB, o subscribe.Options) subscribe.Options {
	o.Logger = slog.New(slog.NewTextHandler(t.Output(), nil))
	if o.PollInterval == 0 {
		o.PollInterval = 20 * time.Millisecond
	}
	return o
}

// A row whose transaction took the lower event_id but committed last is
// delivered when it commits; id order would have lost it. Meanwhile the
// other transaction's row, committed first, is not held back: the stream
// follows commit order.
func TestOutOfOrderCommit(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	s, err := subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	txA, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer txA.Rollback(ctx)
	idA := insertLease(t, txA, row{})
	txB, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	idB := insertLease(t, txB, row{})
	if idA >= idB {
		t.Fatalf("ids %d, %d: want A below B", idA, idB)
	}
	if err := txB.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// B is committed with the higher id; A, still open, holds back only
	// its own row.
	first := next(t, s, wait)
	if first.EventID != idB {
		t.Fatalf("got event %d first, want B's %d", first.EventID, idB)
	}
	expectNone(t, s, 200*time.Millisecond)
	if err := txA.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	second := next(t, s, wait)
	if second.EventID != idA {
		t.Fatalf("got event %d, want A's %d", second.EventID, idA)
	}
	if !first.Cursor.Less(second.Cursor) {
		t.Fatalf("cursors not increasing: %#v then %#v", first.Cursor, second.Cursor)
	}
	expectNone(t, s, 100*time.Millisecond)

	// A reader from the start walks the same batches: the same order.
	again, err := subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{Start: subscribe.StartBeginning}))
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if ids := eventIDs(collect(t, again, 2, wait)); !slices.Equal(ids, []int64{idB, idA}) {
		t.Fatalf("second reader got %v, want [%d %d]", ids, idB, idA)
	}
}

// Transactions that finish between the same two ticks form one batch,
// which follows the transaction ids, the same way for every reader.
func TestOrderFollowsTransactions(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	txA, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer txA.Rollback(ctx)
	if _, err := txA.Exec(ctx, "SELECT pg_current_xact_id()"); err != nil { // A's xid first
		t.Fatal(err)
	}
	txB, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer txB.Rollback(ctx)
	idB := insertLease(t, txB, row{}) // lower event id, higher xid
	idA := insertLease(t, txA, row{})
	if err := txB.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := txA.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// No tick was taken while they ran (no stream was open): both fall in
	// the first batch of any reader.
	for i := range 2 {
		s, err := subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{Start: subscribe.StartBeginning}))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if ids := eventIDs(collect(t, s, 2, wait)); !slices.Equal(ids, []int64{idA, idB}) {
			t.Fatalf("reader %d got ids %v, want [%d %d] (xid order)", i, ids, idA, idB)
		}
	}
}

// Many writers commit in random order; every event arrives exactly once,
// and every reader sees the same order.
func TestConcurrentWriters(t *testing.T) {
	t.Parallel()
	const writers, perWriter = 16, 40
	db := newDB(t)
	ctx := context.Background()
	live, err := subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{Start: subscribe.StartBeginning, PageSize: 7, BufferSize: 16}))
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()

	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := 0; i < perWriter; {
				tx, err := db.Pool.Begin(ctx)
				if err != nil {
					errs <- err
					return
				}
				// One to three events per transaction.
				n := min(1+rand.IntN(3), perWriter-i)
				for range n {
					if _, err := tx.Exec(ctx,
						`INSERT INTO ff_lease_event (execution_id, lease_id, event_type, occurred_at_ms, partition_key, namespace, instance_tag)
						 VALUES ($1, NULL, 'renewed', $2, $3, NULL, NULL)`,
						uuid.NewString(), int64(w*1000+i), w); err != nil {
						errs <- err
						_ = tx.Rollback(ctx)
						return
					}
					i++
				}
				time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
				if err := tx.Commit(ctx); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	got := collect(t, live, writers*perWriter, 30*time.Second)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("writer: %v", err)
	}
	seen := map[int64]bool{}
	for i, ev := range got {
		if seen[ev.EventID] {
			t.Fatalf("event %d delivered twice", ev.EventID)
		}
		seen[ev.EventID] = true
		if i > 0 && !got[i-1].Cursor.Less(ev.Cursor) {
			t.Fatalf("cursor %d not after %d: %#v, %#v", i, i-1, ev.Cursor, got[i-1].Cursor)
		}
	}
	expectNone(t, live, 200*time.Millisecond)

	// A second reader from the start (small pages: runs of ticks get cut
	// where their held rows overflow a page), and one resuming mid-stream,
	// see the same sequence.
	all, err := subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{Start: subscribe.StartBeginning, PageSize: 3}))
	if err != nil {
		t.Fatal(err)
	}
	defer all.Close()
	again := collect(t, all, len(got), wait)
	if !slices.Equal(eventIDs(again), eventIDs(got)) {
		t.Fatal("a second reader saw a different order")
	}
	// It read in runs the ticks the live reader took one by one, with the
	// same batches: the same cursors.
	for i := range got {
		if again[i].Cursor != got[i].Cursor {
			t.Fatalf("event %d: cursor %#v, the live reader's %#v", got[i].EventID, again[i].Cursor, got[i].Cursor)
		}
	}
	mid := len(got) / 3
	resumed, err := subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{Start: subscribe.StartAfter, After: got[mid].Cursor}))
	if err != nil {
		t.Fatal(err)
	}
	defer resumed.Close()
	if rest := collect(t, resumed, len(got)-mid-1, wait); !slices.Equal(eventIDs(rest), eventIDs(got[mid+1:])) {
		t.Fatal("resuming mid-stream saw a different suffix")
	}
	expectNone(t, resumed, 100*time.Millisecond)
}

// Resuming after an event's cursor, in its binary or printable form, yields
// exactly the events after it, then new ones.
func TestResumeFromCursor(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	var ids []int64
	for range 10 {
		ids = append(ids, insertLease(t, db.Pool, row{}))
	}
	s, err := subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{Start: subscribe.StartBeginning}))
	if err != nil {
		t.Fatal(err)
	}
	first := collect(t, s, 10, wait)
	s.Close()
	if !slices.Equal(eventIDs(first), ids) {
		t.Fatalf("got %v, want %v", eventIDs(first), ids)
	}

	c, err := subscribe.ParseCursor(first[4].Cursor.String())
	if err != nil {
		t.Fatal(err)
	}
	if c2, err := subscribe.DecodeCursor(first[4].Cursor.Bytes()); err != nil || c2 != c {
		t.Fatalf("binary form: %#v, %v", c2, err)
	}
	s, err = subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{Start: subscribe.StartAfter, After: c}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := eventIDs(collect(t, s, 5, wait)); !slices.Equal(got, ids[5:]) {
		t.Fatalf("resumed: got %v, want %v", got, ids[5:])
	}
	expectNone(t, s, 100*time.Millisecond)
	id := insertLease(t, db.Pool, row{})
	if ev := next(t, s, wait); ev.EventID != id {
		t.Fatalf("new event %d, want %d", ev.EventID, id)
	}
}

// StartNow delivers the transactions that commit after the subscribe call,
// including one that was already open, and nothing committed before.
func TestStartNow(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	insertLease(t, db.Pool, row{})
	open, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Rollback(ctx)
	idOpen := insertLease(t, open, row{})
	idBefore := insertLease(t, db.Pool, row{}) // commits before subscribe, after open's xid

	s, err := subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := open.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	idAfter := insertLease(t, db.Pool, row{})
	got := eventIDs(collect(t, s, 2, wait))
	if !slices.Equal(got, []int64{idOpen, idAfter}) {
		t.Fatalf("got %v, want [%d %d] (not %d, committed before subscribe)", got, idOpen, idAfter, idBefore)
	}
	expectNone(t, s, 150*time.Millisecond)
}

// A legacy 9-byte cursor resumes at the first event with a larger event_id
// and skips exactly the events at or below it, even where commit-safe order
// interleaves them.
func TestLegacyCursor(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	// A takes its xid first; B inserts the lower event id; C comes last.
	// Commit-safe order: A(id2), B(id1), C(id3).
	txA, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer txA.Rollback(ctx)
	if _, err := txA.Exec(ctx, "SELECT pg_current_xact_id()"); err != nil {
		t.Fatal(err)
	}
	txB, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer txB.Rollback(ctx)
	id1 := insertLease(t, txB, row{})
	id2 := insertLease(t, txA, row{})
	for _, tx := range []pgx.Tx{txB, txA} {
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	id3 := insertLease(t, db.Pool, row{})

	// order is every event in commit-safe order; each case adds one.
	order := []int64{id2, id1, id3}
	for _, legacy := range []int64{
		0,
		id1, // B's id1 sorts after A's id2 but must not come again
		id2,
		id3,
	} {
		t.Run(fmt.Sprint("after_", legacy), func(t *testing.T) {
			var want []int64
			for _, id := range order {
				if id > legacy {
					want = append(want, id)
				}
			}
			c, err := subscribe.DecodeCursor(subscribe.Cursor{EventID: legacy, Legacy: true}.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			s, err := subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{Start: subscribe.StartAfter, After: c}))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			got := collect(t, s, len(want), wait)
			if ids := eventIDs(got); !slices.Equal(ids, want) {
				t.Fatalf("got %v, want %v", ids, want)
			}
			expectNone(t, s, 100*time.Millisecond)
			// Then it carries on in commit-safe order.
			id := insertLease(t, db.Pool, row{})
			order = append(order, id)
			if ev := next(t, s, wait); ev.EventID != id || ev.Cursor.Legacy {
				t.Fatalf("new event %+v, want id %d with a commit-safe cursor", ev, id)
			}
			// The newest delivered cursor resumes exactly.
			if len(got) > 0 {
				r, err := subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{Start: subscribe.StartAfter, After: got[len(got)-1].Cursor}))
				if err != nil {
					t.Fatal(err)
				}
				defer r.Close()
				if ev := next(t, r, wait); ev.EventID != id {
					t.Fatalf("resumed at %d, want %d", ev.EventID, id)
				}
			}
		})
	}
}

// A legacy cursor naming an event id the outbox never handed out is
// refused at subscribe time: no stream of this server can have produced
// it, and resuming after it would skip every event up to it.
func TestLegacyCursorBeyondTheSequence(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	// Before any event, 0 is the only good position.
	s, err := subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{Start: subscribe.StartAfter, After: subscribe.Cursor{EventID: 0, Legacy: true}}))
	if err != nil {
		t.Fatalf("legacy cursor of event id 0 on an empty outbox: %v", err)
	}
	s.Close()
	if _, err := subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{Start: subscribe.StartAfter, After: subscribe.Cursor{EventID: 1, Legacy: true}})); !errors.Is(err, subscribe.ErrForeignCursor) {
		t.Fatalf("legacy cursor of event id 1 on an empty outbox: %v, want a *ForeignCursorError", err)
	}
	id := insertLease(t, db.Pool, row{})
	for _, legacy := range []int64{id + 1000, 1 << 62} {
		c := subscribe.Cursor{EventID: legacy, Legacy: true}
		s, err := subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{Start: subscribe.StartAfter, After: c}))
		if err == nil {
			s.Close()
			t.Fatalf("legacy cursor of event id %d accepted; the outbox handed out only up to %d", legacy, id)
		}
		var fe *subscribe.ForeignCursorError
		if !errors.As(err, &fe) || !errors.Is(err, ff.ErrPositionAhead) || fe.CursorEventID != legacy || fe.ServerEventID < id ||
			!strings.Contains(err.Error(), "no stream of this server can have produced it") {
			t.Fatalf("legacy cursor of event id %d: %v; want a *ForeignCursorError naming it", legacy, err)
		}
	}
	// The newest id handed out is a good position: nothing after it yet.
	s, err = subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{Start: subscribe.StartAfter, After: subscribe.Cursor{EventID: id, Legacy: true}}))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
}

// A legacy cursor's consumer cannot have seen a row that was not committed
// when the stream subscribed, whatever its event_id: that row is delivered
// when it commits.
func TestLegacyCursorInFlight(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	open, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Rollback(ctx)
	idOpen := insertLease(t, open, row{})
	idSeen := insertLease(t, db.Pool, row{})

	legacy := subscribe.Cursor{EventID: idSeen, Legacy: true}
	s, err := subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{Start: subscribe.StartAfter, After: legacy}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	expectNone(t, s, 100*time.Millisecond)
	if err := open.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	idNew := insertLease(t, db.Pool, row{})
	if got := eventIDs(collect(t, s, 2, wait)); !slices.Equal(got, []int64{idOpen, idNew}) {
		t.Fatalf("got %v, want [%d %d] (%d was seen)", got, idOpen, idNew, idSeen)
	}
	expectNone(t, s, 100*time.Millisecond)
}

// Filters compare the namespace exactly and the instance tag by value only;
// a NULL column never matches.
func TestFilters(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	rows := []row{
		{namespace: str("ns-a"), instanceTag: str("inst-1")},
		{namespace: str("ns-b"), instanceTag: str("inst-1")},
		{namespace: nil, instanceTag: str("inst-1")},
		{namespace: str("ns-a"), instanceTag: nil},
		{namespace: str("ns-a"), instanceTag: str("inst-2")},
		{namespace: str("NS-A"), instanceTag: str("inst-1")},
		{namespace: str("ns-a"), instanceTag: str("cairn.instance_id=inst-1")},
		{},
	}
	var ids []int64
	for _, r := range rows {
		ids = append(ids, insertLease(t, db.Pool, r))
	}
	last := insertLease(t, db.Pool, row{namespace: str("zz"), instanceTag: str("zz")})
	for _, tc := range []struct {
		name   string
		filter ff.Filter
		want   []int
	}{
		{"none", ff.Filter{}, []int{0, 1, 2, 3, 4, 5, 6, 7}},
		{"namespace", ff.Filter{Namespace: "ns-a"}, []int{0, 3, 4, 6}},
		{"tag_value_only", ff.Filter{InstanceTag: &ff.Tag{Key: ff.InstanceTagKey, Value: "inst-1"}}, []int{0, 1, 2, 5}},
		{"tag_other_key", ff.Filter{InstanceTag: &ff.Tag{Key: "whatever", Value: "inst-1"}}, []int{0, 1, 2, 5}},
		{"both", ff.Filter{Namespace: "ns-a", InstanceTag: &ff.Tag{Key: ff.InstanceTagKey, Value: "inst-1"}}, []int{0}},
		{"nothing", ff.Filter{Namespace: "nope"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{Start: subscribe.StartBeginning, Filter: tc.filter, PageSize: 2}))
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			var want []int64
			for _, i := range tc.want {
				want = append(want, ids[i])
			}
			got := collect(t, s, len(want), wait)
			if g := eventIDs(got); !slices.Equal(g, want) {
				t.Fatalf("got %v, want %v", g, want)
			}
			for _, ev := range got {
				if !tc.filter.MatchesRow(nonEmpty(ev.Namespace), nonEmpty(ev.InstanceTag)) {
					t.Fatalf("event %+v does not match the filter", ev)
				}
			}
			if tc.filter.IsZero() {
				if ev := next(t, s, wait); ev.EventID != last {
					t.Fatalf("got %d, want %d", ev.EventID, last)
				}
			}
			expectNone(t, s, 100*time.Millisecond)
		})
	}
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// A stream covers every partition by default, or exactly the chosen set.
func TestPartitions(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	parts := []int{0, 1, 5, 200, 255, 1, 0}
	var ids []int64
	for _, p := range parts {
		ids = append(ids, insertLease(t, db.Pool, row{partition: p}))
	}
	all, err := subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{Start: subscribe.StartBeginning}))
	if err != nil {
		t.Fatal(err)
	}
	defer all.Close()
	got := collect(t, all, len(ids), wait)
	if !slices.Equal(eventIDs(got), ids) {
		t.Fatalf("all partitions: got %v, want %v", eventIDs(got), ids)
	}
	for i, ev := range got {
		if int(ev.Partition) != parts[i] || int(ev.ExecutionID.Partition) != parts[i] {
			t.Fatalf("event %d: partition %d / %s, want %d", i, ev.Partition, ev.ExecutionID, parts[i])
		}
	}

	some, err := subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{Start: subscribe.StartBeginning, Partitions: []int16{255, 1, 1}}))
	if err != nil {
		t.Fatal(err)
	}
	defer some.Close()
	want := []int64{ids[1], ids[4], ids[5]}
	if got := eventIDs(collect(t, some, 3, wait)); !slices.Equal(got, want) {
		t.Fatalf("partitions {1,255}: got %v, want %v", got, want)
	}
	expectNone(t, some, 100*time.Millisecond)
	insertLease(t, db.Pool, row{partition: 7})
	id := insertLease(t, db.Pool, row{partition: 255})
	if ev := next(t, some, wait); ev.EventID != id {
		t.Fatalf("got %d, want %d", ev.EventID, id)
	}
}

// Rows written with the seed's plain INSERT arrive typed; unknown types are
// skipped; the outbox writer's extra columns arrive too.
func TestLeaseEventFields(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	s, err := subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	exec := uuid.New()
	id := insertLease(t, db.Pool, row{partition: 42, execID: exec, typ: ff.LeaseExpired,
		namespace: str("ns"), instanceTag: str("i-1"), atMs: 1_700_000_000_123})
	insertLease(t, db.Pool, row{typ: "teleported"})
	if _, err := db.Pool.Exec(ctx,
		`INSERT INTO ff_lease_event (execution_id, lease_id, event_type, occurred_at_ms, partition_key, namespace, instance_tag)
		 VALUES ('not-a-uuid', NULL, 'acquired', 1, 0, NULL, NULL)`); err != nil {
		t.Fatal(err)
	}
	w, err := outbox.NewWriter(db.Schema)
	if err != nil {
		t.Fatal(err)
	}
	lease := uuid.New()
	attempt, epoch, worker := int32(3), int64(7), "worker-9"
	wid := ff.NewExecutionID(9)
	if err := w.Lease(ctx, db.Pool, outbox.LeaseRow{ID: wid, Type: ff.LeaseReclaimed, LeaseID: &lease,
		AttemptIndex: &attempt, LeaseEpoch: &epoch, WorkerInstanceID: &worker, OccurredAtMs: 5}); err != nil {
		t.Fatal(err)
	}

	got := collect(t, s, 2, wait)
	ev := got[0]
	wantID := ff.MustParseExecutionID(fmt.Sprintf("{fp:42}:%s", exec))
	if ev.EventID != id || ev.Type != ff.LeaseExpired || ev.ExecutionID != wantID || ev.Partition != 42 ||
		ev.Namespace != "ns" || ev.InstanceTag != "i-1" || ev.AtMs != 1_700_000_000_123 ||
		ev.LeaseID != "lease-"+exec.String()[:8] || ev.AttemptIndex != nil || ev.LeaseEpoch != nil ||
		ev.WorkerInstanceID != "" || ev.Cursor.EventID != id || ev.Cursor.Xact <= 0 {
		t.Fatalf("seed row: %+v", ev)
	}
	if ev.ExecutionID.String() != "{fp:42}:"+exec.String() {
		t.Fatalf("execution id %s", ev.ExecutionID)
	}
	ev = got[1]
	if ev.Type != ff.LeaseReclaimed || ev.ExecutionID != wid || ev.LeaseID != lease.String() ||
		ev.AttemptIndex == nil || *ev.AttemptIndex != 3 || ev.LeaseEpoch == nil || *ev.LeaseEpoch != 7 ||
		ev.WorkerInstanceID != "worker-9" || ev.AtMs != 5 {
		t.Fatalf("writer row: %+v", ev)
	}
	expectNone(t, s, 100*time.Millisecond)
}

func TestCompletions(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	s, err := subscribe.Completions(ctx, db.Pool, fast(t, subscribe.Options{Filter: ff.Filter{Namespace: "ns"}}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	exec, flow := uuid.New(), uuid.New()
	insert := func(p int, ex uuid.UUID, fl *uuid.UUID, outcome string, ns *string) int64 {
		var id int64
		if err := db.Pool.QueryRow(ctx,
			`INSERT INTO ff_completion_event (partition_key, execution_id, flow_id, outcome, namespace, instance_tag, occurred_at_ms)
			 VALUES ($1, $2, $3, $4, $5, 'i-1', 77) RETURNING event_id`, p, ex, fl, outcome, ns).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	id1 := insert(3, exec, &flow, ff.OutcomeSuccess, str("ns"))
	insert(3, uuid.New(), nil, ff.OutcomeFailed, nil)
	id2 := insert(4, uuid.New(), nil, "resumable", str("ns"))
	got := collect(t, s, 2, wait)
	ev := got[0]
	if ev.EventID != id1 || ev.Outcome != ff.OutcomeSuccess || ev.ExecutionID != (ff.ExecutionID{Partition: 3, UUID: exec}) ||
		!ev.FlowID.Valid || ev.FlowID.UUID != flow || ev.Partition != 3 || ev.Namespace != "ns" ||
		ev.InstanceTag != "i-1" || ev.AtMs != 77 {
		t.Fatalf("completion: %+v", ev)
	}
	if got[1].EventID != id2 || got[1].Outcome != "resumable" || got[1].FlowID.Valid {
		t.Fatalf("completion: %+v", got[1])
	}
	expectNone(t, s, 100*time.Millisecond)
}

// faultWait bounds each wait of TestTerminatedConnections: a reconnect on
// two cores loaded by other suites took longer than wait.
const faultWait = 90 * time.Second

// Terminating the stream's connections costs one DisconnectedError each
// time, carrying the last delivered cursor; the stream reconnects and
// delivers every event exactly once, in order.
func TestTerminatedConnections(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	app := appName(t)
	s, err := subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{ApplicationName: app, Start: subscribe.StartBeginning, PageSize: 16}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	// The writer keeps committing until every fault is over, then 100 more,
	// and reports how many it wrote.
	type written struct {
		n   int
		err error
	}
	writerDone := make(chan written, 1)
	faultsDone := make(chan struct{})
	go func() {
		n, tail := 0, -1
		for tail != 0 {
			if tail < 0 {
				select {
				case <-faultsDone:
					tail = 100
				default:
				}
			}
			if _, err := db.Pool.Exec(ctx,
				`INSERT INTO ff_lease_event (execution_id, lease_id, event_type, occurred_at_ms, partition_key, namespace, instance_tag)
				 VALUES ($1, NULL, 'acquired', $2, 0, NULL, NULL)`, uuid.NewString(), n); err != nil {
				writerDone <- written{n, err}
				return
			}
			n++
			if tail > 0 {
				tail--
			}
			time.Sleep(time.Millisecond)
		}
		writerDone <- written{n, nil}
	}()

	type result struct {
		events []subscribe.LeaseEvent
		discs  []*subscribe.DisconnectedError
		before []subscribe.Cursor // last event cursor seen before each disconnect
		err    error
	}
	resc := make(chan result, 1)
	// What the consumer has seen so far, for the faults to wait on.
	var nEvents, nDiscs atomic.Int64
	// sinceDisc counts the events the consumer saw after the latest
	// DisconnectedError: delivery resumed after the outage it reported
	// (events read before the fault and handed over after it do not count).
	var sinceDisc atomic.Int64
	// The consumer runs until the test stops it: a time limit here would
	// fail the test on a machine too busy to reconnect three times in it.
	cctx, stopConsumer := context.WithCancel(ctx)
	defer stopConsumer()
	go func() {
		var r result
		for ev, err := range s.All(cctx) {
			var d *subscribe.DisconnectedError
			switch {
			case errors.As(err, &d):
				sinceDisc.Store(0)
				nDiscs.Add(1)
				r.discs = append(r.discs, d)
				var c subscribe.Cursor
				if len(r.events) > 0 {
					c = r.events[len(r.events)-1].Cursor
				}
				r.before = append(r.before, c)
				continue
			case err != nil:
				if cctx.Err() == nil || !errors.Is(err, context.Canceled) {
					r.err = err
				}
			default:
				r.events = append(r.events, ev)
				nEvents.Add(1)
				sinceDisc.Add(1)
			}
			if err != nil {
				break
			}
		}
		resc <- r
	}()

	// The stream's two connections, told apart by their last statement: the
	// listener's is its LISTEN; the reader's is whatever it ran last (a page
	// read ends with the ROLLBACK of its scoped settings, a poll with a
	// SELECT), never a LISTEN.
	const (
		listenerConn = `query LIKE 'LISTEN%'`
		readerConn   = `query NOT LIKE 'LISTEN%' AND query <> ''`
	)
	// connected: two new connections, and the reader has finished a query
	// on its new one.
	connected := func(prev []int32) func() bool {
		return func() bool {
			now := backends(t, db.Pool, app)
			if len(now) != 2 {
				return false
			}
			for _, p := range now {
				if slices.Contains(prev, p) {
					return false
				}
			}
			var read bool
			if err := db.Pool.QueryRow(ctx, `SELECT count(*) = 1 FROM pg_stat_activity
				WHERE application_name = $1 AND `+readerConn+` AND state = 'idle'`, app).Scan(&read); err != nil {
				t.Fatal(err)
			}
			return read
		}
	}
	pids := backends(t, db.Pool, app)
	if len(pids) != 2 {
		t.Fatalf("want the stream's 2 connections, got %v", pids)
	}
	for i, which := range []string{listenerConn, readerConn, "true"} {
		time.Sleep(50 * time.Millisecond) // let events flow between the faults
		seen := nEvents.Load()
		if n := terminate(t, db.Pool, app, which); n == 0 {
			t.Fatalf("no connection matched %q", which)
		}
		waitFor(t, faultWait, "the stream to reconnect", connected(pids))
		// A fault that hits a stream still reconnecting extends the same
		// outage (one DisconnectedError per outage): wait until this one
		// is reported and the stream delivers again before the next.
		logged := time.Now()
		waitFor(t, faultWait, fmt.Sprintf("the disconnect of fault %d (%s) to be reported and delivery to resume", i, which), func() bool {
			if nDiscs.Load() == int64(i+1) && sinceDisc.Load() > 0 {
				return true
			}
			if time.Since(logged) > 10*time.Second {
				logged = time.Now()
				t.Logf("fault %d: %d disconnects reported (want %d), %d events delivered (%d before the fault)", i, nDiscs.Load(), i+1, nEvents.Load(), seen)
			}
			return false
		})
		pids = backends(t, db.Pool, app)
	}
	close(faultsDone)
	w := <-writerDone
	if w.err != nil {
		t.Fatal(w.err)
	}
	waitFor(t, faultWait, "every written event to be delivered", func() bool { return nEvents.Load() >= int64(w.n) })
	stopConsumer()
	r := <-resc
	if r.err != nil {
		t.Fatalf("stream ended: %v (after %d events)", r.err, len(r.events))
	}
	if len(r.discs) != 3 {
		t.Fatalf("got %d DisconnectedErrors, want one per fault (3)", len(r.discs))
	}
	for i, d := range r.discs {
		if d.Cursor != r.before[i] {
			t.Fatalf("disconnect %d carries %#v, want the last delivered %#v", i, d.Cursor, r.before[i])
		}
		if !errors.Is(d, d.Err) {
			t.Fatal("DisconnectedError does not unwrap")
		}
	}
	seen := map[int64]bool{}
	for i, ev := range r.events {
		if seen[ev.EventID] {
			t.Fatalf("event %d repeated", ev.EventID)
		}
		seen[ev.EventID] = true
		if i > 0 && !r.events[i-1].Cursor.Less(ev.Cursor) {
			t.Fatalf("out of order at %d", i)
		}
	}
	if len(r.events) != w.n {
		t.Fatalf("got %d events, want %d", len(r.events), w.n)
	}
}

// A consumer much slower than the writer loses nothing; the reader waits.
func TestSlowConsumer(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	const total = 3000
	if _, err := db.Pool.Exec(ctx,
		`INSERT INTO ff_lease_event (execution_id, lease_id, event_type, occurred_at_ms, partition_key, namespace, instance_tag)
		 SELECT gen_random_uuid()::text, NULL, 'renewed', g, g % 256, NULL, NULL FROM generate_series(1, $1) g`, total); err != nil {
		t.Fatal(err)
	}
	s, err := subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{Start: subscribe.StartBeginning, BufferSize: 10, PageSize: 50}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var got []subscribe.LeaseEvent
	for i := range 20 { // slow at first: the reader must block, not drop
		got = append(got, next(t, s, wait))
		if i%5 == 0 {
			time.Sleep(20 * time.Millisecond)
		}
	}
	got = append(got, collect(t, s, total-len(got), wait)...)
	for i, ev := range got {
		if ev.AtMs != int64(i+1) {
			t.Fatalf("event %d has at_ms %d, want %d", i, ev.AtMs, i+1)
		}
	}
	expectNone(t, s, 100*time.Millisecond)
}

// Close (or cancelling the subscribe context) releases both connections.
func TestCloseReleasesConnections(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()

	app := appName(t)
	s, err := subscribe.Leases(ctx, db.Pool, subscribe.Options{ApplicationName: app})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(backends(t, db.Pool, app)); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
	s.Close()
	waitFor(t, wait, "the connections to close", func() bool { return len(backends(t, db.Pool, app)) == 0 })
	if _, err := s.Next(ctx); !errors.Is(err, subscribe.ErrClosed) {
		t.Fatalf("Next after Close: %v", err)
	}
	s.Close() // twice is fine

	app2 := appName(t)
	cctx, cancel := context.WithCancel(ctx)
	c, err := subscribe.Completions(cctx, db.Pool, subscribe.Options{ApplicationName: app2})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if n := len(backends(t, db.Pool, app2)); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
	cancel()
	waitFor(t, wait, "the connections to close", func() bool { return len(backends(t, db.Pool, app2)) == 0 })
	if _, err := c.Next(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Next after cancel: %v, want context.Canceled", err)
	}
}

// A cancelled Next leaves the stream usable.
func TestNextContext(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	s, err := subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	expectNone(t, s, 50*time.Millisecond)
	id := insertLease(t, db.Pool, row{})
	if ev := next(t, s, wait); ev.EventID != id {
		t.Fatalf("got %d, want %d", ev.EventID, id)
	}
}

// Bad options are validation errors from the subscribe call.
func TestValidation(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		opts subscribe.Options
	}{
		{"schema", subscribe.Options{Schema: "bad schema;"}},
		{"negative_partition", subscribe.Options{Partitions: []int16{-1}}},
		{"partition_beyond_schema", subscribe.Options{Partitions: []int16{3, 256}}},
		{"cursor_without_start_after", subscribe.Options{After: subscribe.Cursor{Xact: 5, EventID: 1}}},
		{"negative_cursor", subscribe.Options{Start: subscribe.StartAfter, After: subscribe.Cursor{Xact: -1, EventID: 1}}},
		{"legacy_with_xact", subscribe.Options{Start: subscribe.StartAfter, After: subscribe.Cursor{Xact: 4, EventID: 1, Legacy: true}}},
		{"since_without_start_since", subscribe.Options{Since: time.Now()}},
		{"start_since_without_time", subscribe.Options{Start: subscribe.StartSince}},
		{"unknown_start", subscribe.Options{Start: subscribe.Start(9)}},
		{"namespace_nul", subscribe.Options{Filter: ff.Filter{Namespace: "a\x00b"}}},
		{"tag_empty_key", subscribe.Options{Filter: ff.Filter{InstanceTag: &ff.Tag{Value: "v"}}}},
		{"page_size", subscribe.Options{PageSize: subscribe.MaxPageSize + 1}},
		{"negative_page_size", subscribe.Options{PageSize: -1}},
		{"negative_buffer", subscribe.Options{BufferSize: -1}},
		{"poll_interval", subscribe.Options{PollInterval: time.Microsecond}},
		{"application_name", subscribe.Options{ApplicationName: string(make([]byte, 64))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := subscribe.Leases(ctx, db.Pool, tc.opts)
			if !errors.Is(err, ff.ErrValidation) {
				t.Fatalf("Leases: %v, want ff.ErrValidation", err)
			}
			_, err = subscribe.Completions(ctx, db.Pool, tc.opts)
			if !errors.Is(err, ff.ErrValidation) {
				t.Fatalf("Completions: %v, want ff.ErrValidation", err)
			}
		})
	}
	for _, s := range []string{"zz", "03", "02" + "00", "04" + "0000000000000001", "020000000000000001ff",
		"03ffffffffffffffff0000000000000001"} {
		if _, err := subscribe.ParseCursor(s); !errors.Is(err, ff.ErrValidation) {
			t.Errorf("ParseCursor(%q): %v, want ff.ErrValidation", s, err)
		}
	}
	// A schema without ffriver's tables.
	if _, err := subscribe.Leases(ctx, db.Pool, subscribe.Options{Schema: "pg_catalog"}); !errors.Is(err, ff.ErrNotMigrated) ||
		!strings.Contains(err.Error(), `schema "pg_catalog" of database "`) || !strings.Contains(err.Error(), "has no ffriver tables") {
		t.Fatalf("unmigrated schema: %v, want ff.ErrNotMigrated naming the schema and its database", err)
	}
	// A missing schema is said to be missing, in the words every other
	// command uses, with its database (issue 40).
	if _, err := subscribe.Completions(ctx, db.Pool, subscribe.Options{Schema: db.Schema + "_missing"}); !errors.Is(err, ff.ErrNotMigrated) ||
		!strings.Contains(err.Error(), `schema "`+db.Schema+`_missing" does not exist in database "`) {
		t.Fatalf("missing schema: %v, want ff.ErrNotMigrated saying it does not exist, naming its database", err)
	}
}
