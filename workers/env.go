package workers

import (
	"log/slog"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Env is what an item's action runs with (ItemOf): the pipeline's Store and
// logger. The clock and the outbox waker are the Store's
// (executions.Config.Clock and Waker): a pipeline has one of each, owned
// by its Store.
type Env struct {
	// Store runs the execution actions; its schema, partitions, clock and
	// waker are the pipeline's.
	Store *executions.Store
	// Logger for warnings of the pipeline (never nil in a pipeline's Env).
	Logger *slog.Logger
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
