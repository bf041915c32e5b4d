package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ffriver/ffriver"
	"github.com/ffriver/ffriver/cmd/ffctl/internal/status"
	"github.com/ffriver/ffriver/cmd/internal/cli"
	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/internal/outboxretention"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/ffriver/ffriver/outbox"
	"github.com/ffriver/ffriver/subscribe"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
)

func TestStatusRefusesUnmigratedSchema(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, &testdb.Options{NoMigrate: true})
	var stderr bytes.Buffer
	code := runStatus(context.Background(), []string{"--database-url", testdb.URL(), "--schema", db.Schema}, &bytes.Buffer{}, &stderr)
	if code != cli.ExitNotMigrated || !strings.Contains(stderr.String(), "ffctl migrate") {
		t.Fatalf("exit %d, stderr %q; want %d and a pointer to ffctl migrate", code, stderr.String(), cli.ExitNotMigrated)
	}
}

// Status shows due work per scanner with its age, River's queues, and the
// events a still-open writer holds back.
func TestStatusReport(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t, nil)
	// The store's clock runs an hour behind: the lease it grants below has
	// long expired by the time status looks.
	st, err := executions.Open(ctx, db.Pool, executions.Config{Schema: db.Schema, Clock: ff.NewManualClock(time.Now().Add(-time.Hour).UnixMilli())})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := st.Create(ctx, executions.CreateParams{Lane: "l", DelayUntil: time.Now().Add(-time.Duration(i+1) * time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.Create(ctx, executions.CreateParams{Lane: "l"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Claim(ctx, executions.ClaimParams{Lane: "l", LeaseTTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	// An open writer holds back an event committed after it.
	open, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Rollback(ctx)
	if _, err := open.Exec(ctx, `INSERT INTO ff_lease_event (execution_id, event_type, occurred_at_ms, partition_key) VALUES (gen_random_uuid()::text, 'renewed', 1, 0)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO ff_lease_event (execution_id, event_type, occurred_at_ms, partition_key) VALUES (gen_random_uuid()::text, 'renewed', 2, 0)`); err != nil {
		t.Fatal(err)
	}

	// A named consumer, attached.
	consumer, err := subscribe.Leases(ctx, db.Pool, subscribe.Options{Consumer: "audit"})
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()

	var out, stderr bytes.Buffer
	report := func() status.Report {
		t.Helper()
		out.Reset()
		if code := runStatus(ctx, []string{"--database-url", testdb.URL(), "--schema", db.Schema, "--format", "json"}, &out, &stderr); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
		var r status.Report
		if err := json.Unmarshal(out.Bytes(), &r); err != nil {
			t.Fatalf("%v: %s", err, out.String())
		}
		return r
	}
	leasesOf := func(r status.Report) *status.Stream {
		for i := range r.Streams {
			if r.Streams[i].Name == "leases" {
				return &r.Streams[i]
			}
		}
		return nil
	}
	// The open writer shows once it has been open for a second.
	var r status.Report
	fftest.Await(t, 30*time.Second, "the open writer in the report", func() bool {
		r = report()
		l := leasesOf(r)
		return l != nil && len(l.Waiting) > 0
	})
	due := map[string]status.Scanner{}
	for _, s := range r.Scanners {
		due[s.Name] = s
	}
	if d := due["delayed_promoter"]; d.Due != 3 || d.OldestOverdue < 3*time.Minute-10*time.Second || d.OldestOverdue > 4*time.Minute {
		t.Errorf("delayed_promoter = %+v, want 3 due, oldest ~3m", d)
	}
	if d := due["attempt_timeout"]; d.Due != 1 || d.OldestOverdue <= 0 {
		t.Errorf("attempt_timeout = %+v, want 1 due", d)
	}
	if d := due["execution_deadline"]; d.Due != 0 {
		t.Errorf("execution_deadline = %+v, want nothing due", d)
	}
	// acquired (claim) + the committed plain row; the open one is invisible.
	openPID := 0
	if err := open.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&openPID); err != nil {
		t.Fatal(err)
	}
	if leases := leasesOf(r); leases == nil || leases.Events != 2 || len(leases.Waiting) != 1 || leases.Waiting[0].PID != openPID {
		t.Errorf("leases stream = %+v, want 2 events and the open writer, pid %d", leases, openPID)
	}
	// No scheduler ran: no time partition, both events in the DEFAULT one.
	if leases := leasesOf(r); leases == nil || leases.Partitions != 0 || leases.DefaultRows != 2 || leases.AheadUntilMs != nil {
		t.Errorf("leases stream = %+v, want no time partition and 2 rows in the DEFAULT partition", leases)
	}
	if len(r.Consumers) != 1 || r.Consumers[0].Name != "audit" || !r.Consumers[0].Attached || r.Consumers[0].HoldsRetention ||
		r.Consumers[0].Stream != "leases" || r.Consumers[0].Retention != "within retention" {
		t.Errorf("consumers = %+v, want audit of leases, attached, within retention", r.Consumers)
	}
	if r.OldestWriter == nil || r.OldestWriter.Age <= 0 {
		t.Errorf("oldest writer = %+v, want the open transaction", r.OldestWriter)
	}

	out.Reset()
	if code := runStatus(ctx, []string{"--database-url", testdb.URL(), "--schema", db.Schema}, &out, &stderr); code != 0 {
		t.Fatalf("text: exit %d: %s", code, stderr.String())
	}
	for _, want := range []string{"attempt_timeout", "delayed_promoter", "dependency", "waiting on open writers", "1 (oldest: pid", "audit", "oldest open writer: pid",
		"leases partitions: no time partition: every event is in the DEFAULT partition (2)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("text output lacks %q:\n%s", want, out.String())
		}
	}
}

// Rows no scan can process (an expired lease of an attempt of no execution,
// one of an execution in a foreign state, one in a partition outside the
// schema's count) are not due work: status counts them apart as
// unprocessable, with a query listing them, and no "oldest overdue" grows
// for them.
func TestStatusUnprocessable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t, nil)
	st, err := executions.Open(ctx, db.Pool, executions.Config{Schema: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Create(ctx, executions.CreateParams{Lane: "l"}); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO ff_attempt (partition_key, execution_id, attempt_index, lease_expires_at_ms) VALUES (3, gen_random_uuid(), 0, 1)`,
		`INSERT INTO ff_attempt (partition_key, execution_id, attempt_index, lease_expires_at_ms) VALUES (300, gen_random_uuid(), 0, 1)`,
		`INSERT INTO ff_attempt (partition_key, execution_id, attempt_index, lease_expires_at_ms) SELECT partition_key, execution_id, 0, 1 FROM ff_exec_core`,
		`UPDATE ff_exec_core SET lifecycle_phase = 'running'`,
	} {
		if _, err := db.Pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var out, stderr bytes.Buffer
	if code := runStatus(ctx, []string{"--database-url", testdb.URL(), "--schema", db.Schema, "--format", "json"}, &out, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var r status.Report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	var at *status.Scanner
	for i := range r.Scanners {
		if r.Scanners[i].Name == "attempt_timeout" {
			at = &r.Scanners[i]
		}
	}
	if at == nil || at.Due != 0 || at.OldestOverdue != 0 || at.UnprocessableCount() != 3 || len(at.Unprocessable) != 3 {
		t.Fatalf("attempt_timeout = %+v, want nothing due and 3 unprocessable rows for 3 reasons", at)
	}
	for _, u := range at.Unprocessable {
		var n int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM (`+u.List+`) x`).Scan(&n); err != nil || n != 1 {
			t.Errorf("%q: its query lists %d rows (%v), want 1: %s", u.Reason, n, err, u.List)
		}
	}

	out.Reset()
	if code := runStatus(ctx, []string{"--database-url", testdb.URL(), "--schema", db.Schema}, &out, &stderr); code != 0 {
		t.Fatalf("text: exit %d: %s", code, stderr.String())
	}
	for _, want := range []string{"unprocessable\n", "unprocessable: attempt_timeout: 1 (attempt of no execution)",
		"unprocessable: attempt_timeout: 1 (execution in an unknown lifecycle_phase)", "unprocessable: attempt_timeout: 1 (partition outside 0..255)",
		"list them: SELECT a.partition_key"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("text output lacks %q:\n%s", want, out.String())
		}
	}
}

// While outbox partition maintenance waits for a lock another session
// holds (a session idle in a transaction that read the outbox), status
// says so on the stream's line, naming the session, since when and what is
// left; once a pass does the work, the line goes.
func TestStatusShowsRetentionWaitingForALock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t, nil)
	maintain := func() outboxretention.MaintainResult {
		t.Helper()
		var r outboxretention.MaintainResult
		if err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			var err error
			r, err = outboxretention.MaintainPartitions(ctx, tx, dbutil.Schema(db.Schema), outboxretention.Maintenance{Table: outbox.LeaseTable, Width: time.Minute})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return r
	}
	text := func() string {
		t.Helper()
		var out, stderr bytes.Buffer
		if code := runStatus(ctx, []string{"--database-url", testdb.URL(), "--schema", db.Schema}, &out, &stderr); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
		return out.String()
	}

	reader, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Rollback(ctx)
	var pid int
	if _, err := reader.Exec(ctx, `SET LOCAL application_name = 'bi-report'`); err != nil {
		t.Fatal(err)
	}
	if err := reader.QueryRow(ctx, `SELECT pg_backend_pid() FROM (SELECT count(*) FROM ff_lease_event) n`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if r := maintain(); !r.Deferred() {
			t.Fatalf("a pass beside the idle reader: %+v; want it to leave the attach for the next one", r)
		}
	}
	out := text()
	line := ""
	for l := range strings.Lines(out) {
		if strings.HasPrefix(l, "leases outbox retention: ") {
			line = l
		}
	}
	for _, want := range []string{"waiting since ", "(2 passes, the latest at ", "for a lock on ff_lease_event_default to create ",
		fmt.Sprintf("held by pid %d (bi-report, idle in transaction, transaction open ", pid), "the next pass tries again"} {
		if !strings.Contains(line, want) {
			t.Errorf("status's leases retention line %q lacks %q; output:\n%s", line, want, out)
		}
	}
	if strings.Contains(out, "completions outbox retention:") {
		t.Errorf("status shows a wait on the completions outbox, which no pass touched:\n%s", out)
	}

	if err := reader.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if r := maintain(); r.Deferred() || len(r.Created) == 0 {
		t.Fatalf("the pass after the reader committed: %+v; want the partitions created", r)
	}
	if out := text(); strings.Contains(out, "outbox retention:") {
		t.Errorf("status after a pass did the work still shows a wait:\n%s", out)
	}
}

// statusOf runs ffctl status on db with extra flags and returns its JSON
// report and its text.
func statusOf(t *testing.T, db *testdb.DB, flags ...string) (status.Report, string) {
	t.Helper()
	ctx := context.Background()
	args := append([]string{"--database-url", testdb.URL(), "--schema", db.Schema}, flags...)
	var out, stderr bytes.Buffer
	if code := runStatus(ctx, append(args, "--format", "json"), &out, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	var r status.Report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	out.Reset()
	if code := runStatus(ctx, args, &out, &stderr); code != 0 {
		t.Fatalf("text: exit %d: %s", code, stderr.String())
	}
	return r, out.String()
}

// scannerLine is the line of the ticks table of scanner name in status's
// text ("" when none).
func scannerLine(text, name string) string {
	for l := range strings.Lines(text) {
		if f := strings.Fields(l); len(f) > 1 && f[0] == name && strings.HasSuffix(strings.TrimSpace(l), " ago") {
			return l
		}
	}
	return ""
}

// With no scheduler, status says that nothing ticks and that nothing
// leads: it showed overdue times growing and never said why.
func TestStatusSaysNoTicks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t, nil)
	r, text := statusOf(t, db)
	if r.Ticks == nil || r.Ticks.Ticking || r.Ticks.Seen || r.Ticks.Leader != nil || len(r.Ticks.Scanners) == 0 {
		t.Fatalf("ticks = %+v, want none seen, no leader, every scanner listed", r.Ticks)
	}
	for _, want := range []string{"River's leader: none\n", "no ticks in " + db.Schema + ".river_job (queue ff_scan): no scheduler leads",
		"run ffscheduler"} {
		if !strings.Contains(text, want) {
			t.Errorf("text output lacks %q:\n%s", want, text)
		}
	}

	// A scheduler that stopped two minutes ago left its last tick.
	if _, err := db.Pool.Exec(ctx, `INSERT INTO river_job (args, kind, max_attempts, queue, state, created_at, scheduled_at, attempted_at, finalized_at)
		VALUES ('{"scanner": "attempt_timeout"}', 'ff.tick', 1, 'ff_scan', 'completed', now() - interval '2 minutes',
		        now() - interval '2 minutes', now() - interval '2 minutes', now() - interval '119 seconds')`); err != nil {
		t.Fatal(err)
	}
	r, text = statusOf(t, db)
	if r.Ticks.Ticking || !r.Ticks.Seen || r.Ticks.LastTick < 2*time.Minute {
		t.Errorf("ticks = %+v, want the last one 2 minutes ago, not ticking", r.Ticks)
	}
	if want := "no ticks for 2m"; !strings.Contains(text, want) || !strings.Contains(text, "no scheduler leads") {
		t.Errorf("text output lacks %q and no scheduler leads:\n%s", want, text)
	}
	if l := scannerLine(text, "attempt_timeout"); !strings.Contains(l, " 2m") || strings.Count(l, " ago") != 2 {
		t.Errorf("attempt_timeout's ticks line %q, want its tick 2m ago, inserted and worked:\n%s", l, text)
	}
}

// With a scheduler, status names River's leader as the one inserting the
// ticks, and each scanner's last tick, inserted and worked.
func TestStatusNamesTheLeaderAndEachScannersTick(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t, nil)
	f, err := ffriver.New(ctx, db.Pool, ffriver.Config{Schema: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	p, err := f.NewProcess(ctx, ffriver.ProcessOptions{Role: ffriver.Scheduler, ShutdownTimeout: 10 * time.Second,
		Client: ffriver.ClientOptions{ID: "sched-a", ScanWorkers: 1, ApplyWorkers: 1, TestOnly: true}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop() })

	var r status.Report
	var text string
	fftest.Await(t, 60*time.Second, "every scanner's tick worked under leader sched-a", func() bool {
		r, text = statusOf(t, db)
		if r.Ticks == nil || r.Ticks.Leader == nil || r.Ticks.Leader.ID != "sched-a" || !r.Ticks.Leader.InsertsTicks || !r.Ticks.Ticking {
			return false
		}
		for _, s := range r.Ticks.Scanners {
			if !s.Disabled && (s.Inserted == nil || s.Worked == nil) {
				return false
			}
		}
		return true
	})
	for _, want := range []string{`River's leader: "sched-a", elected `, "inserts ffriver's ticks", `by River's leader "sched-a"`,
		"last tick worked"} {
		if !strings.Contains(text, want) {
			t.Errorf("text output lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "no ticks") {
		t.Errorf("text output says no ticks while the scheduler ticks:\n%s", text)
	}
	for _, s := range r.Ticks.Scanners {
		if s.Disabled {
			continue
		}
		if l := scannerLine(text, s.Scanner); !strings.Contains(l, s.Interval.String()) || strings.Count(l, " ago") != 2 {
			t.Errorf("%s's ticks line %q, want its interval %s and its last tick inserted and worked:\n%s", s.Scanner, l, s.Interval, text)
		}
	}
}

// oldAppArgs is the job of an application's River client without ffriver.
type oldAppArgs struct{}

func (oldAppArgs) Kind() string { return "old_app" }

// Issue 39: in a rolling deploy an old process without ffriver held River's
// leadership, so no tick was inserted and nothing was scanned. Status names
// that leader as the one that does not run ffriver's periodic jobs.
func TestStatusNamesALeaderWithoutFFriver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t, nil)
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(context.Context, *river.Job[oldAppArgs]) error { return nil }))
	old, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{ID: "old-app", Schema: db.Schema, Workers: workers, TestOnly: true,
		Queues: map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = old.Stop(context.Background()) })

	var r status.Report
	var text string
	fftest.Await(t, 90*time.Second, "status naming old-app as a leader without ffriver", func() bool {
		r, text = statusOf(t, db, "--tick-stale-after", "1s")
		return r.Ticks != nil && r.Ticks.Leader != nil && r.Ticks.Leader.ID == "old-app" && r.Ticks.Leader.For >= time.Second
	})
	if r.Ticks.Ticking || r.Ticks.Leader.InsertsTicks {
		t.Errorf("ticks = %+v, leader %+v; want no ticks, and old-app inserting none", r.Ticks, r.Ticks.Leader)
	}
	for _, want := range []string{`River's leader: "old-app", elected `, "inserts no ffriver tick: it does not run ffriver's periodic jobs",
		`no ticks in ` + db.Schema + `.river_job (queue ff_scan): River's leader "old-app" (leading for `, "leader-eligible River client"} {
		if !strings.Contains(text, want) {
			t.Errorf("text output lacks %q:\n%s", want, text)
		}
	}
}
