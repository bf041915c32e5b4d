package outbox

import (
	"context"
	"log/slog"
	"time"

	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Channel returns the NOTIFY channel stream readers of schema LISTEN on.
func Channel(schema string) string { return schema + ".ff_outbox" }

// DefaultWakeInterval is the least time between two NOTIFYs of one Waker.
const DefaultWakeInterval = 5 * time.Millisecond

// Waker wakes stream readers after events commit, with at most one NOTIFY per
// interval, sent outside any writing transaction. Losing a wake-up only
// delays readers until their next poll.
type Waker struct {
	pool     *pgxpool.Pool
	channel  string
	interval time.Duration
	poke     chan struct{}
	logger   *slog.Logger
}

// NewWaker returns a Waker for schema; call Run to start it. schema must be
// the resolved schema name (not empty).
func NewWaker(pool *pgxpool.Pool, schema string, interval time.Duration, logger *slog.Logger) *Waker {
	if interval <= 0 {
		interval = DefaultWakeInterval
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Waker{pool: pool, channel: Channel(schema), interval: interval, poke: make(chan struct{}, 1), logger: logger}
}

// Poke asks for a wake-up; it never blocks. Call it after a commit that wrote
// events. A nil Waker ignores pokes.
func (w *Waker) Poke() {
	if w == nil {
		return
	}
	select {
	case w.poke <- struct{}{}:
	default:
	}
}

// Run sends the wake-ups until ctx is done.
func (w *Waker) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.poke:
		}
		if _, err := w.pool.Exec(ctx, "SELECT pg_notify($1, '')", w.channel); err != nil && ctx.Err() == nil {
			w.logger.DebugContext(ctx, "outbox wake-up failed; readers will poll", "error", dbutil.MapErr(err, "notify"))
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(w.interval):
		}
	}
}
