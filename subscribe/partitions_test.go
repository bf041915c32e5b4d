package subscribe_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/internal/outboxretention"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/ffriver/ffriver/outbox"
	"github.com/ffriver/ffriver/subscribe"
	"github.com/jackc/pgx/v5"
)

// Outbox retention by partition (migration 0015, outboxretention.MaintainPartitions)
// keeps every promise the streams make about retention: what it drops is
// recorded, so a cursor before it gets a gap error; a named consumer's
// unacknowledged events keep their partition; a stream reading while a
// partition goes never skips in silence.

// maintain runs one maintenance of the lease outbox's partitions, 1 s wide
// and reaching ahead, dropping what was written before cutoffMs, as the
// outbox_retention job does.
func maintain(t *testing.T, db *testdb.DB, ahead time.Duration, cutoffMs int64) outboxretention.MaintainResult {
	t.Helper()
	ctx := context.Background()
	var res outboxretention.MaintainResult
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		var err error
		res, err = outboxretention.MaintainPartitions(ctx, tx, dbutil.Schema(db.Schema), outboxretention.Maintenance{
			Table: outbox.LeaseTable, Width: time.Second, Ahead: ahead, CutoffMs: cutoffMs, NowMs: time.Now().UnixMilli(),
		})
		return err
	})
	if err != nil {
		t.Fatalf("maintaining the partitions: %v", err)
	}
	return res
}

// dbNowMs is the database's clock, which written_at_ms reads.
func dbNowMs(t *testing.T, db *testdb.DB) int64 {
	t.Helper()
	var ms int64
	if err := db.Pool.QueryRow(context.Background(), `SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint`).Scan(&ms); err != nil {
		t.Fatal(err)
	}
	return ms
}

// partitionedEvents creates the lease outbox's time partitions, waits
// until the database's clock is inside the first (it starts a few seconds
// ahead), writes n events into it and returns when every partition holding
// them is past and old enough to drop (the database's clock a second past
// its range).
func partitionedEvents(t *testing.T, db *testdb.DB, n int) (ids []int64) {
	t.Helper()
	ctx := context.Background()
	// Partitions far enough ahead that the inserts below, one statement
	// each, land in them however slowly a busy machine runs them (8 s
	// ahead, 200 inserts on two cores at load average 40 reached past
	// the last one, into the DEFAULT partition).
	res := maintain(t, db, 45*time.Second, 0)
	if len(res.Created) == 0 {
		t.Fatalf("maintenance created no partition: %+v", res)
	}
	var lo int64
	if err := db.Pool.QueryRow(ctx, `SELECT min(lo_ms) FROM ff_outbox_partition WHERE stream = 'ff_lease_event'`).Scan(&lo); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the database's clock to reach the first partition", func() bool { return dbNowMs(t, db) >= lo })
	for range n {
		ids = append(ids, insertLease(t, db.Pool, row{}))
	}
	var inDefault int
	var written int64
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE tableoid = 'ff_lease_event_default'::regclass), max(written_at_ms)
		FROM ff_lease_event`).Scan(&inDefault, &written); err != nil {
		t.Fatal(err)
	}
	if inDefault != 0 {
		t.Fatalf("%d events in the DEFAULT partition, want every one in a time partition", inDefault)
	}
	var hi int64
	if err := db.Pool.QueryRow(ctx, `SELECT hi_ms FROM ff_outbox_partition WHERE stream = 'ff_lease_event' AND lo_ms <= $1 AND $1 < hi_ms`, written).Scan(&hi); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the partitions written to to be a second in the past", func() bool { return dbNowMs(t, db) >= hi+1000 })
	return ids
}

// A cursor before the events of a dropped partition gets a *GapError that
// covers them; a cursor after them resumes as if nothing happened. The drop
// leaves no dead row behind: the events are gone with their table.
func TestGapAfterPartitionDrop(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	const total, read = 120, 30
	ids := partitionedEvents(t, db, total)
	awaitWritersAlone(t, db, 0) // the resume after every dropped event expects no gap
	s, err := subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{Start: subscribe.StartBeginning}))
	if err != nil {
		t.Fatal(err)
	}
	got := collect(t, s, total, wait)
	s.Close()
	if !slices.Equal(eventIDs(got), ids) {
		t.Fatalf("streamed %v, want %v", eventIDs(got), ids)
	}
	stopped, end := got[read-1].Cursor, got[total-1].Cursor

	res := maintain(t, db, 8*time.Second, time.Now().Add(time.Hour).UnixMilli())
	if res.DroppedEvents != total || len(res.Held)+len(res.Locked) != 0 {
		t.Fatalf("maintenance %+v: want every partition written to dropped, %d events", res, total)
	}
	var left, parts int
	if err := db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM ff_lease_event),
		(SELECT count(*) FROM pg_inherits WHERE inhparent = 'ff_lease_event'::regclass)`).Scan(&left, &parts); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Fatalf("%d events left after the drop", left)
	}
	var registered int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM ff_outbox_partition WHERE stream = 'ff_lease_event'`).Scan(&registered); err != nil {
		t.Fatal(err)
	}
	if parts != registered+1 { // the DEFAULT partition is not registered
		t.Fatalf("%d partitions attached, %d registered: want the registry to match", parts, registered)
	}

	_, err = subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{Start: subscribe.StartAfter, After: stopped}))
	var gap *subscribe.GapError
	if !errors.As(err, &gap) {
		t.Fatalf("resuming before dropped events: %v, want a *GapError", err)
	}
	if gap.Events < total-read || gap.Events > total || gap.FirstEventID > got[read].EventID || gap.LastEventID != ids[total-1] {
		t.Fatalf("gap %+v: want %d..%d events, from event %d or before, up to event %d", gap, total-read, total, got[read].EventID, ids[total-1])
	}

	after, err := subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{Start: subscribe.StartAfter, After: end}))
	if err != nil {
		t.Fatalf("resuming after every dropped event: %v", err)
	}
	defer after.Close()
	id := insertLease(t, db.Pool, row{})
	if ev := next(t, after, wait); ev.EventID != id {
		t.Fatalf("got %d, want %d", ev.EventID, id)
	}
}

// A partition holding an event a named consumer has not acknowledged is
// kept, whatever its age, until the consumer acknowledges it (or falls
// behind its maximum lag); then it is dropped.
func TestNamedConsumerHoldsPartition(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	const total, read = 40, 10
	ids := partitionedEvents(t, db, total)
	opts := fast(t, subscribe.Options{Start: subscribe.StartBeginning, Consumer: "billing"})
	s, err := subscribe.Leases(ctx, db.Pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	collect(t, s, read, wait)
	s.Close()

	cutoff := time.Now().Add(time.Hour).UnixMilli()
	res := maintain(t, db, 8*time.Second, cutoff)
	if len(res.Held) == 0 || res.DroppedEvents != 0 {
		t.Fatalf("maintenance %+v: want the consumer's partition held, no event dropped", res)
	}
	var left int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM ff_lease_event`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != total {
		t.Fatalf("%d events left, want all %d", left, total)
	}

	// The consumer comes back, gets the rest, and acknowledges them.
	s, err = subscribe.Leases(ctx, db.Pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	rest := collect(t, s, total-read, wait)
	if !slices.Equal(eventIDs(rest), ids[read:]) {
		t.Fatalf("the consumer resumed with %v, want %v", eventIDs(rest), ids[read:])
	}
	expectNone(t, s, 200*time.Millisecond) // asks for the next: the last is acknowledged
	s.Close()
	res = maintain(t, db, 8*time.Second, cutoff)
	if len(res.Held) != 0 || res.DroppedEvents != total {
		t.Fatalf("maintenance %+v: want nothing held, %d events dropped", res, total)
	}
}

// A stream reading while retention drops the partition under it delivers
// each event at most once, in order, and either every event or a gap error
// that covers the first one it did not deliver: never a silent skip.
func TestPartitionDroppedWhileStreamReads(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	const total = 200
	ids := partitionedEvents(t, db, total)
	s, err := subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{Start: subscribe.StartBeginning, PageSize: 10}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got := eventIDs(collect(t, s, 15, wait))

	if res := maintain(t, db, 8*time.Second, time.Now().Add(time.Hour).UnixMilli()); res.DroppedEvents != total {
		t.Fatalf("maintenance %+v: want the %d events dropped", res, total)
	}
	rctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var gap *subscribe.GapError
	for len(got) < total {
		ev, err := s.Next(rctx)
		if errors.As(err, &gap) {
			break
		}
		if err != nil {
			t.Fatalf("Next after %d events: %v", len(got), err)
		}
		got = append(got, ev.EventID)
	}
	if !slices.Equal(got, ids[:len(got)]) {
		t.Fatalf("delivered %v, want a prefix of %v", got, ids)
	}
	if len(got) < total && (gap == nil || gap.FirstEventID > ids[len(got)] || gap.LastEventID < ids[len(got)]) {
		t.Fatalf("delivered %d of %d events, then gap %+v: want one covering event %d", len(got), total, gap, ids[len(got)])
	}
	t.Logf("delivered %d of %d events before the gap error", len(got), total)
}
