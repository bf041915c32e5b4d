package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ffriver/ffriver/cmd/internal/cli"
	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/internal/outboxretention"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/ffriver/ffriver/outbox"
	"github.com/ffriver/ffriver/subscribe"
	"github.com/google/uuid"
)

func TestParsePartitions(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int16
	}{
		{"", nil},
		{"  ", nil},
		{"7", []int16{7}},
		{"0-3,42", []int16{0, 1, 2, 3, 42}},
		{" 5 - 6 , 1 ", []int16{5, 6, 1}},
		{"3-3", []int16{3}},
		{"32766", []int16{32766}},
	} {
		got, err := parsePartitions(tc.in)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("parsePartitions(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"a", "1,", ",1", "-1", "1-", "-", "5-2", "32767", "1-2-3", "+4", "0x10", "1;2", "99999999999"} {
		if got, err := parsePartitions(in); err == nil {
			t.Errorf("parsePartitions(%q) = %v, want an error", in, got)
		}
	}
}

func TestTailUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--stream", "signals"},
		{"--format", "xml"},
		{"--from-start", "--cursor", subscribe.Cursor{Xact: 5, EventID: 2}.String()},
		{"--cursor", "zz"},
		{"--cursor", "04"},
		{"--partitions", "3-1"},
		{"--instance-tag", "novalue"},
		{"--max-events", "-1"},
		{"--idle-exit", "-1s"},
		{"--cursor", ""},
		{"--cursor", "  "},
		{"--since", "yesterday"},
		{"--since", "-5m"},
		{"--since", "5m", "--from-start"},
		{"--consumer-max-lag", "1h"},
		{"--consumer", "c", "--cursor-file", "/tmp/x"},
		{"--consumer", "c", "--consumer-max-lag", "-1h"},
		{"--consumer", "has space"},
		{"--since", "5m", "--cursor", subscribe.Cursor{Xact: 5, EventID: 2}.String()},
	} {
		var stderr bytes.Buffer
		args = append(args, "--database-url", "postgres://u@127.0.0.1:1/none")
		if code := runTail(context.Background(), args, &bytes.Buffer{}, &stderr); code != cli.ExitUsage {
			t.Errorf("tail %q: exit %d, want %d (%s)", args, code, cli.ExitUsage, stderr.String())
		}
	}
}

type tailedLine struct {
	Cursor      string  `json:"cursor"`
	EventID     int64   `json:"event_id"`
	EventType   string  `json:"event_type"`
	Outcome     string  `json:"outcome"`
	ExecutionID string  `json:"execution_id"`
	Partition   int     `json:"partition"`
	Namespace   *string `json:"namespace"`
	InstanceTag *string `json:"instance_tag"`
	LeaseID     *string `json:"lease_id"`
	AtMs        int64   `json:"at_ms"`
}

func runTailJSON(t *testing.T, db *testdb.DB, args ...string) []tailedLine {
	t.Helper()
	var stdout, stderr bytes.Buffer
	args = append(args, "--database-url", testdb.URL(), "--schema", db.Schema, "--format", "json")
	if code := runTail(context.Background(), args, &stdout, &stderr); code != cli.ExitOK {
		t.Fatalf("tail %q: exit %d: %s", args, code, stderr.String())
	}
	var out []tailedLine
	for l := range strings.Lines(stdout.String()) {
		var tl tailedLine
		if err := json.Unmarshal([]byte(l), &tl); err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		out = append(out, tl)
	}
	return out
}

func tailedIDs(ls []tailedLine) []int64 {
	out := make([]int64, len(ls))
	for i, l := range ls {
		out[i] = l.EventID
	}
	return out
}

func TestTail(t *testing.T) {
	db := testdb.New(t, nil)
	ctx := context.Background()
	var want []int64
	insert := func(p int, ns string) int64 {
		var id int64
		if err := db.Pool.QueryRow(ctx,
			`INSERT INTO ff_lease_event (execution_id, lease_id, event_type, occurred_at_ms, partition_key, namespace, instance_tag)
			 VALUES ($1, 'L', 'acquired', 1234, $2, $3, 'i-1') RETURNING event_id`, uuid.NewString(), p, ns).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	for i := range 6 {
		want = append(want, insert(i, "ns"))
	}

	// Resume through a cursor file: three, then the rest, nothing twice.
	file := filepath.Join(t.TempDir(), "cursor")
	first := runTailJSON(t, db, "--from-start", "--cursor-file", file, "--max-events", "3")
	b, err := os.ReadFile(file)
	if err != nil || strings.TrimSpace(string(b)) != first[2].Cursor {
		t.Fatalf("cursor file holds %q (%v), want %s", b, err, first[2].Cursor)
	}
	// The events wanted are committed: each run waits for as many as it
	// wants (--max-events, with --idle-exit only as a bound far above a
	// busy machine's first read), and a last run with a short idle time
	// finds nothing more (it cannot show a missing event, only a repeat).
	rest := runTailJSON(t, db, "--from-start", "--cursor-file", file, "--max-events", "3", "--idle-exit", "30s")
	if got := append(tailedIDs(first), tailedIDs(rest)...); !slices.Equal(got, want) {
		t.Fatalf("tailed %v, want %v", got, want)
	}
	if more := runTailJSON(t, db, "--from-start", "--cursor-file", file, "--idle-exit", "300ms"); len(more) != 0 {
		t.Fatalf("after every event, the cursor file resumed at %v", tailedIDs(more))
	}
	l := first[0]
	if l.EventType != "acquired" || l.Partition != 0 || l.Namespace == nil || *l.Namespace != "ns" ||
		l.InstanceTag == nil || *l.InstanceTag != "i-1" || l.LeaseID == nil || *l.LeaseID != "L" || l.AtMs != 1234 ||
		!strings.HasPrefix(l.ExecutionID, "{fp:0}:") {
		t.Fatalf("line %+v", l)
	}

	// A cursor from the output resumes after it; partitions and namespace filter.
	after := runTailJSON(t, db, "--cursor", first[1].Cursor, "--partitions", "0-1,4-5", "--max-events", "2", "--idle-exit", "30s")
	if got := tailedIDs(after); !slices.Equal(got, []int64{want[4], want[5]}) {
		t.Fatalf("after cursor, partitions 0-1,4-5: %v, want %v", got, []int64{want[4], want[5]})
	}
	if got := runTailJSON(t, db, "--from-start", "--namespace", "other", "--idle-exit", "200ms"); len(got) != 0 {
		t.Fatalf("namespace filter: %v", tailedIDs(got))
	}
	if got := runTailJSON(t, db, "--from-start", "--instance-tag", ff.InstanceTagKey+"=i-1", "--max-events", "6"); len(got) != 6 {
		t.Fatalf("instance tag filter: %v", tailedIDs(got))
	}

	// Completions, in text.
	if _, err := db.Pool.Exec(ctx,
		`INSERT INTO ff_completion_event (partition_key, execution_id, outcome, occurred_at_ms) VALUES (3, $1, 'success', 0)`,
		uuid.New()); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := runTail(ctx, []string{"--stream", "completions", "--from-start", "--max-events", "1",
		"--database-url", testdb.URL(), "--schema", db.Schema}, &stdout, &stderr)
	if code != cli.ExitOK || !strings.Contains(stdout.String(), " success ") || !strings.Contains(stdout.String(), " p=3 ") {
		t.Fatalf("completions: exit %d, %q, %s", code, stdout.String(), stderr.String())
	}

	// A corrupt cursor file is a usage error, not a silent restart.
	if err := os.WriteFile(file, []byte("garbage\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code = runTail(ctx, []string{"--cursor-file", file, "--database-url", testdb.URL(), "--schema", db.Schema}, &stdout, &stderr)
	if code != cli.ExitUsage {
		t.Fatalf("corrupt cursor file: exit %d, want %d", code, cli.ExitUsage)
	}
}

func TestParseSince(t *testing.T) {
	now := time.Date(2026, 11, 23, 4, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"15m":                  now.Add(-15 * time.Minute),
		" 2h ":                 now.Add(-2 * time.Hour),
		"2026-11-22T10:00:00Z": time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC),
	} {
		if got, err := parseSince(in, now); err != nil || !got.Equal(want) {
			t.Errorf("parseSince(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
}

// --since starts at the events that occurred at or after the time; an
// empty cursor file is a usage error; a cursor before deleted events exits
// 1 with one sentence saying what was lost.
func TestTailSinceEmptyCursorFileAndGap(t *testing.T) {
	db := testdb.New(t, nil)
	ctx := context.Background()
	var ids []int64
	for i := range 6 {
		var id int64
		if err := db.Pool.QueryRow(ctx,
			`INSERT INTO ff_lease_event (execution_id, lease_id, event_type, occurred_at_ms, partition_key)
			 VALUES ($1, 'L', 'acquired', $2, 0) RETURNING event_id`, uuid.NewString(), int64(1000*(i+1))).Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	since := time.UnixMilli(4000).UTC().Format(time.RFC3339Nano)
	if got := tailedIDs(runTailJSON(t, db, "--since", since, "--max-events", "3", "--idle-exit", "30s")); !slices.Equal(got, ids[3:]) {
		t.Fatalf("--since %s: %v, want %v", since, got, ids[3:])
	}

	file := filepath.Join(t.TempDir(), "cursor")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := runTail(ctx, []string{"--cursor-file", file, "--database-url", testdb.URL(), "--schema", db.Schema}, &stdout, &stderr)
	if code != cli.ExitUsage || !strings.Contains(stderr.String(), "is empty") {
		t.Fatalf("empty cursor file: exit %d, %s", code, stderr.String())
	}

	first := runTailJSON(t, db, "--from-start", "--max-events", "2")
	st, err := executions.Open(ctx, db.Pool, executions.Config{})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if n, err := outboxretention.Trim(ctx, tx, dbutil.Schema(st.Schema()), outboxretention.TrimParams{Table: outbox.LeaseTable, CutoffMs: 10_000, NowMs: st.NowMs(), Limit: 100}); err != nil || n != 6 {
		t.Fatalf("trim: %d, %v", n, err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	stderr.Reset()
	code = runTail(ctx, []string{"--cursor", first[1].Cursor, "--idle-exit", "30s",
		"--database-url", testdb.URL(), "--schema", db.Schema}, &stdout, &stderr)
	if code != cli.ExitFailure || !strings.Contains(stderr.String(), "were deleted before the stream read them") ||
		strings.Count(strings.TrimSpace(stderr.String()), "\n") != 0 {
		t.Fatalf("cursor before deleted events: exit %d, stderr %q", code, stderr.String())
	}
}

// A named consumer resumes where the last tail with its name stopped, and
// a second tail with the same name at the same time is refused.
func TestTailConsumer(t *testing.T) {
	db := testdb.New(t, nil)
	ctx := context.Background()
	var ids []int64
	for range 5 {
		var id int64
		if err := db.Pool.QueryRow(ctx,
			`INSERT INTO ff_lease_event (execution_id, lease_id, event_type, occurred_at_ms, partition_key)
			 VALUES ($1, 'L', 'acquired', 1, 0) RETURNING event_id`, uuid.NewString()).Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	first := tailedIDs(runTailJSON(t, db, "--consumer", "ops", "--from-start", "--max-events", "2"))
	rest := tailedIDs(runTailJSON(t, db, "--consumer", "ops", "--from-start", "--max-events", "3", "--idle-exit", "30s"))
	if got := append(first, rest...); !slices.Equal(got, ids) {
		t.Fatalf("tailed %v then %v, want %v", first, rest, ids)
	}
	if more := tailedIDs(runTailJSON(t, db, "--consumer", "ops", "--from-start", "--idle-exit", "300ms")); len(more) != 0 {
		t.Fatalf("after every event, consumer ops resumed at %v", more)
	}
	var lag int64
	if err := db.Pool.QueryRow(ctx, `SELECT max_lag_ms FROM ff_stream_consumer WHERE name = 'ops'`).Scan(&lag); err != nil ||
		lag != (7*24*time.Hour).Milliseconds() {
		t.Fatalf("stored max lag %d, %v", lag, err)
	}
}

// While a transaction that wrote an event stays open, tail says on stderr
// which session its event waits for, and --idle-exit says so when it exits.
func TestTailSaysWhatItWaitsFor(t *testing.T) {
	db := testdb.New(t, nil)
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var pid int
	if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO ff_lease_event (execution_id, event_type, occurred_at_ms, partition_key)
		VALUES ($1, 'acquired', 1, 0)`, uuid.NewString()); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := runTail(ctx, []string{"--from-start", "--idle-exit", "4s", "--database-url", testdb.URL(), "--schema", db.Schema},
		&stdout, &stderr)
	if code != cli.ExitOK || stdout.Len() != 0 {
		t.Fatalf("exit %d, stdout %q", code, stdout.String())
	}
	who := "pid " + strconv.Itoa(pid) + " (xid "
	for _, want := range []string{"waiting for an open writer", "exiting while events still wait for an open writer", who} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
		}
	}
}

// A tail run from cron with --cursor-file loses nothing between its runs,
// even when a run sees no event at all: the file holds the stream's start
// position from the moment the stream opens, so the next run starts there
// (not from "now" again), whether the first one started from now or from
// the beginning.
func TestTailCursorFileKeepsThePositionOfARunWithoutEvents(t *testing.T) {
	db := testdb.New(t, nil)
	ctx := context.Background()
	complete := func() int64 {
		t.Helper()
		var id int64
		if err := db.Pool.QueryRow(ctx,
			`INSERT INTO ff_completion_event (partition_key, execution_id, outcome, occurred_at_ms)
			 VALUES (1, $1, 'success', 1) RETURNING event_id`, uuid.New()).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	lease := func() int64 {
		t.Helper()
		var id int64
		if err := db.Pool.QueryRow(ctx,
			`INSERT INTO ff_lease_event (execution_id, lease_id, event_type, occurred_at_ms, partition_key)
			 VALUES ($1, 'L', 'acquired', 1, 0) RETURNING event_id`, uuid.NewString()).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	// The second run asks for one event and would wait 30 s for it: the
	// event is committed before it starts, so it comes at once unless the
	// run started after it. An event from before the first run would come
	// first (it committed first).
	dir := t.TempDir()
	for _, tc := range []struct {
		name   string
		stream string
		start  []string
		commit func() int64
	}{
		{"from now", "completions", nil, complete},
		{"from the beginning of an empty table", "leases", []string{"--from-start"}, lease},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.start == nil {
				tc.commit() // committed before the first run: not delivered
			}
			file := filepath.Join(dir, tc.stream+".cursor")
			args := append([]string{"--stream", tc.stream, "--cursor-file", file, "--idle-exit", "100ms"}, tc.start...)
			if got := runTailJSON(t, db, args...); len(got) != 0 {
				t.Fatalf("first run: %v, want no event", tailedIDs(got))
			}
			between := tc.commit()
			got := runTailJSON(t, db, "--stream", tc.stream, "--cursor-file", file, "--max-events", "1", "--idle-exit", "30s")
			if ids := tailedIDs(got); !slices.Equal(ids, []int64{between}) {
				t.Fatalf("second run: %v, want the event committed between the runs, %d", ids, between)
			}
			b, err := os.ReadFile(file)
			if err != nil || strings.TrimSpace(string(b)) != got[0].Cursor {
				t.Fatalf("cursor file holds %q (%v), want %s", b, err, got[0].Cursor)
			}
		})
	}
}
