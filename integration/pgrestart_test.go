package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/pgcluster"
	"github.com/ffriver/ffriver/migrations"
	"github.com/ffriver/ffriver/outbox"
	"github.com/ffriver/ffriver/subscribe"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// testLog is an io.Writer into t.Log that falls silent once the test is
// over (the stream's goroutines may log while they shut down).
type testLog struct {
	t    *testing.T
	mu   sync.Mutex
	done bool
}

func newTestLog(t *testing.T) *testLog {
	l := &testLog{t: t}
	t.Cleanup(func() {
		l.mu.Lock()
		l.done = true
		l.mu.Unlock()
	})
	return l
}

func (l *testLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.done {
		l.t.Logf("%s", p)
	}
	return len(p), nil
}

var _ io.Writer = (*testLog)(nil)

// writerLog is what one writer did: the identity (occurred_at_ms) of every
// event it tried to commit, sorted by what became of its transaction.
type writerLog struct {
	acked   []int64 // COMMIT acknowledged
	inDoubt []int64 // COMMIT sent, connection lost before the answer
	failed  []int64 // failed before COMMIT: rolled back for certain
	// afterRestart counts the acknowledged transactions that began after
	// the restart had completed.
	afterRestart int
}

// A PostgreSQL restart (pg_ctl restart -m fast) in the middle of a stream
// under write load: the stream yields one DisconnectedError carrying the
// cursor of the last event it delivered, reconnects, and delivers every
// committed event exactly once, in order. Writers retry through the outage;
// the transactions in flight at the crash are checked against the table.
func TestPostgresRestartMidStream(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	c := pgcluster.New(ctx, t)

	const schema = "ffpgrestart"
	const writers = 4
	pool := c.Pool(ctx, schema, writers+4)
	if _, err := migrations.Migrate(ctx, pool, schema, nil); err != nil {
		t.Fatalf("migrating: %v", err)
	}
	logger := slog.New(slog.NewTextHandler(newTestLog(t), &slog.HandlerOptions{Level: slog.LevelInfo}))

	wctx, stopWaker := context.WithCancel(ctx)
	defer stopWaker()
	waker := outbox.NewWaker(pool, schema, 0, logger)
	go waker.Run(wctx)
	out, err := outbox.NewWriter(schema)
	if err != nil {
		t.Fatal(err)
	}

	s, err := subscribe.Leases(ctx, pool, subscribe.Options{
		Schema: schema, Start: subscribe.StartBeginning, PollInterval: 50 * time.Millisecond, Logger: logger,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	// The consumer records every event and every DisconnectedError, and
	// checks each error's cursor against the last event it had delivered.
	var (
		mu        sync.Mutex
		delivered []subscribe.LeaseEvent
		discs     []*subscribe.DisconnectedError
		badDisc   error
	)
	var count atomic.Int64
	cctx, stopConsumer := context.WithCancel(ctx)
	consumerDone := make(chan error, 1)
	go func() {
		var last subscribe.Cursor
		for {
			ev, err := s.Next(cctx)
			var d *subscribe.DisconnectedError
			switch {
			case errors.As(err, &d):
				mu.Lock()
				discs = append(discs, d)
				if d.Cursor != last && badDisc == nil {
					badDisc = fmt.Errorf("DisconnectedError carries cursor %s, but the last delivered event is at %s (after %d events)",
						d.Cursor, last, len(delivered))
				}
				mu.Unlock()
				continue
			case err != nil:
				if cctx.Err() != nil {
					err = nil
				}
				consumerDone <- err
				return
			}
			mu.Lock()
			delivered = append(delivered, ev)
			mu.Unlock()
			last = ev.Cursor
			count.Add(1)
		}
	}()
	disconnects := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(discs)
	}
	waitFor := func(what string, limit time.Duration, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(limit)
		for !cond() {
			if time.Now().After(deadline) || ctx.Err() != nil {
				t.Fatalf("timed out after %s waiting for %s (delivered %d, disconnects %d)\nserver log:\n%s",
					limit, what, count.Load(), disconnects(), c.Log())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	// Writers: small transactions of 1–3 lease events each, identified by
	// occurred_at_ms (writer w's are w·10⁹ + seq·10 + j). A failed
	// transaction is not retried with the same identity, so an in-doubt
	// COMMIT that did succeed cannot be mistaken for its retry.
	var restarted atomic.Bool
	stopWriting := make(chan struct{})
	logs := make([]writerLog, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			wl := &logs[w]
			id := ff.ExecutionID{Partition: int16(w), UUID: uuid.New()}
			for seq := int64(1); ; seq++ {
				select {
				case <-stopWriting:
					return
				case <-ctx.Done():
					return
				case <-time.After(3 * time.Millisecond):
				}
				after := restarted.Load()
				ids := make([]int64, 1+seq%3)
				for j := range ids {
					ids[j] = int64(w)*1_000_000_000 + seq*10 + int64(j)
				}
				tx, err := pool.Begin(ctx)
				if err != nil {
					wl.failed = append(wl.failed, ids...)
					time.Sleep(20 * time.Millisecond)
					continue
				}
				var werr error
				for _, at := range ids {
					if werr = out.Lease(ctx, tx, outbox.LeaseRow{ID: id, Type: ff.LeaseRenewed, OccurredAtMs: at}); werr != nil {
						break
					}
				}
				if werr != nil {
					_ = tx.Rollback(ctx)
					wl.failed = append(wl.failed, ids...)
					time.Sleep(20 * time.Millisecond)
					continue
				}
				if err := tx.Commit(ctx); err != nil {
					wl.inDoubt = append(wl.inDoubt, ids...)
					time.Sleep(20 * time.Millisecond)
					continue
				}
				wl.acked = append(wl.acked, ids...)
				if after {
					wl.afterRestart++
				}
				waker.Poke()
			}
		})
	}
	stopWriters := sync.OnceFunc(func() {
		close(stopWriting)
		wg.Wait()
	})
	defer stopWriters()

	waitFor("200 events before the restart", 20*time.Second, func() bool { return count.Load() >= 200 })
	before := count.Load()
	began := time.Now()
	if err := c.Restart(ctx); err != nil {
		t.Fatalf("%v\nserver log:\n%s", err, c.Log())
	}
	restarted.Store(true)
	took := time.Since(began)
	waitFor("the DisconnectedError", 20*time.Second, func() bool { return disconnects() > 0 })
	atDisc := count.Load()
	waitFor("200 events after the restart", 20*time.Second, func() bool { return count.Load() >= atDisc+200 })
	stopWriters()

	// The table is the truth: every row, in stream order, which is the
	// order of the batches (the first tick that sees a row's transaction
	// finished), then (xact_id, event_id) inside a batch.
	rows, err := pool.Query(ctx, `
		SELECT e.occurred_at_ms FROM ff_lease_event e,
		LATERAL (SELECT min(t.tick_id) AS tick FROM ff_stream_tick t
		         WHERE e.xact_id < t.snap_xmin OR (e.xact_id < t.snap_xmax AND e.xact_id <> ALL(t.snap_xip))) b
		ORDER BY b.tick, e.xact_id, e.event_id`)
	if err != nil {
		t.Fatal(err)
	}
	table, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	waitFor(fmt.Sprintf("all %d rows of the table", len(table)), 15*time.Second, func() bool { return count.Load() >= int64(len(table)) })
	time.Sleep(300 * time.Millisecond) // room for a repeat to show up
	stopConsumer()
	if err := <-consumerDone; err != nil {
		t.Fatalf("stream failed: %v", err)
	}

	// What the writers did, against the table.
	inTable := make(map[int64]int, len(table))
	for _, at := range table {
		inTable[at]++
	}
	var acked, inDoubt, doubtCommitted, failed, afterRestart int
	known := map[int64]bool{}
	for w, wl := range logs {
		acked += len(wl.acked)
		inDoubt += len(wl.inDoubt)
		failed += len(wl.failed)
		afterRestart += wl.afterRestart
		for _, at := range wl.acked {
			known[at] = true
			if inTable[at] != 1 {
				t.Errorf("writer %d: acknowledged event %d is in the table %d times", w, at, inTable[at])
			}
		}
		for _, at := range wl.inDoubt {
			known[at] = true
			switch inTable[at] {
			case 0:
			case 1:
				doubtCommitted++
			default:
				t.Errorf("writer %d: in-doubt event %d is in the table %d times", w, at, inTable[at])
			}
		}
		for _, at := range wl.failed {
			if inTable[at] != 0 {
				t.Errorf("writer %d: event %d of a transaction that failed before COMMIT is in the table", w, at)
			}
		}
	}
	for _, at := range table {
		if !known[at] {
			t.Errorf("the table holds event %d that no writer committed", at)
		}
	}

	// What the stream delivered, against the table: the same events, each
	// once, in the same order.
	mu.Lock()
	got := make([]int64, len(delivered))
	for i, ev := range delivered {
		got[i] = ev.AtMs
		if i > 0 && !delivered[i-1].Cursor.Less(ev.Cursor) {
			t.Errorf("event %d at %s does not follow %s", i, ev.Cursor, delivered[i-1].Cursor)
		}
	}
	nDiscs, discErr := len(discs), badDisc
	var discCursor subscribe.Cursor
	if nDiscs > 0 {
		discCursor = discs[0].Cursor
	}
	mu.Unlock()
	if !slices.Equal(got, table) {
		t.Errorf("the stream delivered %d events, the table holds %d; first difference at %d",
			len(got), len(table), firstDiff(got, table))
	}
	if discErr != nil {
		t.Error(discErr)
	}
	if nDiscs != 1 {
		t.Errorf("%d DisconnectedErrors for one restart, want 1", nDiscs)
	}
	if afterRestart == 0 {
		t.Error("no transaction committed after the restart")
	}

	t.Logf("restart took %s; delivered %d events before it, %d when the DisconnectedError came (cursor %s), %d in all",
		took.Round(time.Millisecond), before, atDisc, discCursor, len(got))
	t.Logf("writers: %d events acknowledged (%d transactions after the restart), %d in doubt at the crash (%d of them committed), "+
		"%d failed before COMMIT; table: %d rows; stream: %d delivered, %d DisconnectedError",
		acked, afterRestart, inDoubt, doubtCommitted, failed, len(table), len(got), nDiscs)
}

// firstDiff returns the first index where a and b differ (len of the shorter
// when one is a prefix of the other), or -1 when they are equal.
func firstDiff(a, b []int64) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}
