package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/ffriver/ffriver/internal/testproc"
	"github.com/ffriver/ffriver/subscribe"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// This file holds the stream side of the fault suite's scenario
// (faultharness_test.go): the `ffctl tail` processes whose JSON lines are
// collected, what explains a stream that fell behind its table, and the
// outbox writers of the out-of-order fault.

// explainStreams says, for each stream, which events of its table the tail
// has not printed (or printed twice): their event and transaction ids, the
// first tick that saw each transaction finished and the tick before it,
// and the tail's last cursor, so that a stream that fell behind tells a
// lost batch from a stuck one.
func (sc *scenario) explainStreams() string {
	var b strings.Builder
	for _, st := range []struct{ stream, table string }{{"leases", "ff_lease_event"}, {"completions", "ff_completion_event"}} {
		tp := sc.tails[st.stream]
		printed := map[int64]int{}
		lines := tp.snapshot()
		for _, ev := range lines {
			printed[ev.EventID]++
		}
		fmt.Fprintf(&b, "%s: %d lines printed", st.stream, len(lines))
		if len(lines) > 0 {
			last := lines[len(lines)-1]
			c, err := subscribe.ParseCursor(last.Cursor)
			fmt.Fprintf(&b, ", the last event %d at %#v (%v)", last.EventID, c, err)
		}
		b.WriteString("\n")
		for id, n := range printed {
			if n > 1 {
				fmt.Fprintf(&b, "  event %d printed %d times\n", id, n)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		rows, err := sc.db.Pool.Query(ctx, `SELECT event_id, xact_id FROM `+st.table+` ORDER BY xact_id, event_id`)
		if err != nil {
			cancel()
			fmt.Fprintf(&b, "  reading %s: %v\n", st.table, err)
			continue
		}
		type row struct{ event, xact int64 }
		all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
			var o row
			return o, r.Scan(&o.event, &o.xact)
		})
		if err != nil {
			cancel()
			fmt.Fprintf(&b, "  reading %s: %v\n", st.table, err)
			continue
		}
		var lost []row
		for _, r := range all {
			if printed[r.event] == 0 {
				lost = append(lost, r)
			}
		}
		fmt.Fprintf(&b, "  %d of %d rows of %s not printed\n", len(lost), len(all), st.table)
		shown := 0
		for i, r := range lost {
			if i > 0 && lost[i-1].xact == r.xact {
				continue
			}
			if shown++; shown > 10 {
				b.WriteString("  …\n")
				break
			}
			var ids []int64
			for _, o := range lost[i:] {
				if o.xact != r.xact {
					break
				}
				ids = append(ids, o.event)
			}
			var xactRows int
			for _, o := range all {
				if o.xact == r.xact {
					xactRows++
				}
			}
			fmt.Fprintf(&b, "  xact %d (%d rows): events %v not printed; %s\n", r.xact, xactRows, ids, sc.ticksAround(ctx, r.xact))
		}
		cancel()
	}
	return b.String()
}

// ticksAround names the first stream tick whose snapshot saw transaction x
// finished, and the tick before it.
func (sc *scenario) ticksAround(ctx context.Context, x int64) string {
	var tickID int64
	var snap string
	err := sc.db.Pool.QueryRow(ctx, `SELECT tick_id, snap_xmin || ':' || snap_xmax || ':' || array_to_string(snap_xip, ',')
		FROM ff_stream_tick WHERE $1 < snap_xmin OR ($1 < snap_xmax AND NOT $1 = ANY(snap_xip)) ORDER BY tick_id LIMIT 1`, x).Scan(&tickID, &snap)
	if errors.Is(err, pgx.ErrNoRows) {
		return "no tick sees it finished"
	}
	if err != nil {
		return fmt.Sprintf("reading the ticks: %v", err)
	}
	var prevID int64
	var prev string
	err = sc.db.Pool.QueryRow(ctx, `SELECT tick_id, snap_xmin || ':' || snap_xmax || ':' || array_to_string(snap_xip, ',')
		FROM ff_stream_tick WHERE tick_id < $1 ORDER BY tick_id DESC LIMIT 1`, tickID).Scan(&prevID, &prev)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Sprintf("first seen finished by tick %d (%s), the oldest", tickID, snap)
	case err != nil:
		return fmt.Sprintf("first seen finished by tick %d (%s); reading the tick before: %v", tickID, snap, err)
	}
	return fmt.Sprintf("first seen finished by tick %d (%s), after tick %d (%s)", tickID, snap, prevID, prev)
}

// tailEvent is one JSON line of `ffctl tail --format json`.
type tailEvent struct {
	Cursor       string `json:"cursor"`
	EventID      int64  `json:"event_id"`
	ExecutionID  string `json:"execution_id"`
	EventType    string `json:"event_type"`
	Outcome      string `json:"outcome"`
	LeaseEpoch   *int64 `json:"lease_epoch"`
	AttemptIndex *int32 `json:"attempt_index"`
}

// what is the event as the reconciliation compares it with the table.
func (e tailEvent) what() string {
	if e.Outcome != "" {
		return e.Outcome
	}
	return leaseString(e.EventType, e.LeaseEpoch, e.AttemptIndex)
}

// tailProc is a running `ffctl tail` whose JSON lines are collected.
type tailProc struct {
	t      *testing.T
	stream string
	args   []string
	cmd    *exec.Cmd
	stderr *syncBuffer
	done   chan struct{}
	code   int

	mu      sync.Mutex
	partial []byte
	lines   []tailEvent
}

// startTail starts `ffctl tail` (bin) with args, collecting its JSON lines;
// the test's cleanup kills it if it still runs, and logs its stderr when the
// test failed.
func startTail(t *testing.T, bin, stream string, args ...string) *tailProc {
	t.Helper()
	tp := &tailProc{t: t, stream: stream, args: args, stderr: &syncBuffer{}, done: make(chan struct{})}
	tp.cmd = exec.Command(bin, args...)
	tp.cmd.Env = testproc.Env()
	tp.cmd.Stdout, tp.cmd.Stderr = tp, tp.stderr
	if err := tp.cmd.Start(); err != nil {
		t.Fatalf("starting ffctl tail: %v", err)
	}
	go func() {
		_ = tp.cmd.Wait()
		tp.code = tp.cmd.ProcessState.ExitCode()
		close(tp.done)
	}()
	t.Cleanup(func() {
		select {
		case <-tp.done:
		default:
			_ = tp.cmd.Process.Kill()
			<-tp.done
		}
		if t.Failed() {
			t.Logf("ffctl tail --stream %s stderr:\n%s", stream, tp.stderr.String())
		}
	})
	return tp
}

// Write collects stdout's lines.
func (tp *tailProc) Write(p []byte) (int, error) {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	tp.partial = append(tp.partial, p...)
	for {
		i := bytes.IndexByte(tp.partial, '\n')
		if i < 0 {
			break
		}
		line := tp.partial[:i]
		var ev tailEvent
		if err := json.Unmarshal(line, &ev); err != nil || ev.Cursor == "" || ev.EventID == 0 {
			tp.t.Errorf("ffctl tail --stream %s printed a line that is not an event: %q (%v)", tp.stream, line, err)
		} else {
			tp.lines = append(tp.lines, ev)
		}
		tp.partial = tp.partial[i+1:]
	}
	return len(p), nil
}

// count returns how many events the tail has printed so far.
func (tp *tailProc) count() int {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return len(tp.lines)
}

// snapshot returns a copy of the events the tail has printed so far.
func (tp *tailProc) snapshot() []tailEvent {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return slices.Clone(tp.lines)
}

// cursorFile returns the tail's --cursor-file, or "" without one.
func (tp *tailProc) cursorFile() string {
	if i := slices.Index(tp.args, "--cursor-file"); i >= 0 && i+1 < len(tp.args) {
		return tp.args[i+1]
	}
	return ""
}

// stop sends SIGTERM and checks for a clean exit.
func (tp *tailProc) stop() {
	tp.t.Helper()
	select {
	case <-tp.done:
		tp.t.Errorf("ffctl tail --stream %s had exited early with code %d:\n%s", tp.stream, tp.code, tp.stderr.String())
		return
	default:
	}
	_ = tp.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-tp.done:
		if tp.code != 0 {
			tp.t.Errorf("ffctl tail --stream %s exited %d after SIGTERM:\n%s", tp.stream, tp.code, tp.stderr.String())
		}
	case <-time.After(15 * time.Second):
		tp.t.Errorf("ffctl tail --stream %s did not stop within 15 s of SIGTERM", tp.stream)
	}
	tp.mu.Lock()
	defer tp.mu.Unlock()
	if len(tp.partial) > 0 {
		tp.t.Errorf("ffctl tail --stream %s left a partial line: %q", tp.stream, tp.partial)
	}
}

// outboxWriters are n goroutines committing outbox rows with plain SQL (the
// seed's column lists, as an external producer would), each transaction
// holding its rows open for a random few milliseconds so that event ids
// commit out of order.
type outboxWriters struct {
	stop chan struct{}
	wg   sync.WaitGroup
	once sync.Once

	mu         sync.Mutex
	lease      map[int64]bool // acknowledged event ids
	completion map[int64]bool
	// inDoubtLease and inDoubtCompletion are the event ids of the
	// transactions whose COMMIT failed (the connection was lost before the
	// answer): committed or not.
	inDoubtLease, inDoubtCompletion map[int64]bool
	txs                             []writerTx
	errs                            []error
	commitOrder                     atomic.Int64
}

// writerTx is one committed transaction of the writers: its place in
// commit order and the event ids it wrote.
type writerTx struct {
	seq int64
	ids []int64
}

// startWriters starts n outbox writers (sc.writers), the i-th writing for
// an execution id of its own in partition i mod faultPartitions, until
// drain (or the test's cleanup) stops them; a writer whose transaction
// fails records the error and stops.
func (sc *scenario) startWriters(n int) {
	w := &outboxWriters{stop: make(chan struct{}), lease: map[int64]bool{}, completion: map[int64]bool{},
		inDoubtLease: map[int64]bool{}, inDoubtCompletion: map[int64]bool{}}
	sc.writers = w
	ctx := sc.ctx
	for i := range n {
		w.wg.Go(func() {
			exec := uuid.New()
			part := int16(i % faultPartitions)
			for {
				select {
				case <-w.stop:
					return
				case <-ctx.Done():
					return
				default:
				}
				if err := w.one(ctx, sc.db, exec, part); err != nil {
					w.mu.Lock()
					w.errs = append(w.errs, err)
					w.mu.Unlock()
					return
				}
				time.Sleep(time.Duration(2000+rand.IntN(8000)) * time.Microsecond)
			}
		})
	}
	sc.t.Cleanup(w.stopAndWait)
}

// one commits one transaction of 1–3 rows.
func (w *outboxWriters) one(ctx context.Context, db *testdb.DB, exec uuid.UUID, part int16) error {
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	var leases, completions []int64
	for range 1 + rand.IntN(3) {
		var id int64
		now := time.Now().UnixMilli()
		if rand.IntN(2) == 0 {
			err = tx.QueryRow(ctx, `INSERT INTO ff_lease_event (execution_id, lease_id, event_type, occurred_at_ms, partition_key, namespace, instance_tag)
				VALUES ($1, $2, 'renewed', $3, $4, 'writers', NULL) RETURNING event_id`, exec.String(), uuid.NewString(), now, int32(part)).Scan(&id)
			leases = append(leases, id)
		} else {
			err = tx.QueryRow(ctx, `INSERT INTO ff_completion_event (partition_key, execution_id, outcome, occurred_at_ms, namespace)
				VALUES ($1, $2, 'success', $3, 'writers') RETURNING event_id`, part, exec, now).Scan(&id)
			completions = append(completions, id)
		}
		if err != nil {
			return err
		}
		time.Sleep(time.Duration(rand.IntN(4000)) * time.Microsecond)
	}
	time.Sleep(time.Duration(rand.IntN(8000)) * time.Microsecond)
	if err := tx.Commit(ctx); err != nil {
		w.mu.Lock()
		for _, id := range leases {
			w.inDoubtLease[id] = true
		}
		for _, id := range completions {
			w.inDoubtCompletion[id] = true
		}
		w.mu.Unlock()
		return err
	}
	seq := w.commitOrder.Add(1)
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range leases {
		w.lease[id] = true
	}
	for _, id := range completions {
		w.completion[id] = true
	}
	w.txs = append(w.txs, writerTx{seq: seq, ids: slices.Concat(leases, completions)})
	return nil
}

// stopAndWait stops the writers and waits for them to return; it may be
// called more than once.
func (w *outboxWriters) stopAndWait() {
	w.once.Do(func() { close(w.stop) })
	w.wg.Wait()
}

// has says whether event id of the lease table (lease) or of the
// completion table is the writers': acknowledged, or of a transaction
// whose COMMIT was in doubt.
func (w *outboxWriters) has(id int64, lease bool) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if lease {
		return w.lease[id] || w.inDoubtLease[id]
	}
	return w.completion[id] || w.inDoubtCompletion[id]
}

// snapshot returns a copy of the event ids the writers acknowledged in the
// lease table (lease) or in the completion table.
func (w *outboxWriters) snapshot(lease bool) map[int64]bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if lease {
		return maps.Clone(w.lease)
	}
	return maps.Clone(w.completion)
}

// acked returns how many lease and completion events the writers
// acknowledged.
func (w *outboxWriters) acked() (lease, completion int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.lease), len(w.completion)
}

// inDoubt returns how many lease and completion events the writers wrote
// in transactions whose COMMIT was in doubt.
func (w *outboxWriters) inDoubt() (lease, completion int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.inDoubtLease), len(w.inDoubtCompletion)
}

// outOfOrder counts the transactions that committed after a transaction
// holding a higher event id of the same table had committed: each is a row
// an `event_id > last` cursor would have skipped.
func (w *outboxWriters) outOfOrder() (txs, late int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	sorted := slices.Clone(w.txs)
	slices.SortFunc(sorted, func(a, b writerTx) int { return int(a.seq - b.seq) })
	maxL, maxC := int64(0), int64(0)
	for _, tx := range sorted {
		isLate := false
		for _, id := range tx.ids {
			if (w.lease[id] && id < maxL) || (w.completion[id] && id < maxC) {
				isLate = true
			}
		}
		for _, id := range tx.ids {
			if w.lease[id] {
				maxL = max(maxL, id)
			} else {
				maxC = max(maxC, id)
			}
		}
		if isLate {
			late++
		}
	}
	return len(sorted), late
}

// err returns the errors that stopped writers, joined (nil when none did).
func (w *outboxWriters) err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return errors.Join(w.errs...)
}
