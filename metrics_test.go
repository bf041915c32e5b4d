package ffriver_test

import (
	"context"
	"testing"
	"time"

	"github.com/ffriver/ffriver"
	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/internal/pipeline"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/ffriver/ffriver/scanners"
	"github.com/ffriver/ffriver/subscribe"
	"github.com/ffriver/ffriver/workers"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// A process given a MeterProvider and a TracerProvider counts each item by
// scanner and outcome, and gives each item job a span with its execution
// id, scanner and outcome, under River's own work span (otelriver).
func TestProcessMetricsAndSpans(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, nil)
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	clock := ff.NewManualClock(time.Now().UnixMilli())
	f, err := ffriver.New(ctx, db.Pool, ffriver.Config{Schema: db.Schema, Clock: clock, Scanners: fastScanners(),
		MeterProvider: mp, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	st := f.Store()
	want := map[string]bool{}
	for range 5 {
		id, err := st.Create(ctx, executions.CreateParams{Lane: "m"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Claim(ctx, executions.ClaimParams{Lane: "m", LeaseTTL: time.Second}); err != nil {
			t.Fatal(err)
		}
		want[id.String()] = true
	}
	clock.Advance(2 * time.Second)

	p, err := f.NewProcess(ctx, ffriver.ProcessOptions{Role: ffriver.Scheduler,
		Client: ffriver.ClientOptions{ScanWorkers: 2, ApplyWorkers: 4, TestOnly: true}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Ready(ctx); err == nil {
		t.Error("Ready before Start")
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Stop() }()
	if err := p.Ready(ctx); err != nil {
		t.Errorf("Ready after Start: %v", err)
	}

	items := func() int64 {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(ctx, &rm); err != nil {
			t.Fatal(err)
		}
		set := attribute.NewSet(pipeline.LabelScanner.String(scanners.AttemptTimeout), pipeline.LabelOutcome.String(string(workers.Processed)))
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if m.Name != pipeline.MetricItems {
					continue
				}
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					if dp.Attributes.Equals(&set) {
						return dp.Value
					}
				}
			}
		}
		return 0
	}
	fftest.Await(t, 20*time.Second, "5 processed attempt_timeout items", func() bool { return items() == 5 })

	var items5 []sdktrace.ReadOnlySpan
	fftest.Await(t, 10*time.Second, "5 item spans", func() bool {
		items5 = nil
		for _, s := range spans.Ended() {
			if s.Name() == "ffriver.item "+scanners.AttemptTimeout {
				items5 = append(items5, s)
			}
		}
		return len(items5) == 5
	})
	for _, s := range items5 {
		attrs := map[attribute.Key]string{}
		for _, kv := range s.Attributes() {
			attrs[kv.Key] = kv.Value.String()
		}
		if !want[attrs[pipeline.AttrExecutionID]] || attrs[pipeline.AttrScanner] != scanners.AttemptTimeout ||
			attrs[pipeline.AttrOutcome] != string(workers.Processed) {
			t.Errorf("item span attributes %v", attrs)
		}
		if !s.Parent().IsValid() {
			t.Errorf("item span without a parent (River's work span)")
		}
	}
}

// The outbox_retention tick exports each named consumer's lag and whether
// it holds retention back, so an alert can find an abandoned consumer; a
// dropped consumer's series goes with the next tick.
func TestConsumerGauges(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, nil)
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	f, err := ffriver.New(ctx, db.Pool, ffriver.Config{Schema: db.Schema, MeterProvider: mp, OutboxRetention: time.Millisecond,
		Scanners: map[string]workers.Settings{scanners.OutboxRetention: {Interval: 50 * time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := subscribe.Leases(ctx, db.Pool, subscribe.Options{Consumer: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	p, err := f.NewProcess(ctx, ffriver.ProcessOptions{Role: ffriver.Scheduler, Client: ffriver.ClientOptions{ScanWorkers: 2, ApplyWorkers: 1, TestOnly: true}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Stop() }()
	gauge := func(name string) (float64, bool) {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(ctx, &rm); err != nil {
			t.Fatal(err)
		}
		set := attribute.NewSet(pipeline.LabelStream.String(subscribe.StreamLeases), pipeline.LabelConsumer.String("billing"))
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if m.Name != name {
					continue
				}
				switch d := m.Data.(type) {
				case metricdata.Gauge[float64]:
					for _, dp := range d.DataPoints {
						if dp.Attributes.Equals(&set) {
							return dp.Value, true
						}
					}
				case metricdata.Gauge[int64]:
					for _, dp := range d.DataPoints {
						if dp.Attributes.Equals(&set) {
							return float64(dp.Value), true
						}
					}
				}
			}
		}
		return 0, false
	}
	fftest.Await(t, 30*time.Second, "the consumer, holding a 1 ms retention, in the gauges", func() bool {
		lag, ok := gauge(pipeline.MetricConsumerLag)
		holds, _ := gauge(pipeline.MetricConsumerHoldsRetention)
		return ok && lag > 0 && holds == 1
	})
	if err := subscribe.DropConsumer(ctx, db.Pool, db.Schema, subscribe.StreamLeases, "billing"); err != nil {
		t.Fatal(err)
	}
	fftest.Await(t, 30*time.Second, "the dropped consumer's series to go", func() bool {
		_, ok := gauge(pipeline.MetricConsumerLag)
		return !ok
	})
}
