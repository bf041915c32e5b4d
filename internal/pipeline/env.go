package pipeline

import (
	"log/slog"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/internal/apply"
	"github.com/ffriver/ffriver/workers"
)

// Env is what the pipeline's workers run with: the Env its item actions
// get (workers.Env: the Store and the logger) and the runtime's settings.
type Env struct {
	*workers.Env
	// Config is how the item jobs run (its JobTimeout is the ticks' and
	// scans' too).
	apply.Config
	// UnprocessableReportInterval is how often, at most, a process counts
	// and logs each scanner's unprocessable rows (workers.Unprocessable)
	// from its ticks. 0 means DefaultUnprocessableReportInterval; a
	// negative value (NoUnprocessableReport) turns the report off (ffctl
	// status still counts them).
	UnprocessableReportInterval time.Duration
	// Metrics are the pipeline's OpenTelemetry instruments (nil: none).
	Metrics *Metrics
}

// NewEnv returns an Env on store (nil logger: discard).
func NewEnv(store *executions.Store, logger *slog.Logger) *Env {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Env{Env: &workers.Env{Store: store, Logger: logger},
		Config:                      apply.Config{JobTimeout: apply.DefaultJobTimeout, GroupSize: apply.DefaultGroupSize, GroupLanes: apply.DefaultGroupLanes},
		UnprocessableReportInterval: DefaultUnprocessableReportInterval}
}
