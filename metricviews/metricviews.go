// Package metricviews holds the OpenTelemetry SDK views an application
// gives its MeterProvider when it meters ffriver's processes: they keep
// River's own job metrics (otelriver) bounded when they record ffriver's
// jobs. It is the one package of ffriver that links the OpenTelemetry SDK;
// an application that does not meter does not import it.
package metricviews

import (
	"github.com/ffriver/ffriver/internal/otelbuckets"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// otelriverScope is the instrumentation scope of otelriver's instruments
// (River's own job metrics, river.*).
const otelriverScope = "github.com/riverqueue/rivercontrib/otelriver"

// otelriverTagKey is the attribute otelriver gives every job metric: the
// job's River tags, as one string-slice value.
const otelriverTagKey = attribute.Key("tag")

// Views returns the OpenTelemetry SDK views that keep River's job
// metrics (otelriver) bounded when they record ffriver's jobs; give them to
// the MeterProvider: sdkmetric.NewMeterProvider(reader,
// sdkmetric.WithView(metricviews.Views()...)). The binaries' provider has
// them.
//
// otelriver labels each job's metrics with its River tags, and every
// ffriver item carries partition-<n> and ns-<namespace> tags (for River
// UI's filters): without the view a worker grows a series per partition,
// namespace, kind and status (749 river_work_count_total series, a 5 MB
// /metrics after 11,600 items over 256 partitions and 5 namespaces). The
// view drops the tag attribute from every otelriver instrument, so their
// labels are the job's kind, queue, priority, attempt and status (the
// producer's fetch metrics, river.job_get_available_duration and _count,
// have only the queue), and gives their histograms buckets in seconds
// (1 ms to 5 min) instead of the SDK's millisecond-sized defaults, or,
// for a histogram of job counts, 0 to 1,000. An application that wants
// River tags in its metrics must keep ffriver's jobs out of them some
// other way.
func Views() []sdkmetric.View {
	return []sdkmetric.View{otelriverView}
}

// otelriverView is Views' one view: a single view per instrument,
// since every matching view adds a stream of its own.
func otelriverView(i sdkmetric.Instrument) (sdkmetric.Stream, bool) {
	if i.Scope.Name != otelriverScope {
		return sdkmetric.Stream{}, false
	}
	s := sdkmetric.Stream{Name: i.Name, Description: i.Description, Unit: i.Unit,
		AttributeFilter: func(kv attribute.KeyValue) bool { return kv.Key != otelriverTagKey }}
	if i.Kind == sdkmetric.InstrumentKindHistogram {
		bounds := otelbuckets.Duration()
		if i.Unit != "s" {
			bounds = otelbuckets.Count() // {job}: a count, not a duration
		}
		s.Aggregation = sdkmetric.AggregationExplicitBucketHistogram{Boundaries: bounds}
	}
	return s, true
}
