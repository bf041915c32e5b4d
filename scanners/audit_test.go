package scanners

import (
	"context"
	"testing"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/internal/pipeline"
	"github.com/ffriver/ffriver/workers"
)

// An audit reads at most AuditCap+1 rows that look due, however many there
// are, and says when there were more; its list query still lists them all.
func TestAuditIsBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := fftest.NewStore(t, executions.Config{})
	now := time.Now().UnixMilli()
	const many = pipeline.AuditCap + 50
	// Expired leases of attempts of no execution: none can be processed.
	if _, err := db.Pool.Exec(ctx, `INSERT INTO ff_attempt (partition_key, execution_id, attempt_index, lease_expires_at_ms)
		SELECT 7, gen_random_uuid(), 0, $2::bigint - g FROM generate_series(1, $1) g`, many, now); err != nil {
		t.Fatal(err)
	}
	audit := func() workers.Unprocessable {
		t.Helper()
		got, err := AttemptTimeoutScanner{}.Unprocessable(ctx, db.Pool, workers.DueRequest{Store: st, NowMs: now})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].Reason != "attempt of no execution" {
			t.Fatalf("audit = %+v, want the attempts of no execution", got)
		}
		return got[0]
	}
	u := audit()
	if u.Count != pipeline.AuditCap+1 || !u.AtLeast {
		t.Errorf("audit of %d rows: count %d, at least %v; want %d, at least", many, u.Count, u.AtLeast, pipeline.AuditCap+1)
	}
	var listed int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM (`+u.List+`) l`).Scan(&listed); err != nil || listed != many {
		t.Errorf("the list query: %d rows (%v), want all %d", listed, err, many)
	}

	if _, err := db.Pool.Exec(ctx, `DELETE FROM ff_attempt WHERE lease_expires_at_ms < $1::bigint - 10`, now); err != nil {
		t.Fatal(err)
	}
	if u := audit(); u.Count != 10 || u.AtLeast {
		t.Errorf("audit of 10 rows: count %d, at least %v; want 10, exact", u.Count, u.AtLeast)
	}
}
