package bench_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ffriver/ffriver/cmd/ffctl/internal/bench"
	"github.com/ffriver/ffriver/internal/testdb"
)

// The scenarios run end to end at a tiny size and produce sane rows; their
// figures are for ffctl bench, not for assertions here.
func TestScenariosRunSmall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t, &testdb.Options{NoMigrate: true})
	// A prefix of this run's own, so that another bench running on the same
	// server does not count as a leftover.
	prefix := testdb.SchemaName("bench") + "_"
	env := &bench.Env{URL: testdb.URL(), Logger: slog.New(slog.DiscardHandler), Prefix: prefix}

	out, err := bench.Outbox(ctx, env, bench.OutboxOptions{Writers: 2, PerWriter: 2, Duration: 300 * time.Millisecond})
	if err != nil {
		t.Fatalf("Outbox: %v", err)
	}
	exp, err := bench.Expire(ctx, env, bench.ExpireOptions{Leases: 300, Clients: 4})
	if err != nil {
		t.Fatalf("Expire: %v", err)
	}
	lag, err := bench.Lag(ctx, env, bench.LagOptions{ExpiriesPerSec: 100, Duration: 2 * time.Second})
	if err != nil {
		t.Fatalf("Lag: %v", err)
	}
	idle, err := bench.Idle(ctx, env, bench.IdleOptions{Duration: 2 * time.Second, InProcess: true})
	if err != nil {
		t.Fatalf("Idle: %v", err)
	}
	results := slices.Concat(out, exp, lag, idle)
	for _, r := range results {
		if r.Value <= 0 {
			t.Errorf("%s/%s: value %v", r.Scenario, r.Figure, r.Value)
		}
	}
	var b strings.Builder
	if err := bench.WriteTable(&b, bench.Machine(ctx, db.Pool), results); err != nil {
		t.Fatal(err)
	}
	for _, row := range []string{"sequential per-row loop", "renew with outbox row", "ffriver River pipeline", "River alone: 300 no-op jobs, 64 workers",
		"lease expiry → expired event at the consumer p99", "scheduler + worker CPU", "Postgres transactions while idle"} {
		if !strings.Contains(b.String(), row) {
			t.Fatalf("table misses %q:\n%s", row, b.String())
		}
	}
	// No scratch schema is left behind.
	var left int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE starts_with(nspname, $1)`, prefix).Scan(&left); err != nil || left != 0 {
		t.Fatalf("scratch schemas left: %d, %v", left, err)
	}
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_database WHERE starts_with(datname, $1)`, prefix).Scan(&left); err != nil || left != 0 {
		t.Fatalf("scratch databases left: %d, %v", left, err)
	}
}
