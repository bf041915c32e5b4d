package workers

import (
	"log/slog"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Env is what the pipeline's workers and item actions run with. The clock
// and the outbox waker are the Store's (executions.Config.Clock and Waker):
// a pipeline has one of each, owned by its Store.
type Env struct {
	// Store runs the execution actions; its schema, partitions, clock and
	// waker are the pipeline's.
	Store *executions.Store
	// Logger for warnings of the pipeline (never nil after NewEnv).
	Logger *slog.Logger
	// JobTimeout of every ffriver job (River cancels the job's context
	// after it; River's rescuer re-runs a job stuck longer than the
	// client's RescueStuckJobsAfter).
	JobTimeout time.Duration
	// GroupSize is the most item jobs of one grouped kind applied in one
	// transaction (default DefaultGroupSize; 1 disables grouping).
	GroupSize int
	// GroupLanes is how many group transactions of one kind a process runs
	// at once (default DefaultGroupLanes).
	GroupLanes int
	// UnprocessableReportInterval is how often, at most, a process counts
	// and logs each scanner's unprocessable rows (Unprocessable)
	// from its ticks. 0 means DefaultUnprocessableReportInterval; a
	// negative value (NoUnprocessableReport) turns the report off (ffctl
	// status still counts them).
	UnprocessableReportInterval time.Duration
	// Metrics are the pipeline's OpenTelemetry instruments (nil: none).
	Metrics *Metrics
}

// DefaultJobTimeout is Env.JobTimeout unless set.
const DefaultJobTimeout = 30 * time.Second

// NewEnv returns an Env on store (nil logger: discard).
func NewEnv(store *executions.Store, logger *slog.Logger) *Env {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Env{Store: store, Logger: logger, JobTimeout: DefaultJobTimeout, GroupSize: DefaultGroupSize, GroupLanes: DefaultGroupLanes,
		UnprocessableReportInterval: DefaultUnprocessableReportInterval}
}

// Pool is the store's pool.
func (e *Env) Pool() *pgxpool.Pool { return e.Store.Pool() }

// Schema is the resolved schema of ffriver's tables.
func (e *Env) Schema() string { return e.Store.Schema() }

// Partitions is the schema's partition count.
func (e *Env) Partitions() ff.Partitions { return e.Store.Partitions() }

// NowMs is the current time in Unix milliseconds, by the Store's clock.
func (e *Env) NowMs() int64 { return e.Store.NowMs() }

// SQL replaces every {S} in q with the quoted schema and a dot, so actions
// write {S}ff_exec_core.
func (e *Env) SQL(q string) string {
	return dbutil.Schema(e.Store.Schema()).SQL(q)
}
