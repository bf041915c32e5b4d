package bench_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ffriver/ffriver/cmd/ffctl/internal/bench"
	"github.com/ffriver/ffriver/internal/testdb"
)

// The stream scenario runs end to end at a tiny size and yields its ten
// rows with sane values; the figures themselves are for ffctl bench, not for
// assertions here.
func TestStreamScenarioRunsSmall(t *testing.T) {
	t.Parallel()
	testdb.Reserve(t, 15) // its scenarios' pools and processes (docs/development.md)
	ctx := context.Background()
	db := testdb.New(t, &testdb.Options{NoMigrate: true})
	// A prefix of this run's own, so that another bench running on the same
	// server (or TestScenariosRunSmall beside it) does not count as a
	// leftover.
	prefix := testdb.SchemaName("stream") + "_"
	env := &bench.Env{URL: testdb.URL(), Logger: slog.New(slog.DiscardHandler), Prefix: prefix}

	results, err := bench.Stream(ctx, env, bench.StreamOptions{
		EventsPerSec: 200, Duration: 600 * time.Millisecond, CatchUp: 3000, Writers: 2, LeasesPerWriter: 2,
	})
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	if len(results) != 10 {
		t.Fatalf("%d rows, want 10: %+v", len(results), results)
	}
	for _, r := range results {
		if r.Scenario != "stream" || r.Figure == "" || r.Unit == "" {
			t.Errorf("malformed row %+v", r)
		}
	}
	for i, r := range results[:3] { // latencies: p50 ≤ p99 ≤ max, baseline measured
		if r.Unit != "ms" || r.BaselineValue <= 0 {
			t.Errorf("latency row %d: %+v", i, r)
		}
		if i > 0 && r.Value < results[i-1].Value {
			t.Errorf("%s (%v ms) below %s (%v ms)", r.Figure, r.Value, results[i-1].Figure, results[i-1].Value)
		}
	}
	if r := results[0]; r.Met == nil || r.Target == "" || !strings.Contains(r.Note, "poll only") {
		t.Errorf("p50 row lacks its target or note: %+v", r)
	}
	for i, r := range results[3:7] { // with an idle transaction: p50 then p99, against the run without
		if r.Unit != "ms" || r.BaselineValue <= 0 || r.Met == nil || !strings.Contains(r.Figure, "idle transaction") {
			t.Errorf("idle row %d: %+v", i, r)
		}
	}
	if !strings.Contains(results[3].Figure, "another database") || !strings.Contains(results[5].Figure, "outbox") {
		t.Errorf("idle rows: %q, %q", results[3].Figure, results[5].Figure)
	}
	if r := results[7]; r.Unit != "events/s" || r.Value <= 0 || !strings.Contains(r.Figure, "replay") {
		t.Errorf("replay row: %+v", r)
	}
	if r := results[8]; r.Unit != "events/s" || r.Value <= 0 || r.Met == nil || !strings.Contains(r.Figure, "3000 events") {
		t.Errorf("catch-up row: %+v", r)
	}
	if r := results[9]; r.Unit != "MiB" || r.Value < 0 || r.BaselineValue <= 0 || r.Met == nil {
		t.Errorf("heap row: %+v", r)
	}

	var b strings.Builder
	if err := bench.WriteTable(&b, bench.Machine(ctx, db.Pool), results); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "commit → consumer p99") || !strings.Contains(b.String(), "catch-up of 3000 events") {
		t.Fatalf("table misses rows:\n%s", b.String())
	}
	var left int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE starts_with(nspname, $1)`, prefix).Scan(&left); err != nil || left != 0 {
		t.Fatalf("scratch schemas left: %d, %v", left, err)
	}
}
