// Package riverlog makes River's log lines one level quieter than the
// logger they go to, for ffriver's River clients and migrators.
package riverlog

import (
	"context"
	"log/slog"
)

// Quieter returns a logger on l's handler on which River's lines need one
// level more than l's to show (River's INFO lines only when l logs DEBUG;
// its WARN lines at INFO), unless l logs DEBUG, which shows everything. A
// nil l gives a logger that discards.
func Quieter(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(handler{l.Handler()})
}

// handler is Quieter's: l's handler, one notch quieter unless it is
// enabled at DEBUG.
type handler struct{ h slog.Handler }

func (r handler) Enabled(ctx context.Context, level slog.Level) bool {
	if r.h.Enabled(ctx, slog.LevelDebug) {
		return r.h.Enabled(ctx, level)
	}
	return r.h.Enabled(ctx, level-(slog.LevelInfo-slog.LevelDebug))
}

func (r handler) Handle(ctx context.Context, rec slog.Record) error { return r.h.Handle(ctx, rec) }

func (r handler) WithAttrs(attrs []slog.Attr) slog.Handler { return handler{r.h.WithAttrs(attrs)} }

func (r handler) WithGroup(name string) slog.Handler { return handler{r.h.WithGroup(name)} }
