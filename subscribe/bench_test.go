package subscribe_test

import (
	"context"
	"testing"
	"time"

	"github.com/ffriver/ffriver/subscribe"
)

// BenchmarkCatchUp measures how fast a stream drains a backlog of lease
// events written the way the outbox writes them (namespace, tag, lease id,
// attempt and epoch set). It reports events/s; the design target is 500,000
// events/s on a 2-core machine.
func BenchmarkCatchUp(b *testing.B) {
	const backlog = 200_000
	db := newDB(b)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `
INSERT INTO ff_lease_event (execution_id, lease_id, event_type, occurred_at_ms, partition_key, namespace, instance_tag,
                            attempt_index, lease_epoch, worker_instance_id)
SELECT gen_random_uuid()::text, gen_random_uuid()::text, 'renewed', g, g % 256, 'ns-' || (g % 8), 'inst-' || (g % 4),
       g % 3, g % 5, 'worker-' || (g % 16)
FROM generate_series(1, $1) g`, backlog); err != nil {
		b.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `ANALYZE ff_lease_event`); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		s, err := subscribe.Leases(ctx, db.Pool, subscribe.Options{Start: subscribe.StartBeginning})
		if err != nil {
			b.Fatal(err)
		}
		for range backlog {
			if _, err := s.Next(ctx); err != nil {
				b.Fatal(err)
			}
		}
		s.Close()
	}
	b.ReportMetric(float64(backlog*b.N)/time.Since(start).Seconds(), "events/s")
}
