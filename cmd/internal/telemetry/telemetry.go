// Package telemetry is the binaries' OpenTelemetry set-up and their
// operations endpoint: a MeterProvider with a Prometheus reader on a
// registry of its own, OTLP export of metrics and traces configured by the
// standard OTEL_* environment variables, and an HTTP server with /metrics
// (Prometheus exposition), /healthz (the process is alive) and /readyz (the
// process says it is ready). Nothing here installs a global provider.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/ffriver/ffriver/metricviews"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/contrib/exporters/autoexport"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
)

// Options configure Start.
type Options struct {
	// Addr to serve /metrics, /healthz and /readyz on ("": no server, e.g.
	// "127.0.0.1:9464"; port 0 picks a free one, see Telemetry.Addr).
	Addr string
	// Service is the service.name of the resource (OTEL_SERVICE_NAME and
	// OTEL_RESOURCE_ATTRIBUTES win).
	Service string
	// Getenv reads the OTEL_* variables that decide whether OTLP export
	// runs (default: no OTLP). The exporters themselves read the process
	// environment, as the OpenTelemetry SDK does.
	Getenv func(string) string
	// Logger for the server's own problems (default: discard).
	Logger *slog.Logger
}

// Telemetry is one binary's providers and endpoint.
type Telemetry struct {
	meters  *sdkmetric.MeterProvider // nil: no metrics
	tracers *sdktrace.TracerProvider // nil: no traces
	srv     *http.Server
	ln      net.Listener
	logger  *slog.Logger

	mu    sync.Mutex
	ready func(context.Context) error
}

// OTLPConfigured reports whether the environment asks for OTLP export of
// traces and of metrics: an OTEL_TRACES_EXPORTER / OTEL_METRICS_EXPORTER
// value other than "none", or an OTLP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT,
// or the signal's own).
func OTLPConfigured(getenv func(string) string) (traces, metrics bool) {
	if getenv == nil {
		return false, false
	}
	on := func(exporterVar, endpointVar string) bool {
		switch getenv(exporterVar) {
		case "none":
			return false
		case "":
			return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv(endpointVar) != ""
		default:
			return true
		}
	}
	return on("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
		on("OTEL_METRICS_EXPORTER", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
}

// Start builds the providers and, with Options.Addr, starts serving. With
// no address and no OTLP configured it returns a Telemetry whose providers
// are nil (nothing is measured).
func Start(ctx context.Context, o Options) (*Telemetry, error) {
	t := &Telemetry{logger: o.Logger}
	if t.logger == nil {
		t.logger = slog.New(slog.DiscardHandler)
	}
	otlpTraces, otlpMetrics := OTLPConfigured(o.Getenv)
	res, err := resource.New(ctx, resource.WithAttributes(semconv.ServiceName(o.Service)), resource.WithFromEnv())
	if err != nil {
		return nil, fmt.Errorf("telemetry resource: %w", err)
	}
	var readers []sdkmetric.Option
	reg := prometheus.NewRegistry()
	if o.Addr != "" {
		exp, err := otelprom.New(otelprom.WithRegisterer(reg))
		if err != nil {
			return nil, fmt.Errorf("prometheus exporter: %w", err)
		}
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		readers = append(readers, sdkmetric.WithReader(exp))
	}
	if otlpMetrics {
		r, err := autoexport.NewMetricReader(ctx)
		if err != nil {
			return nil, fmt.Errorf("OTLP metrics (OTEL_* variables): %w", err)
		}
		if !autoexport.IsNoneMetricReader(r) {
			readers = append(readers, sdkmetric.WithReader(r))
		}
	}
	if len(readers) > 0 {
		// River's job metrics (otelriver) without the jobs' tags, which
		// name every partition and namespace, and with buckets in seconds.
		t.meters = sdkmetric.NewMeterProvider(append(readers, sdkmetric.WithResource(res),
			sdkmetric.WithView(metricviews.Views()...))...)
	}
	if otlpTraces {
		exp, err := autoexport.NewSpanExporter(ctx)
		if err != nil {
			_ = t.Shutdown(ctx)
			return nil, fmt.Errorf("OTLP traces (OTEL_* variables): %w", err)
		}
		if !autoexport.IsNoneSpanExporter(exp) {
			t.tracers = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
		}
	}
	if o.Addr == "" {
		return t, nil
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: slogPrinter{t.logger}}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", t.serveReady)
	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		_ = t.Shutdown(ctx)
		return nil, fmt.Errorf("--metrics-addr %s: %w", o.Addr, err)
	}
	t.ln = ln
	t.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := t.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.logger.Error("metrics server stopped", "error", err)
		}
	}()
	return t, nil
}

// MeterProvider is the provider to give ffriver (nil: no metrics).
func (t *Telemetry) MeterProvider() metric.MeterProvider {
	if t.meters == nil {
		return nil
	}
	return t.meters
}

// TracerProvider is the provider to give ffriver (nil: no traces).
func (t *Telemetry) TracerProvider() trace.TracerProvider {
	if t.tracers == nil {
		return nil
	}
	return t.tracers
}

// Addr is the address served ("" when none).
func (t *Telemetry) Addr() string {
	if t.ln == nil {
		return ""
	}
	return t.ln.Addr().String()
}

// SetReady sets the readiness check of /readyz: nil (the default) answers
// 503 "starting"; a check's error answers 503 with the error.
func (t *Telemetry) SetReady(check func(context.Context) error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ready = check
}

// ReadyTimeout bounds one /readyz check.
const ReadyTimeout = 5 * time.Second

func (t *Telemetry) serveReady(w http.ResponseWriter, r *http.Request) {
	t.mu.Lock()
	check := t.ready
	t.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if check == nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte("not ready: starting\n"))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), ReadyTimeout)
	defer cancel()
	if err := check(ctx); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = fmt.Fprintf(w, "not ready: %v\n", err)
		return
	}
	_, _ = w.Write([]byte("ready\n"))
}

// Shutdown stops the server and flushes and stops the providers.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	var errs []error
	if t.srv != nil {
		errs = append(errs, t.srv.Shutdown(ctx))
	}
	if t.tracers != nil {
		errs = append(errs, t.tracers.Shutdown(ctx))
	}
	if t.meters != nil {
		errs = append(errs, t.meters.Shutdown(ctx))
	}
	return errors.Join(errs...)
}

// slogPrinter adapts a slog.Logger to promhttp's ErrorLog.
type slogPrinter struct{ l *slog.Logger }

func (p slogPrinter) Println(v ...any) { p.l.Warn("metrics: " + fmt.Sprint(v...)) }
