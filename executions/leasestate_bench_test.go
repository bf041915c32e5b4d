package executions

import (
	"context"
	"fmt"
	"testing"

	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/jackc/pgx/v5"
)

// BenchmarkLeaseStates is the cost of a runner's lease check with 64 and
// 10,000 leases in hand (package runner reads them all in one LeaseStates
// call each LeaseCheckInterval), on a store seeded with 100,000
// executions: go test -run '^$' -bench LeaseStates ./executions. Its plan
// must read both tables by primary key, whatever the number of leases.
func BenchmarkLeaseStates(b *testing.B) {
	ctx := context.Background()
	db := testdb.New(b, nil)
	testdb.Seed(b, db, testdb.SeedSize{Executions: 100_000})
	s, err := Open(ctx, db.Pool, Config{Schema: db.Schema})
	if err != nil {
		b.Fatal(err)
	}
	rows, err := db.Pool.Query(ctx, `SELECT a.partition_key, a.execution_id, a.attempt_index, a.lease_id, a.lease_epoch
		FROM ff_attempt a JOIN ff_exec_core e USING (partition_key, execution_id)
		WHERE e.lifecycle_phase = 'active' ORDER BY a.execution_id LIMIT 10000`)
	if err != nil {
		b.Fatal(err)
	}
	leases, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Lease, error) {
		var l Lease
		err := r.Scan(&l.ID.Partition, &l.ID.UUID, &l.AttemptIndex, &l.LeaseID, &l.Epoch)
		return l, err
	})
	if err != nil {
		b.Fatal(err)
	}
	if len(leases) != 10_000 {
		b.Fatalf("%d active leases seeded, want 10,000", len(leases))
	}
	for _, n := range []int{64, 10_000} {
		b.Run(fmt.Sprintf("leases=%d", n), func(b *testing.B) {
			leases := leases[:n]
			held := 0
			for b.Loop() {
				states, err := s.LeaseStates(ctx, leases)
				if err != nil {
					b.Fatal(err)
				}
				held = 0
				for _, st := range states {
					if st.Status == LeaseHeld {
						held++
					}
				}
			}
			b.StopTimer()
			parts, uuids := make([]int16, n), make([][16]byte, n)
			attempts := make([]int32, n)
			for i, l := range leases {
				parts[i], uuids[i], attempts[i] = l.ID.Partition, l.ID.UUID, l.AttemptIndex
			}
			plan := testdb.AssertNoSeqScan(b, db.Pool, []string{"ff_exec_core", "ff_attempt"}, s.sql(leaseStatesSQL), parts, uuids, attempts)
			b.Logf("%d of %d held (the seed's others expired); plan:\n%s", held, n, plan)
		})
	}
}
