package runner

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// The runner's metrics' OpenTelemetry names (see Config.MeterProvider).
// Every instrument carries the attribute lane; MetricExecutions also
// outcome. Their label sets are bounded by the lanes a process runs.
const (
	// MetricExecutions counts executions by how they ended: completed,
	// retried, failed, released, lost (the lease was gone) or error (the
	// end could not be committed).
	MetricExecutions = "ffriver.runner.executions"
	// MetricClaimed counts executions claimed.
	MetricClaimed = "ffriver.runner.claimed"
	// MetricActive is the number of handlers running.
	MetricActive = "ffriver.runner.active"
	// MetricHandlerDuration is how long handlers ran, in seconds.
	MetricHandlerDuration = "ffriver.runner.handler.duration"
)

// Outcomes of MetricExecutions.
const (
	outcomeCompleted = "completed"
	outcomeRetried   = "retried"
	outcomeFailed    = "failed"
	outcomeReleased  = "released"
	outcomeLost      = "lost"
	outcomeError     = "error"
)

type metrics struct {
	lane       attribute.KeyValue
	executions metric.Int64Counter
	claimedC   metric.Int64Counter
	active     metric.Int64UpDownCounter
	duration   metric.Float64Histogram
	byOutcome  map[string]metric.MeasurementOption
	laneOnly   metric.MeasurementOption
}

func newMetrics(mp metric.MeterProvider, lane string) (*metrics, error) {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	meter := mp.Meter("github.com/ffriver/ffriver/runner")
	m := &metrics{lane: attribute.String("lane", lane), byOutcome: map[string]metric.MeasurementOption{}}
	var err error
	wrap := func(e error) error { return fmt.Errorf("runner: metrics: %w", e) }
	if m.executions, err = meter.Int64Counter(MetricExecutions, metric.WithUnit("{execution}"),
		metric.WithDescription("Executions the runner ran, by how they ended.")); err != nil {
		return nil, wrap(err)
	}
	if m.claimedC, err = meter.Int64Counter(MetricClaimed, metric.WithUnit("{execution}"),
		metric.WithDescription("Executions the runner claimed.")); err != nil {
		return nil, wrap(err)
	}
	if m.active, err = meter.Int64UpDownCounter(MetricActive, metric.WithUnit("{execution}"),
		metric.WithDescription("Handlers running.")); err != nil {
		return nil, wrap(err)
	}
	if m.duration, err = meter.Float64Histogram(MetricHandlerDuration, metric.WithUnit("s"),
		metric.WithDescription("How long handlers ran.")); err != nil {
		return nil, wrap(err)
	}
	m.laneOnly = metric.WithAttributeSet(attribute.NewSet(m.lane))
	ctx := context.Background()
	for _, o := range []string{outcomeCompleted, outcomeRetried, outcomeFailed, outcomeReleased, outcomeLost, outcomeError} {
		m.byOutcome[o] = metric.WithAttributeSet(attribute.NewSet(m.lane, attribute.String("outcome", o)))
		// Exported from the start (0), not from the first execution.
		m.executions.Add(ctx, 0, m.byOutcome[o])
	}
	m.claimedC.Add(ctx, 0, m.laneOnly)
	m.active.Add(ctx, 0, m.laneOnly)
	return m, nil
}

func (m *metrics) finished(ctx context.Context, outcome string) {
	m.executions.Add(ctx, 1, m.byOutcome[outcome])
}

func (m *metrics) claimed(ctx context.Context, n int) { m.claimedC.Add(ctx, int64(n), m.laneOnly) }

func (m *metrics) activeAdd(ctx context.Context, n int64) { m.active.Add(ctx, n, m.laneOnly) }

func (m *metrics) handled(ctx context.Context, d time.Duration) {
	m.duration.Record(ctx, d.Seconds(), m.laneOnly)
}
