package status_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ffriver/ffriver/cmd/ffctl/internal/status"
)

// The partitions line says whether the outbox's time partitions are kept:
// none yet, none covering now (maintenance stopped), or ahead until when.
func TestPartitionHealth(t *testing.T) {
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	past, ahead := now.Add(-time.Minute).UnixMilli(), now.Add(36*time.Hour).UnixMilli()
	for _, c := range []struct {
		s    status.Stream
		want string
	}{
		{status.Stream{DefaultRows: 5}, "no time partition: every event is in the DEFAULT partition (5)"},
		{status.Stream{Partitions: 3, AheadUntilMs: &past, DefaultRows: status.StreamCountCap, DefaultRowsAtLeast: true},
			"3 time partitions, none covering now: new events go to the DEFAULT partition (at least 1000); is an unfiltered ffscheduler running"},
		{status.Stream{Partitions: 9, AheadUntilMs: &ahead}, "9 time partitions, ahead until 2026-11-28T00:00:00Z; DEFAULT partition: 0 rows"},
	} {
		if got := c.s.PartitionHealth(now); !strings.Contains(got, c.want) {
			t.Errorf("PartitionHealth(%+v) = %q, want it to say %q", c.s, got, c.want)
		}
	}
}
