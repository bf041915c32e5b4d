package bench_test

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"log/slog"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ffriver/ffriver/cmd/ffctl/internal/bench"
	"github.com/ffriver/ffriver/internal/testdb"
)

// checkRows checks that every row is reported: named, with a unit, and
// with figures that are numbers (finite, not negative), and that the rows
// print as a table and as JSON. How big the figures are is not checked:
// the scenarios measure how much work fits in a time window, which on a
// busy machine may be none (a value of 0 is a report, not a failure).
func checkRows(t *testing.T, ctx context.Context, db *testdb.DB, results []bench.Result) string {
	t.Helper()
	for _, r := range results {
		if r.Scenario == "" || r.Figure == "" || r.Unit == "" {
			t.Errorf("malformed row %+v", r)
		}
		for name, v := range map[string]float64{"value": r.Value, "baseline value": r.BaselineValue, "ratio": r.Ratio} {
			if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
				t.Errorf("%s/%s: %s %v", r.Scenario, r.Figure, name, v)
			}
		}
	}
	var b strings.Builder
	if err := bench.WriteTable(&b, bench.Machine(ctx, db.Pool), results); err != nil {
		t.Fatal(err)
	}
	var j bytes.Buffer
	if err := bench.WriteJSON(&j, "m", results); err != nil {
		t.Fatalf("WriteJSON: %v", err)
	}
	var doc struct{ Results []bench.Result }
	if err := json.Unmarshal(j.Bytes(), &doc); err != nil || len(doc.Results) != len(results) {
		t.Fatalf("the JSON report holds %d rows (%v), want %d", len(doc.Results), err, len(results))
	}
	return b.String()
}

// The scenarios run end to end at a tiny size and report every row; their
// figures are for ffctl bench, not for assertions here.
func TestScenariosRunSmall(t *testing.T) {
	t.Parallel()
	testdb.Reserve(t, 30) // its scenarios' pools and processes: a scheduler (12), a worker (up to 22) and a scratch pool (docs/development.md)
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
	life, err := bench.Lifecycle(ctx, env, bench.LifecycleOptions{Executions: 200, Workers: []int{4}, MaxConns: 8})
	if err != nil {
		t.Fatalf("Lifecycle: %v", err)
	}
	ret, err := bench.Retention(ctx, env, bench.RetentionOptions{Events: 2000})
	if err != nil {
		t.Fatalf("Retention: %v", err)
	}
	scale, err := bench.Scale(ctx, env, bench.ScaleOptions{Executions: 2000, Events: 10_000, Reads: 5, Lifecycle: 100, Workers: 4,
		Leases: 100, StreamDuration: time.Second, CatchUp: 500, RetentionFor: time.Second})
	if err != nil {
		t.Fatalf("Scale: %v", err)
	}
	var plot strings.Builder
	if err := bench.WriteSVG(&plot, "lifecycle", "machine", "workers", "per second", bench.LifecycleSeries(life)); err != nil {
		t.Fatalf("WriteSVG: %v", err)
	}
	if svg := plot.String(); strings.Count(svg, "<polyline") != 3 || !strings.Contains(svg, "River no-op jobs") || !strings.HasSuffix(svg, "</svg>\n") {
		t.Fatalf("lifecycle plot:\n%s", svg)
	}
	table := checkRows(t, ctx, db, slices.Concat(out, exp, lag, idle, life, ret, scale))
	for _, row := range []string{"runner, 4 workers", "plain API claim → complete, 4 workers", "River no-op jobs, 4 workers", "sequential per-row loop", "renew with outbox row", "ffriver River pipeline", "River alone: 300 no-op jobs, 64 workers",
		"lease expiry → expired event at the consumer p99", "delay come due → claimed by a claimer (5 ms poll) p99",
		"deadline passed → expired completion at the consumer max", "scheduler + worker CPU", "Postgres transactions while idle",
		"2000 lease events removed: a partition dropped", "WAL per removed event", "dead tuples left",
		"building the big store", "stream catch-up of 500 events on 2000 executions", "exec get p99 on 2000 executions", "retention pass: outbox events dropped"} {
		if !strings.Contains(table, row) {
			t.Fatalf("table misses %q:\n%s", row, table)
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

// The soak runs end to end in seconds, reports its rows and draws a
// well-formed plot; its figures are not checked.
func TestSoakRunsSmall(t *testing.T) {
	t.Parallel()
	testdb.Reserve(t, 30) // its scenarios' pools and processes: a scheduler (12), a worker (up to 22) and a scratch pool (docs/development.md)
	ctx := context.Background()
	db := testdb.New(t, &testdb.Options{NoMigrate: true})
	prefix := testdb.SchemaName("benchsoak") + "_"
	env := &bench.Env{URL: testdb.URL(), Logger: slog.New(slog.DiscardHandler), Prefix: prefix}
	var plot bytes.Buffer
	res, err := bench.Soak(ctx, env, bench.SoakOptions{Duration: 20 * time.Second, Sample: 5 * time.Second,
		Retention: 5 * time.Second, Rate: 200, Workers: 8, Vacuum: 2 * time.Second, Plot: &plot, PlotSubtitle: "machine"})
	if err != nil {
		t.Fatalf("Soak: %v", err)
	}
	table := checkRows(t, ctx, db, res)
	for _, row := range []string{"transitions/s, last sample (t=20s)", "first sample (t=5s)", "transitions/s over the run",
		"total bytes at the end (t=20s)", "first sample at or after the first retention window (t=5s)",
		"dead tuples at the end, lease and completion outboxes", "dead tuples at the end, executions+attempts",
		"dead tuples at the end, river_job", "| 15s |", "stood in for it every 2s"} {
		if !strings.Contains(table, row) {
			t.Errorf("table misses %q:\n%s", row, table)
		}
	}
	var doc struct {
		XMLName   xml.Name
		Polylines []struct{} `xml:"polyline"`
	}
	if err := xml.Unmarshal(plot.Bytes(), &doc); err != nil || doc.XMLName.Local != "svg" || len(doc.Polylines) != 7+2+5 {
		t.Fatalf("soak plot (%v, <%s>, %d lines):\n%s", err, doc.XMLName.Local, len(doc.Polylines), plot.String())
	}
	var left int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE starts_with(nspname, $1)`, prefix).Scan(&left); err != nil || left != 0 {
		t.Fatalf("scratch schemas left: %d, %v", left, err)
	}
}

// A scenario whose window fits no work at all (a machine busy with
// something else) still reports its rows: 0 tx/s and no ratio, not a NaN
// that the JSON report cannot hold. A window of a nanosecond makes that
// happen every time.
func TestOutboxReportsAWindowWithoutWork(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t, &testdb.Options{NoMigrate: true})
	prefix := testdb.SchemaName("benchnil") + "_"
	env := &bench.Env{URL: testdb.URL(), Logger: slog.New(slog.DiscardHandler), Prefix: prefix}
	out, err := bench.Outbox(ctx, env, bench.OutboxOptions{Writers: 2, PerWriter: 2, Duration: time.Nanosecond})
	if err != nil {
		t.Fatalf("Outbox: %v", err)
	}
	if len(out) != 1 {
		t.Fatalf("%d rows, want 1: %+v", len(out), out)
	}
	checkRows(t, ctx, db, out)
}
