package subscribe_test

import (
	"context"
	"testing"
	"time"

	"github.com/ffriver/ffriver/subscribe"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// A stream with a MeterProvider counts the events it delivered and records
// how long after they occurred, by stream.
func TestStreamMetrics(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	// Three events that occurred 10 s ago, two just now.
	for range 3 {
		insertLease(t, db.Pool, row{atMs: time.Now().Add(-10 * time.Second).UnixMilli()})
	}
	for range 2 {
		insertLease(t, db.Pool, row{})
	}
	s, err := subscribe.Leases(ctx, db.Pool, fast(t, subscribe.Options{Start: subscribe.StartBeginning, MeterProvider: mp}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	collect(t, s, 5, wait)

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	leases := attribute.NewSet(attribute.String("stream", "leases"))
	var events int64 = -1
	var lag metricdata.HistogramDataPoint[float64]
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch m.Name {
			case subscribe.MetricStreamEvents:
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					if dp.Attributes.Equals(&leases) {
						events = dp.Value
					}
				}
			case subscribe.MetricStreamLag:
				for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
					if dp.Attributes.Equals(&leases) {
						lag = dp
					}
				}
			}
		}
	}
	if events != 5 {
		t.Errorf("%s{stream=leases} = %d, want 5", subscribe.MetricStreamEvents, events)
	}
	if lag.Count != 5 {
		t.Fatalf("lag count %d, want 5", lag.Count)
	}
	if max, ok := lag.Max.Value(); !ok || max < 10 || max > 60 {
		t.Errorf("lag max %v s, want the 10 s old events' (a little over 10)", max)
	}
	if min, ok := lag.Min.Value(); !ok || min > 5 {
		t.Errorf("lag min %v s, want the fresh events' (well under a second)", min)
	}
}

// A stream's event counter is exported from the moment it subscribes, at
// 0, not only after its first event: an idle consumer's /metrics shows it.
func TestStreamMetricsBeforeTheFirstEvent(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	s, err := subscribe.Completions(ctx, db.Pool, fast(t, subscribe.Options{MeterProvider: mp}))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	completions := attribute.NewSet(attribute.String("stream", "completions"))
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != subscribe.MetricStreamEvents {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				if dp.Attributes.Equals(&completions) {
					if dp.Value != 0 {
						t.Fatalf("%s{stream=completions} = %d before any event", subscribe.MetricStreamEvents, dp.Value)
					}
					return
				}
			}
		}
	}
	t.Fatalf("no %s{stream=completions} before the first event", subscribe.MetricStreamEvents)
}
