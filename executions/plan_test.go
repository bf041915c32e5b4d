package executions

import (
	"context"
	"testing"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/google/uuid"
)

// The operator's reads of one execution and of list pages read what they
// need through an index on a seeded store (issue 27, item 3): each
// statement, as the Store runs it, is explained on 100,000 executions and
// 400,000 lease events, and a sequential scan of a large table fails.
func TestOperatorReadPlans(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t, nil)
	testdb.Seed(t, db, testdb.SeedSize{Executions: 100_000, LeaseEvents: 400_000})
	s, err := Open(ctx, db.Pool, Config{Schema: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	large := []string{"ff_exec_core", "ff_attempt", "ff_lease_event", "ff_completion_event"}
	// An execution running since the start of the seeded week (its
	// lifetime spans the whole lease outbox), and a terminal one.
	var running, done ff.ExecutionID
	for _, x := range []struct {
		id    *ff.ExecutionID
		phase string
	}{{&running, "active"}, {&done, "terminal"}} {
		if err := db.Pool.QueryRow(ctx, `SELECT partition_key, execution_id FROM ff_exec_core
			WHERE lifecycle_phase = $1 ORDER BY created_at_ms LIMIT 1`, x.phase).Scan(&x.id.Partition, &x.id.UUID); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []ff.ExecutionID{running, done} {
		t.Run("get "+id.String(), func(t *testing.T) {
			testdb.AssertNoSeqScan(t, db.Pool, large, s.sql(getSQL()), id.Partition, id.UUID)
			testdb.AssertNoSeqScan(t, db.Pool, large, s.sql(attemptsSQL), id.Partition, id.UUID)
			plan := testdb.AssertNoSeqScan(t, db.Pool, large, s.sql(historySQL), id.Partition, id.UUID, DefaultHistoryLimit)
			// Not the BRIN range of its lifetime: the lease outbox by
			// execution.
			plan.Walk(func(n testdb.PlanNode) {
				if n.Relation == "ff_lease_event" && n.Index != "ff_lease_event_lookup_idx" {
					t.Errorf("the history reads ff_lease_event by %s %s, want ff_lease_event_lookup_idx:\n%s", n.NodeType, n.Index, plan)
				}
			})
		})
	}

	flow := uuid.New()
	idPrefix, err := ParseIDPrefix(running.UUID.String()[:6])
	if err != nil {
		t.Fatal(err)
	}
	inPartition, err := ParseIDPrefix(running.String()[:len(running.String())-20])
	if err != nil {
		t.Fatal(err)
	}
	after := &ListCursor{CreatedAtMs: ff.SystemClock{}.NowMs() - 3_600_000, Partition: 7, UUID: uuid.Max}
	for name, p := range map[string]ListParams{
		"no filter":          {},
		"namespace":          {Namespace: "ns-1"},
		"lane":               {Lane: "lane-3"},
		"state":              {State: ff.PublicActive},
		"state completed":    {State: ff.PublicCompleted},
		"flow":               {FlowID: flow},
		"id prefix":          {ID: idPrefix},
		"id in partition":    {ID: inPartition},
		"lane and state":     {Lane: "lane-3", State: ff.PublicWaiting},
		"namespace and lane": {Namespace: "ns-2", Lane: "lane-2"},
	} {
		for _, page := range []*ListCursor{nil, after} {
			p.After = page
			q, args, err := s.listSQL(p)
			if err != nil {
				t.Fatal(err)
			}
			t.Run("list "+name, func(t *testing.T) {
				testdb.AssertNoSeqScan(t, db.Pool, large, q, args...)
			})
		}
	}
}
