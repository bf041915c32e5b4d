package outboxretention_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/internal/outboxretention"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/ffriver/ffriver/outbox"
	"github.com/jackc/pgx/v5"
)

// waitBound is how long a reader or a writer of the outbox may wait while
// partition maintenance runs beside a transaction that holds the table:
// about the maintenance's lock timeout (200 ms), with room for a busy
// machine. Without the timeout they wait as long as the transaction stays
// open.
const waitBound = time.Second

// Partition maintenance never queues the outbox's readers and writers
// behind a transaction that holds the table, such as a session idle in
// `BEGIN; SELECT count(*) FROM ff_lease_event` or a pg_dump: while such a
// transaction is open, a pass that needs to attach or drop a partition
// gives up within its lock timeout and says so in its result, readers and
// writers of the table each finish within about that timeout, and once the
// transaction ends the next pass does the work.
func TestMaintenanceDoesNotQueueBehindAnOpenReader(t *testing.T) {
	t.Parallel()
	type scenario struct {
		name string
		// setup prepares the schema and returns the maintenance to run.
		setup func(t *testing.T, db *testdb.DB) outboxretention.Maintenance
		// deferred says whether a pass beside the reader said it waits.
		deferred func(r outboxretention.MaintainResult) bool
		// done says whether the pass after the reader did the work.
		done func(r outboxretention.MaintainResult) bool
	}
	attach := func(t *testing.T, db *testdb.DB) outboxretention.Maintenance {
		return outboxretention.Maintenance{Table: outbox.LeaseTable, Width: time.Minute}
	}
	drop := func(t *testing.T, db *testdb.DB) outboxretention.Maintenance {
		now := dbNowMs(t, db)
		oldPartition(t, db, now-10*time.Minute.Milliseconds())
		return outboxretention.Maintenance{Table: outbox.LeaseTable, CutoffMs: now, NowMs: now}
	}
	for _, sc := range []scenario{
		{
			name:     "attach",
			setup:    attach,
			deferred: func(r outboxretention.MaintainResult) bool { return len(r.CreateLocked) > 0 && len(r.Created) == 0 },
			done:     func(r outboxretention.MaintainResult) bool { return len(r.Created) > 0 && len(r.CreateLocked) == 0 },
		},
		{
			name:     "drop",
			setup:    drop,
			deferred: func(r outboxretention.MaintainResult) bool { return len(r.Locked) == 1 && len(r.Dropped) == 0 },
			done: func(r outboxretention.MaintainResult) bool {
				return len(r.Dropped) == 1 && r.DroppedEvents == 1 && len(r.Locked) == 0
			},
		},
		{
			// The outbox_retention job's pass does both.
			name: "drop and attach",
			setup: func(t *testing.T, db *testdb.DB) outboxretention.Maintenance {
				m := drop(t, db)
				m.Width = time.Minute
				return m
			},
			deferred: func(r outboxretention.MaintainResult) bool {
				return len(r.Locked) == 1 && len(r.CreateLocked) > 0 && len(r.Dropped)+len(r.Created) == 0
			},
			done: func(r outboxretention.MaintainResult) bool {
				return len(r.Dropped) == 1 && len(r.Created) > 0 && len(r.Locked)+len(r.CreateLocked) == 0
			},
		},
	} {
		t.Run(sc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := testdb.New(t, nil)
			m := sc.setup(t, db)
			readerPID, commitReader := openReader(t, db)

			// Passes back to back, as a scheduler with a short interval
			// runs them, while readers and writers use the table.
			var (
				wg      sync.WaitGroup
				mu      sync.Mutex
				results []outboxretention.MaintainResult
				slowest time.Duration
				passErr error
			)
			stop := make(chan struct{})
			stopPasses := sync.OnceFunc(func() { close(stop); wg.Wait() })
			t.Cleanup(stopPasses)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					pctx, cancel := context.WithTimeout(ctx, 5*waitBound)
					start := time.Now()
					r, err := maintainOnce(pctx, db, m)
					took := time.Since(start)
					cancel()
					mu.Lock()
					results, slowest = append(results, r), max(slowest, took)
					if err != nil && passErr == nil {
						passErr = err
					}
					mu.Unlock()
					if err != nil {
						return
					}
				}
			}()

			for i := range 5 {
				awaitLockWait(t, db)
				if took, err := timed(ctx, db, `SELECT event_id FROM ff_lease_event ORDER BY event_id DESC LIMIT 1`); err != nil || took > waitBound {
					t.Fatalf("round %d: a one-row read of the outbox took %s (%v) while maintenance ran beside an open reader: want at most %s", i, took.Round(time.Millisecond), err, waitBound)
				}
				awaitLockWait(t, db)
				if took, err := timed(ctx, db, `INSERT INTO ff_lease_event (execution_id, event_type, occurred_at_ms, partition_key)
					VALUES (gen_random_uuid(), 'acquired', 1, 0)`); err != nil || took > waitBound {
					t.Fatalf("round %d: writing an event took %s (%v) while maintenance ran beside an open reader: want at most %s", i, took.Round(time.Millisecond), err, waitBound)
				}
			}
			stopPasses()
			t.Logf("%d passes beside the open reader, the slowest %s", len(results), slowest.Round(time.Millisecond))
			if passErr != nil {
				t.Fatalf("a maintenance pass beside an open reader failed: %v", passErr)
			}
			if slowest > 2*waitBound {
				t.Errorf("the slowest of %d maintenance passes beside an open reader took %s: want each to give up within about a second", len(results), slowest.Round(time.Millisecond))
			}
			for i, r := range results {
				if !sc.deferred(r) || !r.Deferred() {
					t.Fatalf("pass %d beside an open reader: %+v; want it to say the work waits for a lock, and to do none of it", i, r)
				}
				if !slices.ContainsFunc(r.LockHolders, func(h outboxretention.LockHolder) bool {
					return h.PID == readerPID && h.State == "idle in transaction"
				}) {
					t.Fatalf("pass %d beside an open reader: %+v; want the reader (pid %d, idle in transaction) named among the lock holders", i, r, readerPID)
				}
			}

			// What an operator reads (ffctl status, the metrics): since
			// when the passes wait, how many gave up, what the latest left
			// and who holds the table.
			last := results[len(results)-1]
			waits, err := outboxretention.Waits(ctx, db.Pool, dbutil.Schema(db.Schema))
			if err != nil {
				t.Fatal(err)
			}
			if len(waits) != 1 || waits[0].Table != outbox.LeaseTable || waits[0].Passes != int64(len(results)) ||
				waits[0].Since.After(waits[0].Last) || waits[0].Age <= 0 ||
				!slices.Equal(waits[0].DropsLeft, last.Locked) || !slices.Equal(waits[0].CreatesLeft, last.CreateLocked) ||
				len(waits[0].LockHolders) == 0 || waits[0].LockHolders[0].PID != readerPID {
				t.Fatalf("maintenance waits %+v after %d passes that gave up (the latest %+v): want one of %s, since the first pass, "+
					"with what the latest left and the reader (pid %d)", waits, len(results), last, outbox.LeaseTable, readerPID)
			}
			line := waits[0].String()
			if !strings.Contains(line, fmt.Sprintf("held by pid %d (", readerPID)) || !strings.Contains(line, "idle in transaction, transaction open") {
				t.Errorf("the wait's line %q: want the reader (pid %d, idle in transaction) named", line, readerPID)
			}

			commitReader()
			r, err := maintainOnce(ctx, db, m)
			if err != nil || !sc.done(r) {
				t.Fatalf("the pass after the reader committed: %+v, %v; want the work done", r, err)
			}
			if waits, err := outboxretention.Waits(ctx, db.Pool, dbutil.Schema(db.Schema)); err != nil || len(waits) != 0 {
				t.Fatalf("maintenance waits after a pass did the work: %+v, %v; want none", waits, err)
			}
		})
	}
}

// maintainOnce runs one maintenance pass in a transaction of its own.
func maintainOnce(ctx context.Context, db *testdb.DB, m outboxretention.Maintenance) (outboxretention.MaintainResult, error) {
	var r outboxretention.MaintainResult
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		var err error
		r, err = outboxretention.MaintainPartitions(ctx, tx, dbutil.Schema(db.Schema), m)
		return err
	})
	return r, err
}

// openReader opens a transaction on a connection of its own that reads the
// lease outbox and stays idle, holding its ACCESS SHARE locks, as a BI
// session or pg_dump does, and returns its backend's pid and a function
// that commits it.
func openReader(t *testing.T, db *testdb.DB) (pid int32, commit func()) {
	t.Helper()
	ctx := context.Background()
	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		conn.Release()
		t.Fatal(err)
	}
	var n int64
	if err := tx.QueryRow(ctx, `SELECT count(*), pg_backend_pid() FROM ff_lease_event`).Scan(&n, &pid); err != nil {
		_ = tx.Rollback(ctx)
		conn.Release()
		t.Fatal(err)
	}
	done := sync.OnceFunc(func() {
		if err := tx.Commit(ctx); err != nil {
			t.Errorf("committing the idle reader: %v", err)
		}
		conn.Release()
	})
	t.Cleanup(done)
	return pid, done
}

// awaitLockWait returns once a session waits for a lock on a table of the
// test's schema: the maintenance pass's DDL is in the lock queue, and a
// query that arrives now queues behind it.
func awaitLockWait(t *testing.T, db *testdb.DB) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var waiting bool
		if err := db.Pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
			WHERE NOT l.granted AND c.relnamespace = $1::regnamespace)`, db.Schema).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no maintenance DDL waited for a lock within 30 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// timed runs sql on a connection of the pool and returns how long it took;
// it gives up after a few times waitBound.
func timed(ctx context.Context, db *testdb.DB, sql string) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*waitBound)
	defer cancel()
	start := time.Now()
	_, err := db.Pool.Exec(ctx, sql)
	return time.Since(start), err
}

// dbNowMs is the database's clock, which written_at_ms reads.
func dbNowMs(t *testing.T, db *testdb.DB) (ms int64) {
	t.Helper()
	if err := db.Pool.QueryRow(context.Background(), `SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint`).Scan(&ms); err != nil {
		t.Fatal(err)
	}
	return ms
}

// oldPartition attaches a lease outbox partition for the minute from lo (in
// the past), writes one event into it and returns its name: a maintenance
// with a cutoff a minute past lo drops it.
func oldPartition(t *testing.T, db *testdb.DB, lo int64) (name string) {
	t.Helper()
	ctx := context.Background()
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		var err error
		name, err = outboxretention.AttachPartition(ctx, tx, dbutil.Schema(db.Schema), outbox.LeaseTable, lo, lo+time.Minute.Milliseconds())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO ff_lease_event (execution_id, event_type, occurred_at_ms, partition_key, written_at_ms)
		VALUES (gen_random_uuid(), 'acquired', $1, 0, $1)`, lo+1); err != nil {
		t.Fatal(err)
	}
	return name
}

// A drop that waits for a partition's last writers, or for a vacuum of it
// (an ANALYZE of a partition just filled), does not hold the whole table
// while it waits: the partitions of a pass are all locked before the
// table, so readers and writers never wait for that. The partition it
// could not lock is left for the next pass; the others go.
func TestDropDoesNotHoldTheTableWhileWaitingForAPartition(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t, nil)
	now := dbNowMs(t, db)
	older := oldPartition(t, db, now-10*time.Minute.Milliseconds())
	busy := oldPartition(t, db, now-5*time.Minute.Milliseconds())

	// What a vacuum of the partition holds: SHARE UPDATE EXCLUSIVE on it
	// alone, not on the table.
	conn, err := db.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	vacuum, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer vacuum.Rollback(ctx)
	if _, err := vacuum.Exec(ctx, `LOCK TABLE ONLY `+busy+` IN SHARE UPDATE EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}

	type outcome struct {
		r   outboxretention.MaintainResult
		err error
	}
	done := make(chan outcome, 1)
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait) // after the deferred rollback of the vacuum
	wg.Go(func() {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		r, err := maintainOnce(ctx, db, outboxretention.Maintenance{Table: outbox.LeaseTable, CutoffMs: now, NowMs: now})
		done <- outcome{r, err}
	})
	awaitLockWait(t, db)
	if took, err := timed(ctx, db, `SELECT event_id FROM ff_lease_event ORDER BY event_id DESC LIMIT 1`); err != nil || took > waitBound {
		t.Errorf("a one-row read of the outbox took %s (%v) while a drop waited for a partition: want at most %s", took.Round(time.Millisecond), err, waitBound)
	}
	if took, err := timed(ctx, db, `INSERT INTO ff_lease_event (execution_id, event_type, occurred_at_ms, partition_key)
		VALUES (gen_random_uuid(), 'acquired', 1, 0)`); err != nil || took > waitBound {
		t.Errorf("writing an event took %s (%v) while a drop waited for a partition: want at most %s", took.Round(time.Millisecond), err, waitBound)
	}
	o := <-done
	if o.err != nil || !slices.Equal(o.r.Dropped, []string{older}) || !slices.Equal(o.r.Locked, []string{busy}) || o.r.DroppedEvents != 1 {
		t.Fatalf("pass beside a vacuum of %s: %+v, %v; want %s dropped with its event, %s left locked", busy, o.r, o.err, older, busy)
	}
	if err := vacuum.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := maintainOnce(ctx, db, outboxretention.Maintenance{Table: outbox.LeaseTable, CutoffMs: now, NowMs: now})
	if err != nil || !slices.Equal(r.Dropped, []string{busy}) || r.Deferred() {
		t.Fatalf("the pass after the vacuum: %+v, %v; want %s dropped", r, err, busy)
	}
}

// A drop holds the table's ACCESS EXCLUSIVE lock until its transaction
// commits: a run that dropped creates no partition while the partitions
// still reach half their span ahead (readers waited behind those creates),
// and the next run creates them.
func TestRunThatDroppedLeavesTheCreatesToTheNext(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t, nil)
	now := dbNowMs(t, db)
	old := oldPartition(t, db, now-10*time.Minute.Milliseconds())
	first, err := maintainOnce(ctx, db, outboxretention.Maintenance{Table: outbox.LeaseTable, Width: time.Minute, Ahead: 4 * time.Minute, NowMs: now})
	if err != nil || len(first.Created) == 0 {
		t.Fatalf("first run %+v, %v: want partitions up to 4 minutes ahead", first, err)
	}
	// Six minutes ahead wanted, four there: more than half.
	m := outboxretention.Maintenance{Table: outbox.LeaseTable, Width: time.Minute, Ahead: 6 * time.Minute, CutoffMs: now, NowMs: now}
	r, err := maintainOnce(ctx, db, m)
	if err != nil || !slices.Equal(r.Dropped, []string{old}) || len(r.Created) != 0 {
		t.Fatalf("the run that dropped: %+v, %v; want %s dropped and nothing created", r, err, old)
	}
	r, err = maintainOnce(ctx, db, m)
	if err != nil || len(r.Dropped) != 0 || len(r.Created) == 0 {
		t.Fatalf("the next run: %+v, %v; want the partitions up to 6 minutes ahead created", r, err)
	}
}
