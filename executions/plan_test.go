package executions

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
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

// The Store's claims and finishes read the rows they name, not the table,
// on a store whose statistics were taken while it was empty and whose
// statements' plans were chosen while ff_attempt was small (a new store, or
// one whose ANALYZE lags its growth): a prepared statement's generic plan
// outlives the table's size, and one made for a small ff_attempt hashed
// the whole table for every batch as it grew. Each Store transaction plans
// with dbutil.KeyedSettings. The pool has one connection, so every
// statement runs, and is planned, on the backend whose table statistics
// are read.
func TestClaimFinishPlansOutliveGrowth(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t, &testdb.Options{MaxConns: 2})
	cfg, err := pgxpool.ParseConfig(testdb.URL())
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	cfg.ConnConfig.RuntimeParams["search_path"] = db.Schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s, err := Open(ctx, pool, Config{Schema: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE ff_exec_core; ANALYZE ff_attempt`); err != nil {
		t.Fatal(err)
	}
	const lane, batch = "plans", 8
	// round claims a batch (a coalesced claim) and finishes it: half in
	// one FinishMany, half through Complete, side by side (a coalesced
	// finish batch).
	round := func() {
		t.Helper()
		for range batch {
			if _, err := s.Create(ctx, CreateParams{Lane: lane}); err != nil {
				t.Fatal(err)
			}
		}
		leases, err := s.Claim(ctx, ClaimParams{Lane: lane, WorkerID: "w", LeaseTTL: time.Minute, Max: batch})
		if err != nil || len(leases) != batch {
			t.Fatalf("claim: %d leases, %v; want %d", len(leases), err, batch)
		}
		items := make([]Finish, batch/2)
		for i := range items {
			items[i] = Finish{Lease: leases[i]}
		}
		outs, err := s.FinishMany(ctx, items)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range outs {
			if o.Err != nil {
				t.Fatal(o.Err)
			}
		}
		var wg sync.WaitGroup
		errs := make(chan error, batch)
		for _, l := range leases[batch/2:] {
			wg.Go(func() { errs <- s.Complete(ctx, l, nil) })
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	// reads is ff_attempt's sequential scans and the rows read through
	// its indexes so far, flushed from the pool's one backend first.
	reads := func() (seq, idx int64) {
		t.Helper()
		if _, err := pool.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
			t.Fatal(err)
		}
		if err := pool.QueryRow(ctx, `SELECT seq_scan, COALESCE(idx_tup_fetch, 0) FROM pg_stat_user_tables
			WHERE schemaname = $1 AND relname = 'ff_attempt'`, db.Schema).Scan(&seq, &idx); err != nil {
			t.Fatal(err)
		}
		return seq, idx
	}
	// Past the five custom plans after which a statement keeps its
	// generic plan, with ff_attempt small.
	for range 8 {
		round()
	}
	const grown = 20_000
	if _, err := pool.Exec(ctx, `INSERT INTO ff_attempt (partition_key, execution_id, attempt_index, lease_epoch, terminal_at_ms, outcome)
		SELECT (g % 256)::int2, gen_random_uuid(), 0, 1, 1, 'success' FROM generate_series(1, $1) g`, grown); err != nil {
		t.Fatal(err)
	}
	seq0, idx0 := reads()
	const rounds = 4
	for range rounds {
		round()
	}
	seq1, idx1 := reads()
	if seq1 != seq0 {
		t.Errorf("%d sequential scans of ff_attempt in %d claims and finishes of %d executions after it grew by %d rows, want none", seq1-seq0, rounds, batch, grown)
	}
	if idx1-idx0 >= grown {
		t.Errorf("%d ff_attempt rows read through its indexes in %d claims and finishes of %d executions, want far fewer than its %d rows", idx1-idx0, rounds, batch, grown)
	}
}
