package pipeline

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ffriver/ffriver/internal/otelbuckets"
	"github.com/ffriver/ffriver/internal/outboxretention"
	"github.com/ffriver/ffriver/subscribe"
	"github.com/ffriver/ffriver/workers"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ffriver's OpenTelemetry instruments, by their OpenTelemetry names. The
// Prometheus exporter shows them as ffriver_items_total{scanner,outcome},
// ffriver_item_duration_seconds{scanner}, ffriver_scanner_due{scanner},
// ffriver_scanner_due_at_least{scanner},
// ffriver_scanner_oldest_due_seconds{scanner} and the gauges of the
// outbox_retention tick (the consumers', the maintenance wait).
const (
	// MetricItems counts item jobs River finished, by scanner and outcome
	// (processed, no_op, orphaned, skipped_locked, failed).
	MetricItems = "ffriver.items"
	// MetricItemDuration is how long an item job's Work took, by scanner.
	MetricItemDuration = "ffriver.item.duration"
	// MetricScannerDue is the due items a scanner's latest tick found,
	// each partition's counted up to the batch (at least that many when
	// MetricScannerDueAtLeast is 1).
	MetricScannerDue = "ffriver.scanner.due"
	// MetricScannerDueAtLeast is 1 when the latest tick's due count is a
	// lower bound (a partition had more than a batch due), else 0.
	MetricScannerDueAtLeast = "ffriver.scanner.due_at_least"
	// MetricScannerOldestDue is how long the oldest of them had been due at
	// that tick (0 when nothing was due).
	MetricScannerOldestDue = "ffriver.scanner.oldest_due"

	// MetricConsumerLag is how old each named stream consumer's position is,
	// by stream and consumer, as the latest outbox_retention tick found it
	// (ffriver_stream_consumer_lag_seconds).
	MetricConsumerLag = "ffriver.stream.consumer.lag"
	// MetricConsumerHoldsRetention is 1 for a named consumer that keeps
	// events retention would delete (its position is older than the
	// retention and younger than its maximum lag), else 0.
	MetricConsumerHoldsRetention = "ffriver.stream.consumer.holds_retention"
	// MetricRetentionWaiting is how long an outbox's partition maintenance
	// has been waiting for a lock another session holds (its passes leave
	// an attach or a drop for the next one), by stream, as the latest
	// outbox_retention tick found it; 0 while it is not waiting
	// (ffriver_outbox_retention_waiting_seconds).
	MetricRetentionWaiting = "ffriver.outbox.retention.waiting"

	// InstrumentationName names ffriver's meters and tracers.
	InstrumentationName = "github.com/ffriver/ffriver"

	// flowScanner is the scanner label of ff.advance items: a flow's hops,
	// enqueued by terminal transitions (and the dependency scanner).
	flowScanner = "flow"
	// OutcomeFailed is the outcome label of an item job whose action
	// failed (River retries it) or that was cancelled for invalid input.
	OutcomeFailed = "failed"
	// outcomeUnknown is the outcome of an item span whose job's end River
	// never reported (the process stopped first).
	outcomeUnknown = "unknown"
)

// Metric attributes (Prometheus labels).
const (
	LabelScanner  = attribute.Key("scanner")
	LabelOutcome  = attribute.Key("outcome")
	LabelStream   = attribute.Key("stream")
	LabelConsumer = attribute.Key("consumer")
)

// Span attributes of an item span.
const (
	AttrScanner     = attribute.Key("ffriver.scanner")
	AttrOutcome     = attribute.Key("ffriver.outcome")
	AttrExecutionID = attribute.Key("ffriver.execution_id")
	AttrFlowID      = attribute.Key("ffriver.flow_id")
	AttrJobKind     = attribute.Key("river.job.kind")
	AttrJobID       = attribute.Key("river.job.id")
	AttrJobAttempt  = attribute.Key("river.job.attempt")
)

// itemOutcomes are the outcomes every item counter starts with at 0 (an
// item kind may record others, such as a cancel group's).
var itemOutcomes = []string{string(workers.Processed), string(workers.NoOp), string(workers.Orphaned),
	string(workers.SkippedLocked), OutcomeFailed}

// Metrics are a pipeline's OpenTelemetry instruments and tracer, on the
// providers given to NewMetrics; nothing is global. A nil *Metrics records
// nothing.
//
// Item outcomes are recorded from River's job events (Pipeline.ObserveJobs,
// which Process runs): an item counts once River has stored its end, so a
// job re-run after its process died counts its re-run (no_op) too, never a
// transaction that rolled back.
type Metrics struct {
	items    metric.Int64Counter
	duration metric.Float64Histogram
	due      metric.Int64Gauge
	atLeast  metric.Int64Gauge
	oldest   metric.Float64Gauge
	tracer   trace.Tracer // nil: no spans

	// consumers is the latest outbox_retention tick's reading of the
	// named consumers, observed by the consumer gauges: a dropped
	// consumer's series goes with the next tick.
	consumers atomic.Pointer[[]consumerPoint]
	// waits is the latest outbox_retention tick's reading of the outboxes'
	// maintenance waits, by stream, observed by the retention gauge.
	waits atomic.Pointer[map[string]time.Duration]

	mu    sync.Mutex
	spans map[int64]openSpan // item spans by River job id, until River reports the job's end
}

type openSpan struct {
	span    trace.Span
	started time.Time
}

// NewMetrics creates the instruments on mp and, when tp is non-nil, a
// tracer on tp for one span per item job. Either may be nil (no metrics,
// no spans).
func NewMetrics(mp metric.MeterProvider, tp trace.TracerProvider) (*Metrics, error) {
	m := &Metrics{spans: map[int64]openSpan{}}
	if tp != nil {
		m.tracer = tp.Tracer(InstrumentationName)
	}
	if mp == nil {
		return m, nil
	}
	meter := mp.Meter(InstrumentationName)
	var err error
	if m.items, err = meter.Int64Counter(MetricItems, metric.WithUnit("{item}"),
		metric.WithDescription("Item jobs finished, by scanner and outcome (processed, no_op, orphaned, skipped_locked, failed).")); err != nil {
		return nil, err
	}
	if m.duration, err = meter.Float64Histogram(MetricItemDuration, metric.WithUnit("s"), metric.WithExplicitBucketBoundaries(otelbuckets.Duration()...),
		metric.WithDescription("How long an item job's work took, its transaction included.")); err != nil {
		return nil, err
	}
	if m.due, err = meter.Int64Gauge(MetricScannerDue, metric.WithUnit("{item}"),
		metric.WithDescription("Due items the scanner's latest tick found, each partition's counted up to the batch (a lower bound when ffriver_scanner_due_at_least is 1).")); err != nil {
		return nil, err
	}
	if m.atLeast, err = meter.Int64Gauge(MetricScannerDueAtLeast,
		metric.WithDescription("1 when the scanner's latest tick counted a partition only up to its batch: ffriver_scanner_due is then a lower bound.")); err != nil {
		return nil, err
	}
	if m.oldest, err = meter.Float64Gauge(MetricScannerOldestDue, metric.WithUnit("s"),
		metric.WithDescription("How long the oldest due item had been due at the scanner's latest tick (0: nothing due).")); err != nil {
		return nil, err
	}
	lag, err := meter.Float64ObservableGauge(MetricConsumerLag, metric.WithUnit("s"),
		metric.WithDescription("How old each named stream consumer's acknowledged position is, at the latest outbox_retention tick."))
	if err != nil {
		return nil, err
	}
	holds, err := meter.Int64ObservableGauge(MetricConsumerHoldsRetention,
		metric.WithDescription("1 when a named stream consumer keeps events that retention would delete (ffctl consumer drop releases them), else 0."))
	if err != nil {
		return nil, err
	}
	if _, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		if pts := m.consumers.Load(); pts != nil {
			for _, p := range *pts {
				attrs := metric.WithAttributeSet(attribute.NewSet(LabelStream.String(p.stream), LabelConsumer.String(p.name)))
				o.ObserveFloat64(lag, p.lag.Seconds(), attrs)
				h := int64(0)
				if p.holds {
					h = 1
				}
				o.ObserveInt64(holds, h, attrs)
			}
		}
		return nil
	}, lag, holds); err != nil {
		return nil, err
	}
	waiting, err := meter.Float64ObservableGauge(MetricRetentionWaiting, metric.WithUnit("s"),
		metric.WithDescription("How long outbox partition maintenance has been waiting for a lock another session holds, at the latest outbox_retention tick (0: not waiting; ffctl status names the session)."))
	if err != nil {
		return nil, err
	}
	if _, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		if w := m.waits.Load(); w != nil {
			for _, stream := range subscribe.Streams() {
				o.ObserveFloat64(waiting, (*w)[stream].Seconds(), metric.WithAttributeSet(attribute.NewSet(LabelStream.String(stream))))
			}
		}
		return nil
	}, waiting); err != nil {
		return nil, err
	}
	return m, nil
}

// metered says m records metrics (it has a MeterProvider).
func (m *Metrics) metered() bool { return m != nil && m.items != nil }

// consumerPoint is one named consumer as a tick read it.
type consumerPoint struct {
	stream, name string
	lag          time.Duration
	holds        bool
}

// recordConsumers keeps the named consumers' lag and whether they hold a
// retention of retention back, for the consumer gauges.
func (m *Metrics) recordConsumers(cs []subscribe.ConsumerInfo, retention time.Duration) {
	if m == nil {
		return
	}
	pts := make([]consumerPoint, len(cs))
	for i, c := range cs {
		pts[i] = consumerPoint{stream: c.Stream, name: c.Name, lag: c.Lag, holds: c.HoldsRetention(retention)}
	}
	m.consumers.Store(&pts)
}

// recordWaits keeps how long each outbox's partition maintenance has been
// waiting for a lock (none waiting: every stream at 0), for the retention
// gauge.
func (m *Metrics) recordWaits(waits []outboxretention.Wait) {
	if m == nil {
		return
	}
	tables := subscribe.StreamTables()
	byStream := map[string]time.Duration{}
	for i, stream := range subscribe.Streams() {
		for _, w := range waits {
			if w.Table == tables[i] {
				byStream[stream] = w.Age
			}
		}
	}
	m.waits.Store(&byStream)
}

// startItems records 0 items of every outcome in itemOutcomes for each
// scanner, so the counter and its series are exported from the start, not
// from the first item: an idle process shows ffriver_items_total 0, and a
// rate over its first items starts from 0.
func (m *Metrics) startItems(ctx context.Context, scannerNames []string) {
	if m == nil || m.items == nil {
		return
	}
	for _, s := range scannerNames {
		for _, o := range itemOutcomes {
			m.items.Add(ctx, 0, metric.WithAttributeSet(attribute.NewSet(LabelScanner.String(s), LabelOutcome.String(o))))
		}
	}
}

// recordDue records what a tick of scanner found due at nowMs.
func (m *Metrics) recordDue(ctx context.Context, scanner string, due []workers.Due, nowMs int64) {
	if m == nil || m.due == nil {
		return
	}
	var n, oldest, atLeast int64
	for _, d := range due {
		if d.Capped {
			atLeast = 1
		}
		if d.Count <= 0 {
			continue
		}
		n += d.Count
		if d.OldestMs > 0 && (oldest == 0 || d.OldestMs < oldest) {
			oldest = d.OldestMs
		}
	}
	age := 0.0
	if oldest > 0 && nowMs > oldest {
		age = float64(nowMs-oldest) / 1000
	}
	attrs := metric.WithAttributeSet(attribute.NewSet(LabelScanner.String(scanner)))
	m.due.Record(ctx, n, attrs)
	m.atLeast.Record(ctx, atLeast, attrs)
	m.oldest.Record(ctx, age, attrs)
}

// itemOutcome reads the outcome an item job recorded as its River output.
func itemOutcome(job *rivertype.JobRow) string {
	var out struct {
		Outcome string `json:"outcome"`
	}
	if b := job.Output(); len(b) > 0 && json.Unmarshal(b, &out) == nil && out.Outcome != "" {
		return out.Outcome
	}
	return outcomeUnknown
}

// observe records one River job event of an item kind of scanner.
func (m *Metrics) observe(ctx context.Context, scanner string, ev *river.Event) {
	if m == nil {
		return
	}
	var outcome string
	switch ev.Kind {
	case river.EventKindJobCompleted, river.EventKindJobSnoozed:
		outcome = itemOutcome(ev.Job)
	case river.EventKindJobFailed, river.EventKindJobCancelled:
		outcome = OutcomeFailed
	default:
		return
	}
	if m.items != nil {
		m.items.Add(ctx, 1, metric.WithAttributeSet(attribute.NewSet(LabelScanner.String(scanner), LabelOutcome.String(outcome))))
		if ev.JobStats != nil {
			m.duration.Record(ctx, ev.JobStats.RunDuration.Seconds(), metric.WithAttributeSet(attribute.NewSet(LabelScanner.String(scanner))))
		}
	}
	m.endSpan(ev.Job.ID, outcome, ev.Kind == river.EventKindJobFailed || ev.Kind == river.EventKindJobCancelled, ev.Job)
}

// startSpan starts the span of an item job (a child of ctx's span, River's
// own when otelriver's middleware runs outside this one).
func (m *Metrics) startSpan(ctx context.Context, scanner string, job *rivertype.JobRow) context.Context {
	if m == nil || m.tracer == nil {
		return ctx
	}
	attrs := []attribute.KeyValue{AttrScanner.String(scanner), AttrJobKind.String(job.Kind), AttrJobID.Int64(job.ID), AttrJobAttempt.Int(job.Attempt)}
	var args struct {
		ID       string `json:"id"`
		Upstream string `json:"upstream"`
		FlowID   string `json:"flow_id"`
	}
	if json.Unmarshal(job.EncodedArgs, &args) == nil {
		if args.ID == "" {
			args.ID = args.Upstream
		}
		if args.ID != "" {
			attrs = append(attrs, AttrExecutionID.String(args.ID))
		}
		if args.FlowID != "" {
			attrs = append(attrs, AttrFlowID.String(args.FlowID))
		}
	}
	ctx, span := m.tracer.Start(ctx, "ffriver.item "+scanner, trace.WithAttributes(attrs...), trace.WithSpanKind(trace.SpanKindConsumer))
	m.mu.Lock()
	if old, ok := m.spans[job.ID]; ok {
		old.span.SetAttributes(AttrOutcome.String(outcomeUnknown))
		old.span.End()
	}
	m.spans[job.ID] = openSpan{span: span, started: time.Now()}
	m.mu.Unlock()
	return ctx
}

// endSpan ends the span of the item job id with its outcome.
func (m *Metrics) endSpan(id int64, outcome string, failed bool, job *rivertype.JobRow) {
	if m.tracer == nil {
		return
	}
	m.mu.Lock()
	s, ok := m.spans[id]
	delete(m.spans, id)
	m.mu.Unlock()
	if !ok {
		return
	}
	s.span.SetAttributes(AttrOutcome.String(outcome))
	if failed {
		msg := "item failed"
		if n := len(job.Errors); n > 0 {
			msg = job.Errors[n-1].Error
		}
		s.span.SetStatus(codes.Error, msg)
	}
	s.span.End()
}

// endSpansBefore ends the item spans started before t whose end River has
// not reported (the job's process stopped, or River dropped the event),
// with outcome unknown.
func (m *Metrics) endSpansBefore(t time.Time) {
	if m == nil || m.tracer == nil {
		return
	}
	m.mu.Lock()
	var stale []trace.Span
	for id, s := range m.spans {
		if s.started.Before(t) {
			stale = append(stale, s.span)
			delete(m.spans, id)
		}
	}
	m.mu.Unlock()
	for _, s := range stale {
		s.SetAttributes(AttrOutcome.String(outcomeUnknown))
		s.End()
	}
}

// itemMiddleware starts the span of each item job of its pipeline; River
// job events end it (ObserveJobs).
type itemMiddleware struct {
	river.MiddlewareDefaults
	p *Pipeline
}

// Work implements rivertype.WorkerMiddleware.
func (w *itemMiddleware) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	if scanner, ok := w.p.scannerOf[job.Kind]; ok {
		ctx = w.p.env.Metrics.startSpan(ctx, scanner, job)
	}
	return doInner(ctx)
}

// Middleware returns the River worker middleware that starts a span per
// item job of this pipeline, carrying its scanner, execution id (or flow),
// job kind, id and attempt; its outcome is set when River reports the job's
// end (ObserveJobs). Add it to river.Config.Middleware after otelriver's
// middleware, so the item span is a child of River's work span.
func (p *Pipeline) Middleware() rivertype.Middleware { return &itemMiddleware{p: p} }

// ItemScanner returns the scanner label of an item job kind of the
// pipeline ("flow" for ff.advance).
func (p *Pipeline) ItemScanner(kind string) (string, bool) {
	s, ok := p.scannerOf[kind]
	return s, ok
}

// jobEventKinds are the River events ObserveJobs needs.
var jobEventKinds = []river.EventKind{river.EventKindJobCompleted, river.EventKindJobSnoozed, river.EventKindJobFailed, river.EventKindJobCancelled}

// ObserveJobs subscribes to client's job events and, in a goroutine of its
// own, records every item job's outcome and duration (and ends its span)
// until ctx is done. It returns once subscribed, so call it before
// client.Start to miss nothing. Process.Start runs it; an application that
// configures its own River client (ffriver's Service.Configure) runs it on
// that client to get the item metrics. The subscription's buffer holds
// 10,000 events; River drops (and logs) events a full buffer cannot take.
func (p *Pipeline) ObserveJobs(ctx context.Context, client *river.Client[pgx.Tx]) {
	m := p.env.Metrics
	if m == nil {
		return
	}
	events, cancel := client.SubscribeConfig(&river.SubscribeConfig{ChanSize: 10_000, Kinds: jobEventKinds})
	var names []string
	for _, s := range p.scannerOf {
		names = append(names, s)
	}
	slices.Sort(names)
	m.startItems(ctx, slices.Compact(names))
	go func() {
		defer cancel()
		sweep := time.NewTicker(time.Minute)
		defer sweep.Stop()
		defer m.endSpansBefore(time.Now().Add(time.Hour))
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-events:
				if !ok {
					return
				}
				if ev.Job == nil {
					continue
				}
				if scanner, ok := p.scannerOf[ev.Job.Kind]; ok {
					m.observe(ctx, scanner, ev)
				}
			case <-sweep.C:
				m.endSpansBefore(time.Now().Add(-2*p.env.JobTimeout - time.Minute))
			}
		}
	}()
}
