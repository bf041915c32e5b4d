// Package otelbuckets holds the histogram bucket bounds ffriver's
// instruments (package workers) and its views of River's (package
// metricviews) share, so that neither needs the other: an application that
// does not meter never links the OpenTelemetry SDK.
package otelbuckets

// Duration returns the bucket bounds, in seconds, of ffriver's duration and
// lag histograms: 1 ms to 5 min.
func Duration() []float64 {
	return []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}
}

// Count returns the bucket bounds of River's job-count histograms
// (river.job_get_available_count: the jobs one fetch of a producer locked).
func Count() []float64 { return []float64{0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000} }
