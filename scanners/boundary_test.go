package scanners_test

import (
	"context"
	"testing"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/scanners"
	"github.com/ffriver/ffriver/workers"
	"github.com/google/uuid"
)

// A lease ends at its lease_expires_at_ms and a deadline at its
// deadline_at_ms, for the scanners as for the store's fence (a holder gets
// ErrLeaseExpired from that instant on): the attempt_timeout and
// execution_deadline scanners find the row due, scan it and audit it at the
// instant itself, and not a millisecond before.
func TestScannersTakeTheEndingInstantAsEnded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	k := fftest.New(t, nil)
	st, clock := k.Store, k.Clock
	deadline := clock.NowMs() + 5000
	k.Create(executions.CreateParams{Lane: "timed", Deadline: time.UnixMilli(deadline)})
	k.Create(executions.CreateParams{Lane: "leased"})
	l := k.ClaimOne("leased", time.Second)
	// Rows no scan can process (a partition outside the schema's count),
	// due at the same instants: the audits count them from then on.
	k.Exec(`INSERT INTO ff_exec_core (partition_key, execution_id, lane_id, lifecycle_phase, ownership_state, eligibility_state,
		public_state, attempt_state, deadline_at_ms)
		VALUES (300, $1, 'far', 'runnable', 'unowned', 'eligible_now', 'waiting', 'pending_first_attempt', $2)`, uuid.New(), deadline)
	k.Exec(`INSERT INTO ff_attempt (partition_key, execution_id, attempt_index, lease_expires_at_ms) VALUES (300, $1, 0, $2)`, uuid.New(), l.ExpiresAtMs)

	for _, c := range []struct {
		s  workers.Scanner
		at int64
	}{{scanners.AttemptTimeoutScanner{}, l.ExpiresAtMs}, {scanners.ExecutionDeadlineScanner{}, deadline}} {
		for _, now := range []int64{c.at - 1, c.at} {
			want := 0
			if now == c.at {
				want = 1
			}
			clock.Set(now)
			due, err := c.s.Due(ctx, k.Pool, workers.DueRequest{Store: st, NowMs: now})
			if err != nil {
				t.Fatal(err)
			}
			if len(due) != want || (want == 1 && (due[0].Count != 1 || due[0].OldestMs != c.at)) {
				t.Errorf("%s at %+d ms from its instant: due %+v, want %d row due since %d", c.s.Name(), now-c.at, due, want, c.at)
			}
			var scanned int
			for part := range int16(st.Partitions()) {
				res, err := c.s.Scan(ctx, k.Pool, workers.ScanRequest{Store: st, Partition: part, NowMs: now, Limit: 10})
				if err != nil {
					t.Fatal(err)
				}
				scanned += res.Candidates
			}
			if scanned != want {
				t.Errorf("%s at %+d ms from its instant: scanned %d, want %d", c.s.Name(), now-c.at, scanned, want)
			}
			bad, err := c.s.(workers.Auditor).Unprocessable(ctx, k.Pool, workers.DueRequest{Store: st, NowMs: now})
			if err != nil {
				t.Fatal(err)
			}
			if len(bad) != want || (want == 1 && bad[0].Count != 1) {
				t.Errorf("%s at %+d ms from its instant: unprocessable %+v, want %d row", c.s.Name(), now-c.at, bad, want)
			}
		}
	}
}
