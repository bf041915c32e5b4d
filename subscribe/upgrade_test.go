package subscribe_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/ffriver/ffriver/migrations"
	"github.com/ffriver/ffriver/subscribe"
)

// A schema of the release before the outboxes were partitioned (migration
// 0014) upgrades in place with streams in flight: a cursor taken before
// the upgrade resumes with exactly the events after it, before and after
// the upgrade; a named consumer resumes after its acknowledged position;
// event ids go on counting. The old table becomes one partition, which
// retention drops whole once it is old enough and nobody needs it; a
// cursor into it then gets a gap error.
func TestUpgradeToPartitionedOutboxKeepsCursors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t, &testdb.Options{NoMigrate: true})
	if _, err := migrations.Migrate(ctx, db.Pool, db.Schema, &migrations.Options{UpTo: 14}); err != nil {
		t.Fatal(err)
	}
	var ids []int64
	write := func(n int) {
		for range n {
			ids = append(ids, insertLease(t, db.Pool, row{}))
		}
	}
	write(10)
	s, err := subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{Start: subscribe.StartBeginning}))
	if err != nil {
		t.Fatal(err)
	}
	cursor := collect(t, s, 4, wait)[3].Cursor
	s.Close()
	consumer := fast(t, subscribe.Options{Start: subscribe.StartBeginning, Consumer: "audit"})
	s, err = subscribe.Leases(ctx, db.Pool, consumer)
	if err != nil {
		t.Fatal(err)
	}
	collect(t, s, 6, wait)
	s.Close() // acknowledges the six

	write(5) // after the cursors, before the upgrade

	res, err := migrations.Migrate(ctx, db.Pool, db.Schema, nil)
	if err != nil {
		t.Fatalf("upgrading: %v", err)
	}
	if !slices.Contains(res.Applied, "0015_outbox_partitions") {
		t.Fatalf("applied %v, want 0015_outbox_partitions", res.Applied)
	}
	var legacy int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM ff_lease_event_legacy`).Scan(&legacy); err != nil {
		t.Fatal(err)
	}
	if legacy != 15 {
		t.Fatalf("%d events in the legacy partition, want the 15 written before the upgrade", legacy)
	}
	write(5)
	if ids[15] <= ids[14] {
		t.Fatalf("event id %d after the upgrade, %d before: want ids to go on counting", ids[15], ids[14])
	}

	s, err = subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{Start: subscribe.StartAfter, After: cursor}))
	if err != nil {
		t.Fatalf("resuming a cursor of the release before: %v", err)
	}
	if got := eventIDs(collect(t, s, 16, wait)); !slices.Equal(got, ids[4:]) {
		t.Fatalf("resumed with %v, want %v", got, ids[4:])
	}
	expectNone(t, s, 200*time.Millisecond)
	s.Close()
	s, err = subscribe.Leases(ctx, db.Pool, consumer)
	if err != nil {
		t.Fatalf("resuming the named consumer: %v", err)
	}
	if got := eventIDs(collect(t, s, 14, wait)); !slices.Equal(got, ids[6:]) {
		t.Fatalf("the consumer resumed with %v, want %v", got, ids[6:])
	}
	expectNone(t, s, 200*time.Millisecond)
	s.Close()

	// Retention drops the old table whole once its events are past the
	// cutoff (and the database's clock a second past the upgrade).
	var upgradedAt int64
	if err := db.Pool.QueryRow(ctx, `SELECT written_before_ms FROM ff_outbox_partition WHERE partition_name = 'ff_lease_event_legacy'`).Scan(&upgradedAt); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the database's clock a second past the upgrade", func() bool { return dbNowMs(t, db) >= upgradedAt+1000 })
	if r := maintain(t, db, 8*time.Second, time.Now().Add(time.Hour).UnixMilli()); r.DroppedEvents != 15 || !slices.Contains(r.Dropped, "ff_lease_event_legacy") {
		t.Fatalf("maintenance %+v: want the legacy partition's 15 events dropped", r)
	}
	_, err = subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{Start: subscribe.StartAfter, After: cursor}))
	var gap *subscribe.GapError
	if !errors.As(err, &gap) || gap.LastEventID != ids[14] {
		t.Fatalf("resuming into the dropped partition: %v, want a gap error up to event %d", err, ids[14])
	}
	var left int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM ff_lease_event`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 5 {
		t.Fatalf("%d events left, want the 5 written after the upgrade", left)
	}
}
