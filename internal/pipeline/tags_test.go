package pipeline_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ffriver/ffriver"
	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/pipeline"
	"github.com/ffriver/ffriver/jobs"
	"github.com/ffriver/ffriver/scanners"
	"github.com/ffriver/ffriver/workers"
)

// Ticks, scans and items carry River tags naming their scanner, partition
// and (items) the namespace of their execution, so River UI's tag filter
// finds them.
func TestJobTags(t *testing.T) {
	t.Parallel()
	settings := disabled()
	settings[scanners.AttemptTimeout] = workers.Settings{Interval: 50 * time.Millisecond, Batch: 1000}
	h := newHarness(t, ffriver.Config{Scanners: settings})
	h.Create(executions.CreateParams{Lane: "tags", Namespace: "tenant.a b"})
	id := h.ClaimOne("tags", time.Second).ID
	h.clock.Advance(2 * time.Second)
	h.client(true, scanOnly)
	h.Await("the item job", func() bool {
		return h.Count(`SELECT count(*) FROM river_job WHERE kind = $1`, jobs.KindExpireAttempt) == 1
	})
	tags := func(kind string) []string {
		return h.Strings(`SELECT DISTINCT unnest(tags) FROM river_job WHERE kind = $1 ORDER BY 1`, kind)
	}
	part := fmt.Sprintf("partition-%d", id.Partition)
	if got, want := tags(jobs.KindExpireAttempt), []string{"item", "ns-tenant_a_b", part, "scanner-attempt_timeout"}; !slices.Equal(got, want) {
		t.Errorf("item tags %q, want %q", got, want)
	}
	if got, want := tags(jobs.KindScan), []string{part, "scanner-attempt_timeout"}; !slices.Equal(got, want) {
		t.Errorf("scan tags %q, want %q", got, want)
	}
	if got, want := tags(jobs.KindTick), []string{"scanner-attempt_timeout"}; !slices.Equal(got, want) {
		t.Errorf("tick tags %q, want %q", got, want)
	}
}

func TestTagValue(t *testing.T) {
	for _, c := range []struct{ prefix, value, want string }{
		{"ns-", "tenant-a", "ns-tenant-a"},
		{"ns-", "tenant.a/b c", "ns-tenant_a_b_c"},
		{"ns-", "", ""},
		{"ns-", "a-", "ns-a"},
		{"x", "", ""},
	} {
		if got := pipeline.TagValue(c.prefix, c.value); got != c.want {
			t.Errorf("TagValue(%q, %q) = %q, want %q", c.prefix, c.value, got, c.want)
		}
	}
	if got := pipeline.ScanTags("delayed_promoter", ff.Filter{Namespace: "t"}, []int16{3, 7}); !slices.Equal(got, []string{"scanner-delayed_promoter", "ns-t", "partition-3", "partition-7"}) {
		t.Errorf("ScanTags = %q", got)
	}
}
