package ffriver_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/ffriver/ffriver"
	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/metricviews"
	"github.com/ffriver/ffriver/migrations"
	"github.com/ffriver/ffriver/scanners"
	"github.com/ffriver/ffriver/workers"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// Metrics of a process: the Service takes a MeterProvider (and a
// TracerProvider) of the application's, never a global one. Here a manual
// reader shows the item counter (ffriver_items_total in Prometheus) after a
// delayed execution was promoted; in production the provider has a
// Prometheus or OTLP reader.
func Example_metrics() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	// A schema of its own (two runs at once never share one), dropped at
	// the end.
	schema := fftest.SchemaName("example_metrics")
	if _, err := migrations.Migrate(ctx, pool, schema, nil); err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Exec(ctx, `DROP SCHEMA `+schema+` CASCADE`) //nolint:errcheck

	reader := sdkmetric.NewManualReader()
	// metricviews.Views keeps River's job metrics (otelriver) bounded.
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithView(metricviews.Views()...))
	cfg := ffriver.Config{
		Schema:        schema,
		Scanners:      map[string]workers.Settings{scanners.DelayedPromoter: {Interval: 200 * time.Millisecond}},
		MeterProvider: mp,
	}
	store, err := executions.Open(ctx, pool, executions.Config{Schema: schema})
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := store.Create(ctx, executions.CreateParams{Lane: "reports", DelayUntil: time.Now().Add(100 * time.Millisecond)}); err != nil {
		fmt.Println(err)
		return
	}

	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- ffriver.Run(runCtx, pool, cfg, ffriver.RunOptions{Name: "example", Process: ffriver.ProcessOptions{
			Role: ffriver.Scheduler, Client: ffriver.ClientOptions{ScanWorkers: 2, ApplyWorkers: 4},
		}})
	}()
	processed := attribute.NewSet(attribute.String("scanner", scanners.DelayedPromoter), attribute.String("outcome", "processed"))
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(ctx, &rm); err != nil {
			fmt.Println(err)
			break
		}
		if n := counterValue(rm, "ffriver.items", processed); n > 0 {
			fmt.Println("ffriver_items_total{scanner=\"delayed_promoter\",outcome=\"processed\"}", n)
			break
		}
	}
	stop()
	fmt.Println("stopped:", <-done)
	// Output:
	// ffriver_items_total{scanner="delayed_promoter",outcome="processed"} 1
	// stopped: <nil>
}

// counterValue returns the value of the int64 counter name with attrs.
func counterValue(rm metricdata.ResourceMetrics, name string, attrs attribute.Set) int64 {
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == name {
				for _, dp := range sum.DataPoints {
					if dp.Attributes.Equals(&attrs) {
						return dp.Value
					}
				}
			}
		}
	}
	return 0
}
