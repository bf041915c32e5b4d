package cli

import (
	"context"
	"log/slog"
	"net"
	"time"

	"github.com/ffriver/ffriver/cmd/internal/telemetry"
)

// Telemetry holds --metrics-addr after parsing.
type Telemetry struct {
	// Addr is --metrics-addr ("": not served).
	Addr   string
	getenv func(string) string
}

// AddTelemetry registers --metrics-addr on fs.
func AddTelemetry(fs *FlagSet) *Telemetry {
	t := &Telemetry{}
	fs.StringVar(&t.Addr, "metrics-addr", "",
		"serve Prometheus /metrics, /healthz and /readyz on this `address`, e.g. 127.0.0.1:9464 (default: not served);\n"+
			"OTLP export of metrics and traces follows the standard OTEL_* environment variables")
	fs.AfterParse(func() error {
		t.getenv = fs.Getenv
		if t.Addr == "" {
			return nil
		}
		if _, _, err := net.SplitHostPort(t.Addr); err != nil {
			return Usagef("--metrics-addr %q: %v", t.Addr, err)
		}
		return nil
	})
	return t
}

// Start builds the providers of the binary called service and serves
// --metrics-addr, logging where. Stop it with StopTelemetry.
func (t *Telemetry) Start(ctx context.Context, service string, logger *slog.Logger) (*telemetry.Telemetry, error) {
	tel, err := telemetry.Start(ctx, telemetry.Options{Addr: t.Addr, Service: service, Getenv: t.getenv, Logger: logger})
	if err != nil {
		return nil, err
	}
	if a := tel.Addr(); a != "" {
		logger.Info("serving metrics and health", "metrics_addr", a, "urls", "http://"+a+"/metrics /healthz /readyz")
	}
	return tel, nil
}

// StopTelemetry stops the server and flushes the providers, for at most 5 s.
func StopTelemetry(tel *telemetry.Telemetry, logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tel.Shutdown(ctx); err != nil {
		logger.Warn("stopping telemetry", "error", err)
	}
}
