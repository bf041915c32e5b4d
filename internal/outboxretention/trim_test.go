package outboxretention_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/internal/outboxretention"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/ffriver/ffriver/outbox"
	"github.com/jackc/pgx/v5"
)

// Trim deletes the events of its table older than the cutoff, at most its
// limit, and refuses bad parameters with an error naming the field,
// deleting nothing.
func TestTrim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t, nil)
	if _, err := db.Pool.Exec(ctx, `INSERT INTO ff_lease_event (execution_id, event_type, occurred_at_ms, partition_key)
		SELECT gen_random_uuid(), 'acquired', g, 0 FROM generate_series(1, 5) g`); err != nil {
		t.Fatal(err)
	}
	trim := func(p outboxretention.TrimParams) (int64, error) {
		var n int64
		err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			var err error
			n, err = outboxretention.Trim(ctx, tx, dbutil.Schema(db.Schema), p)
			return err
		})
		return n, err
	}
	good := outboxretention.TrimParams{Table: outbox.LeaseTable, CutoffMs: 4, NowMs: 1_000, Limit: 2}
	for field, p := range map[string]outboxretention.TrimParams{
		"table":  {Table: "lease", CutoffMs: 4, NowMs: 1_000, Limit: 2},
		"now_ms": {Table: outbox.LeaseTable, CutoffMs: 4, Limit: 2},
		"limit":  {Table: outbox.LeaseTable, CutoffMs: 4, NowMs: 1_000, Limit: outboxretention.MaxTrimLimit + 1},
	} {
		if _, err := trim(p); !errors.Is(err, ff.ErrValidation) || !strings.Contains(err.Error(), field) {
			t.Errorf("Trim with a bad %s: %v, want a validation error naming it", field, err)
		}
	}
	for i, want := range []int64{2, 1, 0} {
		if n, err := trim(good); err != nil || n != want {
			t.Fatalf("Trim %d = %d, %v; want %d", i+1, n, err, want)
		}
	}
	var left int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM ff_lease_event`).Scan(&left); err != nil || left != 2 {
		t.Fatalf("%d events left (%v), want the 2 at or after the cutoff", left, err)
	}
}
