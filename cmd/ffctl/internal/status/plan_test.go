package status

import (
	"context"
	"testing"

	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/internal/testdb"
)

// ffctl status counts each outbox through a bounded range of its primary
// key, not the whole table (issue 27, item 3), and says "at least" past the
// cap.
func TestStreamCountPlan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t, nil)
	testdb.Seed(t, db, testdb.SeedSize{Executions: 1_000, LeaseEvents: 200_000})
	s := dbutil.Schema(db.Schema)
	for _, table := range []string{"ff_lease_event", "ff_completion_event"} {
		testdb.AssertNoSeqScan(t, db.Pool, []string{table}, s.SQL(streamSQL(table)), StreamCountCap+1)
	}
	var n int64
	if err := db.Pool.QueryRow(ctx, s.SQL(streamSQL("ff_lease_event")), StreamCountCap+1).Scan(&n, new(*int64), new(*int64)); err != nil {
		t.Fatal(err)
	}
	if n != StreamCountCap+1 {
		t.Errorf("counted %d lease events, want the cap and one (%d): the report says at least %d", n, StreamCountCap+1, StreamCountCap)
	}
}
