package integration

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/ffriver/ffriver/internal/testproc"
	"github.com/ffriver/ffriver/subscribe"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// lockWaitBound is the longest any session may wait for a lock on a table
// of the test's schema: the streams, the writer, pg_dump, maintenance
// itself. Maintenance gives up on a lock after 200 ms (its lock_timeout)
// and tries again later; a drop then holds the table until its
// transaction commits, which on a quiet machine is a few milliseconds
// later and on two cores at load average 38 was up to 3 s (with creates
// after the drop, since left to the next run, 4.4 s). A maintenance that
// queued behind the idle reader would make everyone queue behind it for
// as long as the reader stays open: most of readerHold. Lock waits, not
// wall-clock silences, are what the test bounds: on such a machine a
// write and a stream's silence took 5.5–6 s with no lock wait at all, and
// those are reported, not asserted.
const lockWaitBound = 6 * time.Second

// readerHold is how long the idle reader stays open at least.
const readerHold = 15 * time.Second

// TestRetentionBesidePgDump runs outbox retention rotating 1-second
// partitions (a 10 s retention, a pass every 300 ms, the built ffscheduler
// and ffworker) beside a small write load, a consumer of each stream and a
// real `pg_dump` of the schema 2 s after the last one ended, then beside a session idle in
// `BEGIN; SELECT count(*) FROM ff_lease_event`. Every stream keeps
// flowing: no session waits longer than lockWaitBound for a lock on the
// schema's tables (the longest stream silence and write are reported),
// every event is delivered exactly once; retention still drops and attaches
// partitions. While the idle session holds the table, `ffctl status` names
// it as what retention waits for and the scheduler's
// ffriver_outbox_retention_waiting_seconds is above 0; both clear once it
// ends.
func TestRetentionBesidePgDump(t *testing.T) {
	t.Parallel()
	testdb.Reserve(t, testdb.BinariesConns+4) // its binaries, a stream, pg_dump and the idle session (docs/development.md)
	pgDump, err := exec.LookPath("pg_dump")
	if err != nil {
		skipOrFail(t, "pg_dump is not on PATH ("+err.Error()+"): this test runs a real pg_dump of the schema beside retention")
	}
	ctx := t.Context()
	db := testdb.New(t, nil)
	dump := func() (time.Duration, error) {
		dctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		cmd := exec.CommandContext(dctx, pgDump, "--strict-names", "--schema", `"`+db.Schema+`"`, "--file", os.DevNull, "--dbname", testdb.URL())
		cmd.Env = testproc.Env()
		start := time.Now()
		out, err := cmd.CombinedOutput()
		if err != nil {
			return 0, fmt.Errorf("%w: %s", err, strings.TrimSpace(string(out)))
		}
		return time.Since(start), nil
	}
	// A pg_dump that cannot dump this server at all (an older major
	// version) says so before anything runs.
	if _, err := dump(); err != nil {
		skipOrFail(t, "pg_dump of an idle schema failed: "+err.Error())
	}

	bctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	bins, err := testproc.Build(bctx, t.TempDir(), "ffscheduler", "ffworker", "ffctl")
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	sched := startProc(t, "ffscheduler", bins["ffscheduler"], append(dbArgs(db), "--ui-addr", "off", "--metrics-addr", "127.0.0.1:0",
		"--outbox-retention", "10s", "--outbox-retention-interval", "300ms")...)
	startProc(t, "ffworker", bins["ffworker"], append(dbArgs(db), "--concurrency", "4")...)
	metricsAddr := awaitMetricsAddr(t, sched)
	locks := watchLockWaits(t, db.Pool, db.Schema)
	defer locks.stop()

	// The consumers: one per stream, from the start of the (empty)
	// outboxes. Each records when it delivered what.
	type delivery struct {
		key string
		at  time.Time
	}
	var (
		mu        sync.Mutex
		delivered = map[string][]delivery{} // by stream, in delivery order
		written   = map[string]time.Time{}  // by stream + key: when its write returned
		streamErr error
	)
	cctx, stopConsumers := context.WithCancel(ctx)
	var consumers sync.WaitGroup
	defer func() { stopConsumers(); consumers.Wait() }()
	consume := func(stream string, next func(context.Context) (string, error)) {
		consumers.Go(func() {
			for {
				key, err := next(cctx)
				if err != nil {
					if cctx.Err() == nil {
						mu.Lock()
						streamErr = cmpErr(streamErr, fmt.Errorf("%s stream: %w", stream, err))
						mu.Unlock()
					}
					return
				}
				mu.Lock()
				delivered[stream] = append(delivered[stream], delivery{key, time.Now()})
				mu.Unlock()
			}
		})
	}
	opts := subscribe.Options{Schema: db.Schema, Start: subscribe.StartBeginning}
	leases, err := subscribe.Leases(ctx, db.Pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer leases.Close()
	completions, err := subscribe.Completions(ctx, db.Pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer completions.Close()
	consume("leases", func(ctx context.Context) (string, error) {
		ev, err := leases.Next(ctx)
		return ev.ExecutionID.String() + " " + ev.Type, err
	})
	consume("completions", func(ctx context.Context) (string, error) {
		ev, err := completions.Next(ctx)
		return ev.ExecutionID.String() + " " + ev.Outcome, err
	})

	// The load: one execution at a time created, claimed and completed, a
	// lease event acquired, then revoked with a completion success.
	st, err := executions.Open(ctx, db.Pool, executions.Config{Schema: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	var (
		slowestWrite time.Duration
		writeErr     error
		executed     int
	)
	// The writer stops between executions, never inside a write: a write
	// cancelled mid-commit may have committed events the test could not
	// count as written.
	stopW := make(chan struct{})
	var writer sync.WaitGroup
	stopWriting := sync.OnceFunc(func() { close(stopW); writer.Wait() })
	defer stopWriting()
	writer.Go(func() {
		timed := func(f func(context.Context) error) error {
			octx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			start := time.Now()
			err := f(octx)
			mu.Lock()
			slowestWrite = max(slowestWrite, time.Since(start))
			mu.Unlock()
			return err
		}
		pace := time.NewTicker(50 * time.Millisecond)
		defer pace.Stop()
		for {
			select {
			case <-stopW:
				return
			case <-pace.C:
			}
			var lease executions.Lease
			err := timed(func(ctx context.Context) error {
				if _, err := st.Create(ctx, executions.CreateParams{Lane: "dump"}); err != nil {
					return err
				}
				ls, err := st.Claim(ctx, executions.ClaimParams{Lane: "dump", WorkerInstanceID: "w", LeaseTTL: time.Minute})
				if err == nil && len(ls) != 1 {
					err = fmt.Errorf("claimed %d executions, want the one just created", len(ls))
				}
				if err == nil {
					lease = ls[0]
				}
				return err
			})
			if err == nil {
				mu.Lock()
				written["leases "+lease.ID.String()+" "+ff.LeaseAcquired] = time.Now()
				mu.Unlock()
				err = timed(func(ctx context.Context) error { return st.Complete(ctx, lease, nil) })
			}
			if err != nil {
				if ctx.Err() == nil {
					mu.Lock()
					writeErr = err
					mu.Unlock()
				}
				return
			}
			mu.Lock()
			written["leases "+lease.ID.String()+" "+ff.LeaseRevoked] = time.Now()
			written["completions "+lease.ID.String()+" "+ff.OutcomeSuccess] = time.Now()
			executed++
			mu.Unlock()
		}
	})
	healthy := func() {
		t.Helper()
		mu.Lock()
		defer mu.Unlock()
		if writeErr != nil || streamErr != nil {
			t.Fatalf("the load failed: write %v, streams %v", writeErr, streamErr)
		}
	}

	// pg_dump of the schema 2 s after the previous one ended, while
	// retention rotates. (Every 2 s by the clock, a dump that takes longer
	// on a busy machine was followed by the next at once, back to back,
	// and maintenance, which gives up on a lock after 200 ms and tries
	// again later, never found the gap it waits for.)
	var (
		dumpsOK     int
		dumpErrs    []string
		slowestDump time.Duration
	)
	dctx, stopDumps := context.WithCancel(ctx)
	var dumps sync.WaitGroup
	stopDumping := sync.OnceFunc(func() { stopDumps(); dumps.Wait() })
	defer stopDumping()
	dumps.Go(func() {
		for {
			select {
			case <-dctx.Done():
				return
			case <-time.After(2 * time.Second):
			}
			took, err := dump()
			if dctx.Err() != nil {
				return
			}
			mu.Lock()
			if err != nil {
				// pg_dump fails when a table it listed is dropped before it
				// locks it: a partition retention dropped meanwhile.
				dumpErrs = append(dumpErrs, err.Error())
			} else {
				dumpsOK++
				slowestDump = max(slowestDump, took)
			}
			mu.Unlock()
		}
	})

	// Retention rotates beside the dumps: a partition dropped (the oldest
	// one goes) and one attached (the newest end moves on), and three
	// dumps done meanwhile.
	partitionSpan := func() (lo, hi int64) {
		t.Helper()
		qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := db.Pool.QueryRow(qctx, `SELECT coalesce(min(lo_ms), 0), coalesce(max(hi_ms), 0) FROM ff_outbox_partition
			WHERE stream = 'ff_lease_event' AND lo_ms IS NOT NULL`).Scan(&lo, &hi); err != nil {
			t.Fatal(err)
		}
		return lo, hi
	}
	var firstLo, firstHi int64
	fftest.Await(t, 60*time.Second, "the lease outbox's first time partitions", func() bool {
		firstLo, firstHi = partitionSpan()
		return firstLo != 0
	})
	dumpsBefore := func() int { mu.Lock(); defer mu.Unlock(); return dumpsOK }()
	fftest.Await(t, 60*time.Second, "retention to drop and attach a lease partition, and 3 pg_dumps of the schema meanwhile", throttled(func() bool {
		healthy()
		lo, hi := partitionSpan()
		mu.Lock()
		defer mu.Unlock()
		return lo > firstLo && hi > firstHi && dumpsOK >= dumpsBefore+3
	}))
	stopDumping()

	// A session idle in a transaction that read the outbox: retention
	// waits for it (and says so), streams and writers do not.
	status := func() (waiting []int32) {
		t.Helper()
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		cmd := exec.CommandContext(sctx, bins["ffctl"], append([]string{"status", "--format", "json", "--outbox-retention", "10s"}, dbArgs(db)...)...)
		cmd.Env = testproc.Env()
		out, err := cmd.Output()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				err = fmt.Errorf("%w: %s", err, ee.Stderr)
			}
			t.Fatalf("ffctl status: %v", err)
		}
		var r struct {
			Streams []struct {
				Name          string `json:"name"`
				RetentionWait *struct {
					LockHolders []struct {
						PID int32 `json:"pid"`
					} `json:"lock_holders"`
				} `json:"retention_wait"`
			} `json:"streams"`
		}
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatalf("ffctl status: %v: %s", err, out)
		}
		for _, s := range r.Streams {
			if s.Name == "leases" && s.RetentionWait != nil {
				for _, h := range s.RetentionWait.LockHolders {
					waiting = append(waiting, h.PID)
				}
				if len(waiting) == 0 {
					waiting = []int32{0}
				}
			}
		}
		return waiting
	}
	waitingSeconds := func() float64 {
		return scrape(t, metricsAddr).get(`ffriver_outbox_retention_waiting_seconds{stream="leases"}`)
	}
	reader, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Rollback(ctx)
	readerSince := time.Now()
	var readerPID int32
	if err := reader.QueryRow(ctx, `SELECT pg_backend_pid() FROM (SELECT count(*) FROM ff_lease_event) n`).Scan(&readerPID); err != nil {
		t.Fatal(err)
	}
	fftest.Await(t, 30*time.Second, fmt.Sprintf("ffctl status to show retention waiting for the idle reader (pid %d)", readerPID), throttled(func() bool {
		healthy()
		return slices.Contains(status(), readerPID)
	}))
	fftest.Await(t, 30*time.Second, "ffriver_outbox_retention_waiting_seconds above 0", func() bool {
		healthy()
		return waitingSeconds() > 0
	})
	// Held long enough that a maintenance queued behind it would have
	// stopped the streams and the writer for readerHold.
	if rest := readerHold - time.Since(readerSince); rest > 0 {
		time.Sleep(rest)
	}
	if err := reader.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	fftest.Await(t, 30*time.Second, "ffctl status and the metric to clear once the reader ended", throttled(func() bool {
		healthy()
		return len(status()) == 0 && waitingSeconds() == 0
	}))

	// The load stops; every event written reaches its stream, once.
	stopWriting()
	healthy()
	mu.Lock()
	want := len(written)
	mu.Unlock()
	fftest.Await(t, 30*time.Second, fmt.Sprintf("the consumers to deliver the %d events written", want), func() bool {
		healthy()
		mu.Lock()
		defer mu.Unlock()
		return len(delivered["leases"])+len(delivered["completions"]) >= want
	})
	stopConsumers()
	consumers.Wait()

	mu.Lock()
	defer mu.Unlock()
	for _, stream := range []string{"leases", "completions"} {
		seen := map[string]bool{}
		var silent time.Duration
		var silentAt string
		var prev time.Time
		for _, d := range delivered[stream] {
			key := stream + " " + d.key
			w, ok := written[key]
			if !ok {
				t.Errorf("%s delivered %q, which the load did not write (or wrote after the consumers stopped)", stream, d.key)
				continue
			}
			if seen[key] {
				t.Errorf("%s delivered %q twice", stream, d.key)
			}
			seen[key] = true
			// How long the stream went without delivering while this
			// event was committed.
			from := w
			if prev.After(from) {
				from = prev
			}
			if s := d.at.Sub(from); s > silent {
				silent, silentAt = s, d.at.Format("15:04:05.000")
			}
			prev = d.at
		}
		for key := range written {
			if strings.HasPrefix(key, stream+" ") && !seen[key] {
				t.Errorf("%s never delivered %q", stream, strings.TrimPrefix(key, stream+" "))
			}
		}
		t.Logf("%s: %d events delivered once each; longest silence with an event committed: %s (until %s)", stream, len(seen), silent.Round(time.Millisecond), silentAt)
	}
	t.Logf("%d executions written, the slowest write %s; %d pg_dumps, the slowest %s, %d failed %q; the reader held the outbox %s",
		executed, slowestWrite.Round(time.Millisecond), dumpsOK, slowestDump.Round(time.Millisecond), len(dumpErrs), dumpErrs, time.Since(readerSince).Round(time.Millisecond))
	locks.stop()
	waited, who := locks.longest()
	t.Logf("the longest wait for a lock on the schema's tables: %s (%s)", waited.Round(time.Millisecond), who)
	if waited > lockWaitBound {
		t.Errorf("%s waited %s for a lock on the schema's tables beside retention: want at most %s", who, waited.Round(time.Millisecond), lockWaitBound)
	}
}

// throttled calls cond at most every 200 ms (fftest.Await polls every
// 10): the conditions of this test run ffctl or scrape /metrics, and the
// machine's cores run the load.
func throttled(cond func() bool) func() bool {
	var last time.Time
	return func() bool {
		if time.Since(last) < 200*time.Millisecond {
			return false
		}
		last = time.Now()
		return cond()
	}
}

// cmpErr keeps the first error.
func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// lockWaits samples, every 100 ms, the sessions waiting for a lock on a
// table of one schema, and keeps the longest wait seen (pg_locks.waitstart).
type lockWaits struct {
	stop func()

	mu          sync.Mutex
	longestWait time.Duration
	who         string
	err         error
}

func watchLockWaits(t *testing.T, pool *pgxpool.Pool, schema string) *lockWaits {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	w := &lockWaits{}
	var wg sync.WaitGroup
	w.stop = sync.OnceFunc(func() {
		cancel()
		wg.Wait()
		if w.err != nil {
			t.Errorf("sampling the lock waits: %v", w.err)
		}
	})
	wg.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			var (
				pid            int32
				app, rel, mode string
				secs           float64
			)
			err := pool.QueryRow(ctx, `SELECT l.pid, coalesce(a.application_name, ''), c.relname, l.mode,
				extract(epoch FROM clock_timestamp() - l.waitstart)::float8
				FROM pg_locks l JOIN pg_class c ON c.oid = l.relation JOIN pg_namespace n ON n.oid = c.relnamespace
				LEFT JOIN pg_stat_activity a ON a.pid = l.pid
				WHERE NOT l.granted AND l.waitstart IS NOT NULL AND n.nspname = $1
				ORDER BY l.waitstart LIMIT 1`, schema).Scan(&pid, &app, &rel, &mode, &secs)
			if ctx.Err() != nil {
				return
			}
			w.mu.Lock()
			switch {
			case errors.Is(err, pgx.ErrNoRows):
			case err != nil:
				w.err = err
				w.mu.Unlock()
				return
			case time.Duration(secs*float64(time.Second)) > w.longestWait:
				w.longestWait = time.Duration(secs * float64(time.Second))
				w.who = fmt.Sprintf("pid %d (%s) for %s on %s", pid, cmp.Or(app, "no application_name"), mode, rel)
			}
			w.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	})
	return w
}

// longest returns the longest lock wait seen and who waited.
func (w *lockWaits) longest() (time.Duration, string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.longestWait, cmp.Or(w.who, "nobody")
}
