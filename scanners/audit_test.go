package scanners

import (
	"context"
	"fmt"
	"strings"
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

// The outbox retention audit names each consumer that holds events past
// the retention, by stream (leases first) and name, each with the events it
// holds and a query that lists them; a consumer within the retention, or
// past its maximum lag, holds none.
func TestRetentionAuditNamesEachHoldingConsumer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, db := fftest.NewStore(t, executions.Config{})
	now := time.Now().UnixMilli()
	const retention = time.Hour
	old := now - 2*retention.Milliseconds()
	// Three lease events and two completion events older than the
	// retention, one of each within it.
	if _, err := db.Pool.Exec(ctx, `INSERT INTO ff_lease_event (execution_id, lease_id, event_type, occurred_at_ms, partition_key, namespace,
	     attempt_index, lease_epoch, worker_instance_id)
		SELECT gen_random_uuid()::text, gen_random_uuid()::text, 'acquired', at, 1, 'ns', 0, 1, 'w'
		FROM unnest(ARRAY[$1::bigint, $1, $1, $2]) at`, old, now); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO ff_completion_event (partition_key, execution_id, outcome, namespace, occurred_at_ms, committed_at_ms)
		SELECT 1, gen_random_uuid(), 'success', 'ns', at, at FROM unnest(ARRAY[$1::bigint, $1, $2]) at`, old, now); err != nil {
		t.Fatal(err)
	}
	// Positions that acknowledged nothing (every transaction id is at or
	// past snap_xmax 1), taken when given.
	for _, c := range []struct {
		table, name string
		atMs, maxMs int64
	}{
		{"ff_lease_event", "b", old, 7 * 24 * 3_600_000},
		{"ff_completion_event", "c", old, 7 * 24 * 3_600_000},
		{"ff_lease_event", "a", old, 7 * 24 * 3_600_000},
		{"ff_lease_event", "fresh", now, 7 * 24 * 3_600_000},
		{"ff_completion_event", "lapsed", old, retention.Milliseconds()},
	} {
		if _, err := db.Pool.Exec(ctx, `INSERT INTO ff_stream_consumer (stream, name, cursor, snap_xmin, snap_xmax, snap_xip, position_at_ms, max_lag_ms)
			VALUES ($1, $2, '\x00', 1, 1, '{}', $3, $4)`, c.table, c.name, c.atMs, c.maxMs); err != nil {
			t.Fatal(err)
		}
	}
	got, err := NewOutboxRetentionScanner(retention).Unprocessable(ctx, db.Pool, workers.DueRequest{Store: st, NowMs: now})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		consumer, stream string
		count            int64
	}{{"a", "leases", 3}, {"b", "leases", 3}, {"c", "completions", 2}}
	if len(got) != len(want) {
		t.Fatalf("audit = %+v, want %d sets: consumers a and b of leases, c of completions", got, len(want))
	}
	for i, w := range want {
		u := got[i]
		if u.Count != w.count || !strings.Contains(u.Reason, fmt.Sprintf("of the %s stream", w.stream)) ||
			!strings.Contains(u.Reason, fmt.Sprintf("consumer %q", w.consumer)) ||
			!strings.Contains(u.Reason, fmt.Sprintf("ffctl consumer drop --stream %s %s", w.stream, w.consumer)) {
			t.Errorf("set %d = %d: %s; want %d events of the %s stream kept for %q", i, u.Count, u.Reason, w.count, w.stream, w.consumer)
		}
		var listed int64
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM (`+u.List+`) l`).Scan(&listed); err != nil || listed != w.count {
			t.Errorf("set %d's list query: %d rows (%v), want %d", i, listed, err, w.count)
		}
	}
}
