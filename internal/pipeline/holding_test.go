package pipeline_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ffriver/ffriver"
	"github.com/ffriver/ffriver/internal/testlog"
	"github.com/ffriver/ffriver/scanners"
	"github.com/ffriver/ffriver/subscribe"
)

// Issue 40, item 2: a named consumer that holds outbox retention back is
// warned about by the first outbox_retention tick that sees it, not at the
// next unprocessable report (up to 10 minutes later), and then not at every
// tick; one that stops holding and holds again is warned about again at
// once.
func TestConsumerHoldingRetentionWarnedAtFirstDetection(t *testing.T) {
	t.Parallel()
	var logs testlog.Buffer
	over := disabled()
	over[scanners.OutboxRetention] = fast(1000)
	h := newHarness(t, ffriver.Config{Scanners: over, OutboxRetention: time.Minute, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	// A consumer that read one event; its position is then made an hour
	// old: older than the minute of retention, younger than its max lag.
	hold := func(name string) {
		t.Helper()
		s, err := subscribe.Leases(h.ctx, h.db.Pool, subscribe.Options{Consumer: name})
		if err != nil {
			t.Fatal(err)
		}
		h.Exec(`INSERT INTO ff_lease_event (execution_id, event_type, occurred_at_ms, partition_key) VALUES (gen_random_uuid()::text, 'renewed', $1, 0)`, t0)
		if _, err := s.Next(h.ctx); err != nil {
			t.Fatal(err)
		}
		s.Close()
		h.Await("the consumer's position to be stored", func() bool {
			return h.Count(`SELECT count(*) FROM ff_stream_consumer WHERE name = $1`, name) == 1
		})
		h.Exec(`UPDATE ff_stream_consumer SET position_at_ms = position_at_ms - 3600000 WHERE name = $1`, name)
	}
	warnings := func() int { return strings.Count(logs.String(), "holds outbox retention back") }
	ticks := func() int {
		return h.Count(`SELECT count(*) FROM river_job WHERE kind = 'ff.tick' AND state = 'completed' AND args->>'scanner' = 'outbox_retention'`)
	}
	hold("audit")
	h.client(true, nil)
	h.Await("the warning about the consumer", func() bool { return warnings() == 1 })
	if l := logs.String(); !strings.Contains(l, "consumer=audit") || !strings.Contains(l, "stream=leases") ||
		!strings.Contains(l, "retention=1m0s") || !strings.Contains(l, "ffctl consumer drop --stream leases audit") {
		t.Errorf("the warning does not name the consumer, its stream, the retention and the command that releases it:\n%s", l)
	}
	n := ticks()
	h.Await("three more outbox_retention ticks", func() bool { return ticks() >= n+3 })
	if w := warnings(); w != 1 {
		t.Errorf("%d warnings after three more ticks, want the first one only (then one every %s):\n%s", w, "5m", logs.String())
	}
	// Dropped, it holds nothing; a new consumer that holds is warned about
	// at once.
	if err := subscribe.DropConsumer(h.ctx, h.db.Pool, h.db.Name, subscribe.StreamLeases, "audit"); err != nil {
		t.Fatal(err)
	}
	hold("billing")
	h.Await("the warning about the second consumer", func() bool { return strings.Contains(logs.String(), "consumer=billing") })
}
