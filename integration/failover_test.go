package integration

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ffriver/ffriver/internal/pgcluster"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/ffriver/ffriver/migrations"
)

// failover fails r over (Replication.Failover), failing the test when it
// cannot, and returns how long the promotion took.
func failover(t *testing.T, r *pgcluster.Replication) time.Duration {
	t.Helper()
	d, err := r.Failover(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestFailover runs the fault suite's scenario (faultharness_test.go: due
// work driven by real ffscheduler and ffworker processes, one `ffctl tail`
// per stream) against a primary and a streaming standby, all given the
// multi-host URL of the two. About a third of the way through the load the
// primary is killed (immediate) and the standby promoted; the binaries and
// the tails follow it.
//
//   - Synchronous replication: nothing acknowledged is lost. Every due
//     transition happened exactly once, every outbox row plain-SQL writers
//     were told committed is there, and every event reached each tail and
//     each named consumer exactly once, in order, across the failover (the
//     reconciliation of the fault suite).
//   - Asynchronous replication, the standby cut off from the primary for a
//     while before the kill: the new primary lacks the last transitions and
//     events, which the tails had read. Each tail is refused with an error
//     that names the failover and a position to resume from; it prints
//     nothing of the new primary under its old position. Tails started
//     from that position, and the named consumers started again, print
//     every event the new primary has, each once.
//     The scanners redo the lost transitions: every execution ends in its
//     end state with exactly its events.
func TestFailover(t *testing.T) {
	t.Parallel()
	sched, worker := buildPipelineBinaries(t)
	bins := faultBins{scheduler: sched, worker: worker, ffctl: buildFFCtl(t)}
	const schema = "fault_failover"

	// start starts the replication, migrates the schema through the
	// multi-host URL and the scenario's processes, with a named consumer
	// (`ffctl tail --consumer`) per stream beside the scenario's tails, and
	// seeds the load.
	start := func(t *testing.T, sync bool) (*pgcluster.Replication, *scenario, map[string]*tailProc) {
		r := pgcluster.NewReplication(t.Context(), t, sync, "")
		pool := r.Pool(t.Context(), schema, 8)
		if _, err := migrations.Migrate(t.Context(), pool, schema, &migrations.Options{Partitions: faultPartitions}); err != nil {
			t.Fatalf("migrating through the multi-host URL: %v", err)
		}
		sc := newScenario(t, bins, &testdb.DB{Pool: pool, Schema: schema, Partitions: faultPartitions}, r.URL)
		sc.startOneOfEach()
		named := map[string]*tailProc{}
		for _, stream := range []string{"leases", "completions"} {
			named[stream] = startTail(t, bins.ffctl, stream, namedArgs(sc, stream)...)
		}
		sc.seed()
		return r, sc, named
	}
	// onNewTimeline checks that the server the pool reaches now is the
	// promoted standby, and that streams ticked on its timeline.
	onNewTimeline := func(sc *scenario) {
		var timeline, ticks int
		sc.await("a stream tick on the new primary's timeline", 30*time.Second, func() (bool, string) {
			err := sc.query(`SELECT ff_wal_timeline(), (SELECT count(*) FROM ff_stream_tick WHERE tick_id >> 40 = ff_wal_timeline())`, nil, &timeline, &ticks)
			return err == nil && timeline == 2 && ticks > 0, fmt.Sprintf("timeline %d, %d ticks of it (%v)", timeline, ticks, err)
		})
	}

	t.Run("synchronous replication", func(t *testing.T) {
		r, sc, named := start(t, true)
		// Writers commit outbox rows with plain SQL until the failover
		// ends their connections: every row they were told committed must
		// be on the promoted standby (the reconciliation checks).
		sc.startWriters(4)
		done := sc.awaitProgress(0.3, 60*time.Second)
		killed := time.Now()
		promote := failover(t, r)
		after := -1
		sc.await("a transition on the promoted standby", 60*time.Second, func() (bool, string) {
			after = sc.progress()
			return after > done, fmt.Sprintf("%d transitions done", after)
		})
		onNewTimeline(sc)
		sc.drain(90 * time.Second)
		sc.note("primary killed (immediate) at %d/%d transitions, standby promoted in %s; the load finished %s after the kill",
			done, sc.load.transitions(), promote.Round(10*time.Millisecond), time.Since(killed).Round(100*time.Millisecond))
		for _, tp := range sc.tails {
			if n := strings.Count(tp.stderr.String(), "connection lost; reconnecting"); n < 1 {
				t.Errorf("ffctl tail --stream %s reported no lost connection across the failover:\n%s", tp.stream, tp.stderr.String())
			}
		}
		sc.reconcile()
		// The named consumers, too, printed every event once, in order.
		probs := &problems{t: t, counts: map[string]int{}}
		leases, completions := sc.readLeaseTable(), sc.readCompletionTable()
		sc.await("the named consumers to catch up", 30*time.Second, func() (bool, string) {
			l, c := named["leases"].count(), named["completions"].count()
			return l >= len(leases) && c >= len(completions), fmt.Sprintf("leases %d of %d, completions %d of %d", l, len(leases), c, len(completions))
		})
		time.Sleep(500 * time.Millisecond) // room for a repeat to show
		for stream, tp := range named {
			tp.stop()
			table, size := leases.event, len(leases)
			if stream == "completions" {
				table, size = completions.event, len(completions)
			}
			if c := sc.checkStream(tp, table, size, probs); c.reconnects < 1 {
				t.Errorf("named consumer of %s reported no lost connection across the failover:\n%s", stream, tp.stderr.String())
			}
		}
		if t.Failed() {
			t.Logf("the promoted standby's log:\n%s\nthe old primary's log:\n%s", r.Primary.Log(), r.Standby.Log())
		}
	})

	t.Run("asynchronous replication", func(t *testing.T) {
		r, sc, named := start(t, false)
		sc.awaitProgress(0.3, 60*time.Second)

		// The standby stops receiving: the primary's WAL sender is frozen.
		admin := r.Primary.Pool(t.Context(), "public", 1)
		var sender int
		if err := admin.QueryRow(t.Context(), `SELECT pid FROM pg_stat_replication`).Scan(&sender); err != nil {
			t.Fatalf("finding the WAL sender: %v", err)
		}
		if err := syscall.Kill(sender, syscall.SIGSTOP); err != nil {
			t.Fatalf("freezing the WAL sender: %v", err)
		}
		frozenAt := sc.progress()
		// Every event committed from now on is one the standby never
		// receives: its id is above the newest committed now.
		frozenEvent := map[string]int64{}
		var leaseMax, completionMax int64
		if err := admin.QueryRow(t.Context(), `SELECT (SELECT coalesce(max(event_id), 0) FROM `+schema+`.ff_lease_event),
			(SELECT coalesce(max(event_id), 0) FROM `+schema+`.ff_completion_event)`).Scan(&leaseMax, &completionMax); err != nil {
			t.Fatal(err)
		}
		frozenEvent["leases"], frozenEvent["completions"] = leaseMax, completionMax
		// Each consumer must have printed such an event, else it has read
		// nothing the failover loses and may rightly go on (on a busy
		// machine a consumer lags: twenty events printed after the freeze
		// were not enough).
		readLost := func(tp *tailProc, stream string) bool {
			for _, ev := range tp.snapshot() {
				if ev.EventID > frozenEvent[stream] {
					return true
				}
			}
			return false
		}
		sc.await("transitions and events the standby does not receive, read by every consumer", 90*time.Second, func() (bool, string) {
			n := sc.progress()
			ok := n >= frozenAt+100
			var behind []string
			for _, stream := range []string{"leases", "completions"} {
				for name, tp := range map[string]*tailProc{"tail": sc.tails[stream], "named consumer": named[stream]} {
					if !readLost(tp, stream) {
						ok = false
						behind = append(behind, name+" of "+stream)
					}
				}
			}
			slices.Sort(behind)
			return ok, fmt.Sprintf("%d transitions since the freeze; yet to print an event committed after it: %v", n-frozenAt, behind)
		})
		lostFrom := sc.progress()
		admin.Close()
		// The WAL sender dies with what it had not sent.
		_ = syscall.Kill(sender, syscall.SIGKILL)
		promote := failover(t, r)
		killed := time.Now()

		// Each consumer is refused and names the failover, and what to do:
		// a tail, the position to resume from; a named consumer, to start
		// it again. It prints nothing more.
		cursorRE := regexp.MustCompile(`Resume from cursor ([0-9a-f]+)`)
		type consumer struct {
			name, stream string
			first        *tailProc
			old          []tailEvent // what first printed
			again        *tailProc   // resumed as the error says
		}
		var consumers []*consumer
		for _, stream := range []string{"leases", "completions"} {
			consumers = append(consumers, &consumer{name: "tail of " + stream, stream: stream, first: sc.tails[stream]},
				&consumer{name: "named consumer of " + stream, stream: stream, first: named[stream]})
		}
		dir := t.TempDir()
		for _, c := range consumers {
			tp := c.first
			select {
			case <-tp.done:
			case <-time.After(60 * time.Second):
				t.Fatalf("%s still runs 60 s after the failover:\n%s", c.name, tp.stderr.String())
			}
			msg := tp.stderr.String()
			if tp.code != 1 {
				t.Errorf("%s exited %d, want 1:\n%s", c.name, tp.code, msg)
			}
			for _, want := range []string{"beyond this server's history", "failed over", "taken on WAL timeline 1", "(now on timeline 2)", "delivers again"} {
				if !strings.Contains(msg, want) {
					t.Errorf("%s: its error does not say %q:\n%s", c.name, want, msg)
				}
			}
			c.old = tp.snapshot()
			args := namedArgs(sc, c.stream)
			if tp != named[c.stream] {
				m := cursorRE.FindStringSubmatch(msg)
				if m == nil {
					t.Fatalf("%s names no cursor to resume from:\n%s", c.name, msg)
				}
				args = slices.Concat([]string{"tail", "--stream", c.stream, "--cursor", m[1], "--format", "json",
					"--cursor-file", filepath.Join(dir, c.stream+".cursor")}, sc.dbFlags())
			} else if !strings.Contains(msg, "Start consumer") {
				t.Errorf("%s: its error does not say to start it again:\n%s", c.name, msg)
			}
			c.again = startTail(t, bins.ffctl, c.stream, args...)
		}
		lastCursor := consumers[0].old[len(consumers[0].old)-1].Cursor

		// The scanners redo what was lost.
		total := sc.load.transitions()
		sc.await("every due transition on the promoted standby", 120*time.Second, func() (bool, string) {
			n := sc.progress()
			return n == total, fmt.Sprintf("%d of %d transitions done", n, total)
		})
		onNewTimeline(sc)
		sc.await("every item job to end", 60*time.Second, func() (bool, string) {
			n := sc.Count(`SELECT count(*) FROM river_job WHERE kind = ANY($1) AND state NOT IN ('completed', 'cancelled', 'discarded')`, itemKinds())
			return n == 0, fmt.Sprintf("%d item jobs not ended", n)
		})
		// A consumer that comes back later, when the new primary has handed
		// out the lost transactions' ids again (and more), is refused by
		// the timeline its position records.
		sc.Exec(`DO $$ BEGIN FOR i IN 1..3000 LOOP PERFORM pg_current_xact_id(); COMMIT; END LOOP; END $$`)
		late := runFFCtl(t, bins.ffctl, nil, slices.Concat([]string{"tail", "--stream", "leases", "--cursor", lastCursor,
			"--max-events", "1", "--idle-exit", "3s"}, sc.dbFlags())...)
		if late.code != 1 || !strings.Contains(late.stderr, "taken on WAL timeline 1, after the last point of that timeline this server (now on timeline 2) holds") ||
			strings.Contains(late.stderr, "has only reached") || !cursorRE.MatchString(late.stderr) || late.stdout != "" {
			t.Errorf("a tail resumed later after the last cursor printed before the failover: exit %d, want 1 and the failover named by the timeline\nstdout:\n%s\nstderr:\n%s",
				late.code, late.stdout, late.stderr)
		}

		probs := &problems{t: t, counts: map[string]int{}}
		execs := sc.readExecutions()
		leases, completions := sc.readLeaseTable(), sc.readCompletionTable()
		sc.attachEvents(execs, leases, completions, probs)
		consistent := 0
		for id, e := range execs {
			w := classWants[e.lane]
			if e.phase != w.phase || e.eligibility != w.elig || e.public != w.public {
				probs.add("not transitioned", "%s (%s): %s/%s/%s, want %s/%s/%s", id, e.lane, e.phase, e.eligibility, e.public, w.phase, w.elig, w.public)
			} else if bad := e.halfWritten(w); len(bad) > 0 {
				probs.add("half-written", "%s (%s): %s", id, e.lane, strings.Join(bad, "; "))
			} else {
				consistent++
			}
		}

		// The resumed consumers print every event of the new primary after
		// their position, each once; with what they printed before the
		// failover, every event of the new primary.
		tables := map[string]func(int64) (string, string, bool){"leases": leases.event, "completions": completions.event}
		sizes := map[string]int{"leases": len(leases), "completions": len(completions)}
		sc.await("the resumed consumers to catch up", 30*time.Second, func() (bool, string) {
			var status []string
			ok := true
			for _, c := range consumers {
				seen := map[int64]bool{}
				for _, ev := range slices.Concat(c.old, c.again.snapshot()) {
					// (An event id the new primary gave again to
					// another event counts as that event only.)
					if exec, what, in := tables[c.stream](ev.EventID); in && exec == ev.ExecutionID && what == ev.what() {
						seen[ev.EventID] = true
					}
				}
				ok = ok && len(seen) == sizes[c.stream]
				status = append(status, fmt.Sprintf("%s %d of %d", c.name, len(seen), sizes[c.stream]))
			}
			return ok, strings.Join(status, ", ")
		})
		time.Sleep(500 * time.Millisecond) // room for a repeat to show
		again := map[string]int{}
		for _, c := range consumers {
			c.again.stop()
			counts := map[int64]int{}
			oldIDs := map[int64]bool{}
			for _, ev := range c.old {
				oldIDs[ev.EventID] = true
			}
			for _, ev := range c.again.snapshot() {
				counts[ev.EventID]++
				if exec, what, ok := tables[c.stream](ev.EventID); !ok || exec != ev.ExecutionID || what != ev.what() {
					probs.add("unknown event", "the resumed %s printed event %d (%s for %s), which the new primary has as %s for %s (%t)",
						c.name, ev.EventID, ev.what(), ev.ExecutionID, what, exec, ok)
				}
				if oldIDs[ev.EventID] {
					again[c.name]++
				}
			}
			for id, n := range counts {
				if n > 1 {
					probs.add("repeated", "the resumed %s printed event %d %d times", c.name, id, n)
				}
			}
		}

		// What the consumers printed before the failover all comes from the
		// old primary's history: started again alone, on a port of its own,
		// it has every one of those events as they were printed.
		old := r.Standby // the old primary, stopped by the failover
		old.Port = pgcluster.FreePort(t)
		old.Host = "127.0.0.1"
		if out, err := old.Run(t.Context(), "pg_ctl", "-D", old.Data(), "-l", old.LogFile(), "-w", "-t", "30",
			"-o", fmt.Sprintf("-p %d", old.Port), "start"); err != nil {
			t.Fatalf("starting the old primary alone: %v\n%s\n%s", err, out, old.Log())
		}
		oldDB := &scenario{t: t, ctx: t.Context(), db: &testdb.DB{Pool: old.Pool(t.Context(), schema, 2), Schema: schema}}
		oldTables := map[string]func(int64) (string, string, bool){"leases": oldDB.readLeaseTable().event, "completions": oldDB.readCompletionTable().event}
		lost := map[string]int{}
		for _, c := range consumers {
			for _, ev := range c.old {
				if exec, what, ok := oldTables[c.stream](ev.EventID); !ok || exec != ev.ExecutionID || what != ev.what() {
					probs.add("foreign event", "the first %s printed event %d (%s for %s), which the old primary has as %s for %s (%t): "+
						"it came from the new primary under the old position", c.name, ev.EventID, ev.what(), ev.ExecutionID, what, exec, ok)
				}
				if exec, what, ok := tables[c.stream](ev.EventID); c.first == sc.tails[c.stream] && (!ok || exec != ev.ExecutionID || what != ev.what()) {
					lost[c.stream]++
				}
			}
		}
		if lost["leases"]+lost["completions"] == 0 {
			t.Errorf("the new primary lacks none of the events the tails printed: the failover lost nothing, and tested nothing")
		}
		sc.note("standby cut off at %d/%d transitions, primary killed (immediate) at %d, standby promoted in %s; "+
			"the tails had printed %d lease and %d completion events the new primary lacks; "+
			"resumed, they printed %d and %d events again (the named consumers %d and %d); %d of %d executions consistent, all done %s after the kill",
			frozenAt, total, lostFrom, promote.Round(10*time.Millisecond), lost["leases"], lost["completions"],
			again["tail of leases"], again["tail of completions"], again["named consumer of leases"], again["named consumer of completions"],
			consistent, len(execs), time.Since(killed).Round(100*time.Millisecond))
		for _, n := range sc.notes {
			t.Log(n)
		}
		if probs.total() > 0 || t.Failed() {
			t.Logf("the promoted standby's log:\n%s\nthe old primary's log:\n%s", r.Primary.Log(), r.Standby.Log())
		}
	})
}

// namedArgs are the arguments of `ffctl tail` for the scenario's named
// consumer of stream.
func namedArgs(sc *scenario, stream string) []string {
	return slices.Concat([]string{"tail", "--stream", stream, "--consumer", "failover-" + stream, "--from-start", "--format", "json"}, sc.dbFlags())
}
