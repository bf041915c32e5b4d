package subscribe_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/ffriver/ffriver/subscribe"
)

// A named consumer resumes after what it acknowledged, holds retention back
// until it has read the events, and only one stream at a time can be it.
func TestNamedConsumer(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	st, err := executions.Open(ctx, db.Pool, executions.Config{})
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour).UnixMilli()
	var ids []int64
	for i := range 10 {
		ids = append(ids, insertLease(t, db.Pool, row{atMs: old + int64(i)}))
	}
	// The last resume expects no gap after retention deleted only
	// acknowledged events.
	awaitWritersAlone(t, db, 0)
	opts := fast(t, subscribe.Options{Start: subscribe.StartBeginning, Consumer: "billing"})
	s, err := subscribe.Leases(ctx, db.Pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := subscribe.Leases(ctx, db.Pool, opts); !errors.Is(err, subscribe.ErrConsumerBusy) {
		t.Fatalf("a second stream as the same consumer: %v, want ErrConsumerBusy", err)
	}
	if got := eventIDs(collect(t, s, 4, wait)); !slices.Equal(got, ids[:4]) {
		t.Fatalf("got %v, want %v", got, ids[:4])
	}
	s.Close() // acknowledges the four

	// Retention keeps the six the consumer has not read.
	if n := trim(t, st, db.Pool, time.Now().UnixMilli()); n != 0 {
		t.Fatalf("retention deleted %d events the consumer had not acknowledged", n)
	}
	s, err = subscribe.Leases(ctx, db.Pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	if got := eventIDs(collect(t, s, 6, wait)); !slices.Equal(got, ids[4:]) {
		t.Fatalf("resumed consumer got %v, want %v", got, ids[4:])
	}
	expectNone(t, s, 100*time.Millisecond) // acknowledges the six
	more := insertLease(t, db.Pool, row{atMs: old + 100})
	if ev := next(t, s, wait); ev.EventID != more {
		t.Fatalf("got %d, want %d", ev.EventID, more)
	}
	// Every event read: retention deletes them all once the position is
	// stored.
	waitFor(t, wait, "retention to delete what the consumer acknowledged", func() bool {
		trim(t, st, db.Pool, time.Now().UnixMilli())
		return rows(t, db) == 1
	})
	expectNone(t, s, 100*time.Millisecond)
	s.Close()
	if n := trim(t, st, db.Pool, time.Now().UnixMilli()); n != 1 {
		t.Fatalf("retention deleted %d events after the consumer closed, want the last one", n)
	}

	// The stored position is after every deleted event: no gap.
	s, err = subscribe.Leases(ctx, db.Pool, opts)
	if err != nil {
		t.Fatalf("resuming after retention deleted only acknowledged events: %v", err)
	}
	last := insertLease(t, db.Pool, row{})
	if ev := next(t, s, wait); ev.EventID != last {
		t.Fatalf("got %d, want %d", ev.EventID, last)
	}
	s.Close()
}

// A consumer whose position is older than its maximum lag no longer holds
// retention back, and learns of the loss with a gap error.
func TestNamedConsumerMaxLag(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	st, err := executions.Open(ctx, db.Pool, executions.Config{})
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour).UnixMilli()
	for i := range 5 {
		insertLease(t, db.Pool, row{atMs: old + int64(i)})
	}
	opts := fast(t, subscribe.Options{Start: subscribe.StartBeginning, Consumer: "slow", ConsumerMaxLag: 50 * time.Millisecond})
	s, err := subscribe.Leases(ctx, db.Pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	next(t, s, wait)
	s.Close()
	waitFor(t, wait, "retention to stop waiting for the lagging consumer", func() bool {
		return trim(t, st, db.Pool, time.Now().UnixMilli()) > 0
	})
	_, err = subscribe.Leases(ctx, db.Pool, opts)
	var gap *subscribe.GapError
	if !errors.As(err, &gap) || gap.Events < 4 {
		t.Fatalf("resuming the lagging consumer: %v, want a gap of at least 4 events", err)
	}
}

// rows counts the lease events in the table.
func rows(t *testing.T, db *testdb.DB) int {
	t.Helper()
	return (&fftest.DB{TB: t, Pool: db.Pool}).Count(`SELECT count(*) FROM ff_lease_event`)
}
