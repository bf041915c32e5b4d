package scanners

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/actions"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/ffriver/ffriver/workers"
)

// Every scanner's Due reads each partition through an index, at most its
// cap, on a seeded store (issue 27, item 3): the statement each Due runs is
// explained on 100,000 executions with 5,000 expired leases, 5,000 passed
// deadlines and 5,000 due delays, 20,000 edges, 10,000 pending cancel
// groups and 20,000 tombstones, and a sequential scan of a large table
// fails. It then checks that what Due counts stops at the cap and says so,
// and that the oldest stays exact.
func TestDuePlans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t, nil)
	testdb.Seed(t, db, testdb.SeedSize{Executions: 100_000, LeaseEvents: 1, Edges: 20_000, CancelGroups: 10_000, Tombstones: 20_000})
	st, err := executions.Open(ctx, db.Pool, executions.Config{Schema: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	large := []string{"ff_exec_core", "ff_attempt", "ff_edge", "ff_pending_cancel_groups", "ff_exec_removed"}
	// Each statement is explained as Due runs it: with dbutil.PlannerSettings, in a
	// transaction. Every large table is read by a plain index scan, in
	// the index's order, so the limits bound what is read.
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, dbutil.PlannerSettings); err != nil {
		t.Fatal(err)
	}
	explain := func(name, sql string, args ...any) testdb.PlanNode {
		t.Helper()
		plan := testdb.AssertNoSeqScan(t, tx, large, sql, args...)
		plan.Walk(func(n testdb.PlanNode) {
			if n.NodeType == "Bitmap Heap Scan" || (n.NodeType == "Sort" && len(n.Plans) > 0 && n.Plans[0].Relation != "") {
				t.Errorf("%s: %s, which reads every due row before the limit:\n%s", name, n.NodeType, plan)
			}
		})
		return plan
	}
	now := ff.SystemClock{}.NowMs()
	const limit = 10
	req := workers.DueRequest{Store: st, NowMs: now, Cap: limit}
	ns, tk, tv := actions.FilterParams(ff.Filter{})
	nsA, tkA, tvA := actions.FilterParams(ff.Filter{Namespace: "ns-1"})
	parts := int(st.Partitions())
	for name, sh := range map[string]dueShape{
		AttemptTimeout:    attemptTimeoutDue,
		DelayedPromoter:   delayedPromoterDue,
		ExecutionDeadline: executionDeadlineDue,
		Dependency:        dependencyDue(),
		"edge_cancel":     groupsDue,
	} {
		var bound any = now
		switch name {
		case Dependency:
			bound = now - DefaultDependencyStale.Milliseconds()
		case "edge_cancel":
			bound = true
		}
		sql := req.SQL(boundedDueSQL(sh))
		// A timer's $7: none (a periodic tick's), then a wake tick's.
		var after []any
		if sh.timer {
			after = []any{nil}
		}
		plan := explain(name, sql, append([]any{bound, ns, tk, tv, parts, dueLimit(limit)}, after...)...)
		if plan.NodeType != "Result" || plan.OneTimeFilter == "" {
			t.Errorf("%s: the gate is not a one-time filter on top of the plan:\n%s", name, plan)
		}
		explain(name+" filtered", sql, append([]any{bound, nsA, tkA, tvA, parts, dueLimit(limit)}, after...)...)
		// Nothing due (a bound before every due row): the gate's index
		// probe still reads no table sequentially.
		if name != "edge_cancel" {
			explain(name+" nothing due", sql, append([]any{int64(0), ns, tk, tv, parts, dueLimit(limit)}, after...)...)
		}
		if sh.timer {
			explain(name+" since a wake tick", sql, bound, ns, tk, tv, parts, dueLimit(limit), now-60_000)
		}
	}
	// A wake tick's items (workers.RangeScanner): the due index read in
	// order, from the range's start, also over a backlog (every seeded
	// item due in the range) and filtered.
	for _, s := range []workers.RangeScanner{AttemptTimeoutScanner{}, DelayedPromoterScanner{}, ExecutionDeadlineScanner{}} {
		for _, f := range []ff.Filter{{}, {Namespace: "ns-1"}} {
			for _, after := range []int64{1, now - 60_000} {
				q, err := s.DueRangeQuery(workers.DueRequest{Store: st, NowMs: now, AfterMs: after, Filter: f}, limit+1)
				if err != nil {
					t.Fatal(err)
				}
				explain(s.Name()+" items due in a range", q.SQL, q.Args...)
			}
		}
	}
	// The wake loop's next due time (workers.NextDueScanner, read with
	// dbutil.PlannerSettings): the due index read in order from the
	// horizon, stopping at the first row, with every seeded item due past
	// the horizon (1) or only the later ones, and filtered.
	for _, s := range []workers.NextDueScanner{AttemptTimeoutScanner{}, DelayedPromoterScanner{}, ExecutionDeadlineScanner{}} {
		for _, f := range []ff.Filter{{}, {Namespace: "ns-1"}} {
			for _, after := range []int64{1, now - 60_000} {
				sql, args := s.NextDueSQL(workers.DueRequest{Store: st, NowMs: now, Filter: f}, after)
				explain(s.Name()+" next due time", sql, args...)
			}
		}
	}
	// The dependency scanner's probe for any waiting hop, with hops
	// waiting and with none before the bound.
	for _, bound := range []int64{now, 0} {
		explain("waiting flow hops", req.SQL(hopsWaitingSQL), bound)
	}
	r := NewExecutionRetentionScanner(24 * time.Hour)
	cutoff, _, err := r.cutoff(nil, now)
	if err != nil {
		t.Fatal(err)
	}
	explain(ExecutionRetention, req.SQL(retentionDueSQL()), cutoff, ns, tk, tv, parts, dueLimit(limit))

	// What each Due returns with the cap: per partition, what it returns
	// without one, up to the cap (10; most seeded partitions have more),
	// Capped when there is more; the same partitions; the same oldest.
	params, _ := json.Marshal(retentionParams{AgeMs: (24 * time.Hour).Milliseconds()})
	for _, s := range []workers.Scanner{AttemptTimeoutScanner{}, DelayedPromoterScanner{}, ExecutionDeadlineScanner{}, EdgeCancelDispatcherScanner{},
		EdgeCancelReconcilerScanner{}, NewDependencyScanner(0), r} {
		req := req
		if s == workers.Scanner(r) {
			req.Params = params
		}
		capped, err := s.Due(ctx, db.Pool, req)
		if err != nil {
			t.Fatalf("%s: %v", s.Name(), err)
		}
		uncapped := req
		uncapped.Cap = 0
		all, err := s.Due(ctx, db.Pool, uncapped)
		if err != nil {
			t.Fatalf("%s: %v", s.Name(), err)
		}
		if len(all) < 16 || len(capped) != len(all) {
			t.Fatalf("%s: %d partitions due with the cap, %d without (want the same, at least 16)", s.Name(), len(capped), len(all))
		}
		var nCapped int
		var oldest, exact int64
		for i, d := range capped {
			a := all[i]
			want := workers.Due{Partition: a.Partition, Count: min(a.Count, limit), Capped: a.Count > limit, OldestMs: d.OldestMs}
			if s == workers.Scanner(r) {
				// Executions and tombstones, each counted up to the cap.
				want.Count = d.Count
			}
			if d != want || a.Capped {
				t.Errorf("%s: partition %d: %+v with the cap, %+v without", s.Name(), d.Partition, d, a)
			}
			if d.Capped {
				nCapped++
			}
			if oldest == 0 || d.OldestMs < oldest {
				oldest = d.OldestMs
			}
			if exact == 0 || a.OldestMs < exact {
				exact = a.OldestMs
			}
		}
		if nCapped == 0 {
			t.Errorf("%s: no partition capped; the test proves nothing", s.Name())
		}
		if oldest != exact {
			t.Errorf("%s: oldest %d with the cap, %d without", s.Name(), oldest, exact)
		}
	}
}
