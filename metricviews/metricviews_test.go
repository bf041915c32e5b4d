package metricviews_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ffriver/ffriver/internal/otelbuckets"
	"github.com/ffriver/ffriver/metricviews"
	"github.com/riverqueue/river/rivertype"
	"github.com/riverqueue/rivercontrib/otelriver"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Views bounds every otelriver instrument's labels, the producers'
// fetch metrics of otelriver v0.12 included (queue only), and gives each
// histogram buckets of its unit: seconds for durations, job counts for
// river.job_get_available_count (it had the duration buckets, 0.001 to
// 300, for a count of jobs).
func TestMetricViews(t *testing.T) {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithView(metricviews.Views()...))
	mw := otelriver.NewMiddleware(&otelriver.MiddlewareConfig{MeterProvider: mp})
	mw.MetricEmit(ctx, &rivertype.HookMetricEmitParams{Metric: &rivertype.JobGetAvailableCountMetric{Queue: "ff_apply", Count: 7}})
	mw.MetricEmit(ctx, &rivertype.HookMetricEmitParams{Metric: &rivertype.JobGetAvailableDurationMetric{Queue: "ff_apply", Duration: 3 * time.Millisecond}})
	for p := range 3 {
		job := &rivertype.JobRow{ID: int64(p), Kind: "ff.expire_attempt", Queue: "ff_apply", Attempt: 1,
			Tags: []string{"item", "partition-" + string(rune('0'+p))}}
		if err := mw.Work(ctx, job, func(context.Context) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != "github.com/riverqueue/rivercontrib/otelriver" {
			continue
		}
		for _, m := range sm.Metrics {
			seen[m.Name] = true
			var sets []attribute.Set
			switch d := m.Data.(type) {
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					sets = append(sets, dp.Attributes)
					if !slices.Equal(dp.Bounds, otelbuckets.Duration()) {
						t.Errorf("%s (%s): buckets %v, want DurationBuckets", m.Name, m.Unit, dp.Bounds)
					}
				}
			case metricdata.Histogram[int64]:
				for _, dp := range d.DataPoints {
					sets = append(sets, dp.Attributes)
					if !slices.Equal(dp.Bounds, otelbuckets.Count()) {
						t.Errorf("%s (%s): buckets %v, want CountBuckets", m.Name, m.Unit, dp.Bounds)
					}
				}
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					sets = append(sets, dp.Attributes)
				}
			case metricdata.Gauge[float64]:
				for _, dp := range d.DataPoints {
					sets = append(sets, dp.Attributes)
				}
			}
			if len(sets) != 1 {
				t.Errorf("%s: %d label sets for jobs of one kind in three partitions, want 1", m.Name, len(sets))
			}
			for _, s := range sets {
				if _, ok := s.Value("tag"); ok {
					t.Errorf("%s has a tag label: %v", m.Name, s.ToSlice())
				}
			}
		}
	}
	for _, name := range []string{"river.job_get_available_count", "river.job_get_available_duration", "river.work_count"} {
		if !seen[name] {
			t.Errorf("no %s among %v", name, seen)
		}
	}
}
