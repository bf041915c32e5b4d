package subscribe

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// The stream metrics' OpenTelemetry names (see Options.MeterProvider).
const (
	MetricStreamEvents = "ffriver.stream.events"
	MetricStreamLag    = "ffriver.stream.lag"
)

// lagBuckets are the bucket bounds of ffriver.stream.lag, in seconds: 1 ms
// to 5 min.
var lagBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}

// newObserver returns what records each event a stream of table t returns.
func newObserver[E any](mp metric.MeterProvider, t table[E]) (func(E), error) {
	meter := mp.Meter("github.com/ffriver/ffriver/subscribe")
	events, err := meter.Int64Counter(MetricStreamEvents, metric.WithUnit("{event}"),
		metric.WithDescription("Events a stream delivered to its consumer."))
	if err != nil {
		return nil, fmt.Errorf("subscribe: metrics: %w", err)
	}
	lag, err := meter.Float64Histogram(MetricStreamLag, metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(lagBuckets...),
		metric.WithDescription("How long after it occurred (occurred_at_ms, written in its committing transaction) an event was delivered."))
	if err != nil {
		return nil, fmt.Errorf("subscribe: metrics: %w", err)
	}
	attrs := metric.WithAttributeSet(attribute.NewSet(attribute.String("stream", t.stream)))
	// Exported from the start (0), not from the first event.
	events.Add(context.Background(), 0, attrs)
	return func(ev E) {
		events.Add(context.Background(), 1, attrs)
		d := float64(time.Now().UnixMilli()-t.atMs(ev)) / 1000
		lag.Record(context.Background(), max(d, 0), attrs)
	}, nil
}
