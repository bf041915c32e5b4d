package subscribe_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/ffriver/ffriver/subscribe"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// querier is a pool, a connection or a transaction.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// row is one outbox row as a test writes it.
type row struct {
	partition   int
	execID      uuid.UUID
	typ         string
	namespace   *string
	instanceTag *string
	atMs        int64
}

func str(s string) *string { return &s }

// insertLease writes one lease event with the upstream seed's plain column
// list (the search_path is the test's schema) and returns its event_id.
func insertLease(t testing.TB, q querier, r row) int64 {
	t.Helper()
	if r.execID == uuid.Nil {
		r.execID = uuid.New()
	}
	if r.typ == "" {
		r.typ = ff.LeaseAcquired
	}
	if r.atMs == 0 {
		r.atMs = time.Now().UnixMilli()
	}
	var id int64
	err := q.QueryRow(context.Background(),
		`INSERT INTO ff_lease_event (execution_id, lease_id, event_type, occurred_at_ms, partition_key, namespace, instance_tag)
		 VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING event_id`,
		r.execID.String(), "lease-"+r.execID.String()[:8], r.typ, r.atMs, r.partition, r.namespace, r.instanceTag).Scan(&id)
	if err != nil {
		t.Fatalf("insert lease event: %v", err)
	}
	return id
}

// appName returns a unique application_name so a test can find its
// stream's connections in pg_stat_activity.
func appName(t testing.TB) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "ffsub-test-" + hex.EncodeToString(b[:])
}

// newDB returns a migrated schema of its own for the test.
func newDB(t testing.TB) *testdb.DB {
	t.Helper()
	return testdb.New(t, nil)
}

// next returns the next event or fails the test after d.
func next[E any](t testing.TB, s *subscribe.Stream[E], d time.Duration) E {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	ev, err := s.Next(ctx)
	if err != nil {
		t.Fatalf("Next: %v", err)
	}
	return ev
}

// collect returns the next n events, failing on any error.
func collect[E any](t testing.TB, s *subscribe.Stream[E], n int, d time.Duration) []E {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	out := make([]E, 0, n)
	for len(out) < n {
		ev, err := s.Next(ctx)
		if err != nil {
			t.Fatalf("Next after %d of %d events: %v", len(out), n, err)
		}
		out = append(out, ev)
	}
	return out
}

// expectNone checks that no event arrives within d.
func expectNone[E any](t testing.TB, s *subscribe.Stream[E], d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	ev, err := s.Next(ctx)
	if err == nil {
		t.Fatalf("unexpected event %+v", ev)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next: %v, want a timeout", err)
	}
}

// waitFor waits up to d for cond (fftest.Await).
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	fftest.Await(t, d, what, cond)
}

// awaitWritersAlone waits until no transaction of another session with an
// id among the lease events' (between their lowest and highest xact_id) is
// open, except the one whose id is except (0: none). Retention records
// what it deletes per run of ids that spans no transaction running at the
// trim; a transaction of another session (another test's, on a shared
// server) that took an id among the writers', was still open in the
// snapshot a stream's position stands for and ended before the trim sits
// inside such a run, and the conservative gap check then fails a resume
// even after every deleted event (see TestGapAfterRetention). A snapshot
// taken after this wait holds none of those ids in progress.
func awaitWritersAlone(t testing.TB, db *testdb.DB, except int64) {
	t.Helper()
	ctx := context.Background()
	var first, last int64
	if err := db.Pool.QueryRow(ctx, `SELECT min(xact_id), max(xact_id) FROM ff_lease_event`).Scan(&first, &last); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, "no other session's transaction open among the writers'", func() bool {
		var open bool
		if err := db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_snapshot_xip(pg_current_snapshot()) x
			WHERE x::text::bigint BETWEEN $1 AND $2 AND x::text::bigint <> $3)`, first, last, except).Scan(&open); err != nil {
			t.Fatal(err)
		}
		return !open
	})
}

// backends returns the pids of the connections named app.
func backends(t testing.TB, pool *pgxpool.Pool, app string) []int32 {
	t.Helper()
	rows, err := pool.Query(context.Background(),
		`SELECT pid FROM pg_stat_activity WHERE application_name = $1 ORDER BY pid`, app)
	if err != nil {
		t.Fatalf("pg_stat_activity: %v", err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		t.Fatalf("pg_stat_activity: %v", err)
	}
	return pids
}

// terminate ends the backends named app for which cond, a predicate on
// pg_stat_activity ("true" for all), holds, and returns how many it ended.
func terminate(t testing.TB, pool *pgxpool.Pool, app, cond string) int {
	t.Helper()
	return (&fftest.DB{TB: t, Pool: pool}).Count(`SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
		FROM pg_stat_activity WHERE application_name = $1 AND (`+cond+`)`, app)
}

// eventIDs returns the event ids of lease events.
func eventIDs(evs []subscribe.LeaseEvent) []int64 {
	out := make([]int64, len(evs))
	for i, ev := range evs {
		out[i] = ev.EventID
	}
	return out
}
