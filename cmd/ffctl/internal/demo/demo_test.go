package demo

import (
	"bytes"
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/ffriver/ffriver/subscribe"
	"github.com/jackc/pgx/v5/pgxpool"
)

func TestMissingAndLines(t *testing.T) {
	t.Parallel()
	s := &Snapshot{
		Leases:      map[string]int64{ff.LeaseAcquired: 3, ff.LeaseRenewed: 2, ff.LeaseExpired: 1, ff.LeaseRevoked: 4},
		Completions: map[string]int64{ff.OutcomeSuccess: 2, ff.OutcomeFailed: 1, ff.OutcomeExpired: 1, ff.OutcomeCancelled: 1},
		Scanners: []ScannerStats{
			{Name: "attempt_timeout", ItemKind: "ff.expire_attempt", Backlog: 2, Ticks: 5, Scans: 1,
				Actions: map[string]int64{"no_op": 1, "processed": 4, "discarded": 1}},
			{Name: CascadeName, ItemKind: "ff.advance", Actions: map[string]int64{"processed": 7}},
		},
		States: map[string]int64{ff.PublicCompleted: 2, ff.PublicActive: 1, "legacy": 1},
	}
	if got, want := strings.Join(s.Missing(), ","), "lease reclaimed,completion skipped"; got != want {
		t.Errorf("Missing = %q, want %q", got, want)
	}
	line := compactLine(s, 12*time.Second)
	for _, want := range []string{"[ 12s] leases acquired=3 renewed=2 expired=1 reclaimed=0 revoked=4",
		"| completions success=2 failed=1 expired=1 cancelled=1 skipped=0", "| backlog=2 |", "attempt_timeout=4", "flow_cascade=7"} {
		if !strings.Contains(line, want) {
			t.Errorf("compact line %q lacks %q", line, want)
		}
	}
	if strings.Contains(line, "\n") {
		t.Errorf("compact line spans lines: %q", line)
	}
	if got, want := actionsLine(s.Scanners[0].Actions), "processed 4, discarded 1, no_op 1"; got != want {
		t.Errorf("actionsLine = %q, want %q", got, want)
	}
	if got, want := statesLine(s.States), "4: active 1, completed 2, legacy 1"; got != want {
		t.Errorf("statesLine = %q, want %q", got, want)
	}

	var b bytes.Buffer
	v := newView(&b, true, "ffdemo_x", "http://127.0.0.1:1/", time.Minute)
	v.draw(s, time.Second)
	first := b.String()
	if strings.Contains(first, "\x1b[") {
		t.Errorf("the first drawing moves the cursor: %q", first)
	}
	b.Reset()
	v.draw(s, 2*time.Second)
	lines := strings.Count(first, "\n")
	if want := "\x1b[" + strconv.Itoa(lines) + "F\x1b[J"; !strings.HasPrefix(b.String(), want) {
		t.Errorf("the redraw starts %q, want %q", b.String()[:min(12, b.Len())], want)
	}

	// What the streams wait for shows in both forms.
	s.Waiting = []subscribe.Wait{{Stream: "ff_lease_event", PID: 4242, Xact: 917, Database: "app", Application: "psql",
		State: "idle in transaction", Age: 25 * time.Second}}
	if line := compactLine(s, time.Second); !strings.Contains(line, "| waiting on pid 4242 (xid 917, open 25s)") {
		t.Errorf("compact line %q does not say what the streams wait for", line)
	}
	if page := v.page(s, time.Second); !strings.Contains(page, "waiting: pid 4242 (xid 917, psql, database app, idle in transaction) has written to ff_lease_event") {
		t.Errorf("the view does not say what the streams wait for:\n%s", page)
	}
	s.Waiting = nil

	sum := &Summary{Schema: "ffdemo_x", Elapsed: time.Second, Snapshot: *s, Missing: s.Missing()}
	b.Reset()
	writeSummary(&b, sum)
	for _, want := range []string{"leases       reclaimed  0", "completions  cancelled  1", "Not seen: lease reclaimed, completion skipped"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, b.String())
		}
	}
}

func poolConfig(t *testing.T) *pgxpool.Config {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testdb.URL())
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// The demo never touches a schema it did not create: an existing schema
// is an error, and it is left alone.
func TestRunRefusesAnExistingSchema(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, nil)
	var out bytes.Buffer
	_, err := Run(context.Background(), Options{PoolConfig: poolConfig(t), Schema: db.Schema, Duration: time.Second, Out: &out})
	if err == nil || !strings.Contains(err.Error(), "creating schema") {
		t.Fatalf("Run on an existing schema = %v, want a creating-schema error", err)
	}
	if _, err := db.Pool.Exec(context.Background(), `SELECT count(*) FROM ff_exec_core`); err != nil {
		t.Fatalf("the existing schema was damaged: %v", err)
	}
}

// Cancelling the context ends the demo early without an error; with Keep
// the schema stays, and the demo says how to look at it.
func TestRunInterruptedAndKept(t *testing.T) {
	t.Parallel()
	testdb.Reserve(t, 20) // its River clients and pools (docs/development.md)
	admin := testdb.Connect(t, "")
	schema := NewSchemaName()
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), `DROP SCHEMA IF EXISTS "`+schema+`" CASCADE`)
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		sum *Summary
		err error
	}
	ran := make(chan result, 1)
	// The intro ends with the duration line.
	out := &signalBuffer{marker: "(Ctrl-C ends it early)", seen: make(chan struct{})}
	go func() {
		sum, err := Run(ctx, Options{PoolConfig: poolConfig(t), Schema: schema, Duration: time.Minute, Keep: true, Out: out,
			KeepURL: "postgres://demo@db.example:6543/d?sslmode=disable"})
		ran <- result{sum, err}
	}()
	select {
	case <-out.seen:
	case r := <-ran:
		t.Fatalf("Run ended before its workload started: %v\n%s", r.err, out.String())
	}
	// Interrupt once the workload has leased an execution (however long
	// that takes on a busy machine): the summary, written after the
	// streams caught up, must count it.
	fftest.Await(t, time.Minute, "the workload's first lease", func() bool {
		var n int
		err := admin.QueryRow(context.Background(), `SELECT count(*) FROM "`+schema+`".ff_lease_event WHERE event_type = 'acquired'`).Scan(&n)
		return err == nil && n > 0
	})
	cancel()
	r := <-ran
	sum, err := r.sum, r.err
	if err != nil {
		t.Fatalf("Run: %v\n%s", err, out.String())
	}
	if !sum.Interrupted || sum.Dropped || sum.UIURL != "" || sum.Elapsed >= time.Minute {
		t.Errorf("summary: interrupted %v, dropped %v, UI %q, elapsed %s (of a minute)", sum.Interrupted, sum.Dropped, sum.UIURL, sum.Elapsed)
	}
	if sum.Snapshot.Leases[ff.LeaseAcquired] == 0 {
		t.Errorf("the summary counts no lease acquired, though one was before the interruption: %v", sum.Snapshot.Leases)
	}
	var n int64
	if err := admin.QueryRow(context.Background(), `SELECT count(*) FROM "`+schema+`".ff_exec_core`).Scan(&n); err != nil || n == 0 {
		t.Errorf("kept schema: %d executions, %v", n, err)
	}
	// The commands name the demo's own database, not whatever
	// scripts/devdb.sh would find in a new shell.
	for _, want := range []string{"Interrupted after", "(interrupted)", "The schema " + schema + " is kept", "DROP SCHEMA",
		"export DATABASE_URL='postgres://demo@db.example:6543/d?sslmode=disable'"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "Schema "+schema+" dropped") {
		t.Error("a kept schema was reported dropped")
	}
}

// signalBuffer is a concurrency-safe buffer that closes seen once marker
// was written.
type signalBuffer struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	marker string
	seen   chan struct{}
	closed bool
}

func (b *signalBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	if !b.closed && strings.Contains(b.buf.String(), b.marker) {
		b.closed = true
		close(b.seen)
	}
	return len(p), nil
}

func (b *signalBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
