package ffriver

import (
	"context"
	"log/slog"
)

// RiverLogger returns the logger ffriver gives River's client for l: River's
// own lines need one level more than l's to show (its INFO lines, like the
// per-queue "Producer job counts" every 5 s, show only when l logs DEBUG;
// its WARN lines at INFO), unless l logs DEBUG, which shows everything River
// says. So at the default level the log holds ffriver's lifecycle and what
// needs attention, and --log-level debug brings River's chatter back. A nil
// l gives a logger that discards.
func RiverLogger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(riverHandler{l.Handler()})
}

// riverHandler is RiverLogger's handler: l's handler, one notch quieter
// unless it is enabled at DEBUG.
type riverHandler struct{ h slog.Handler }

func (r riverHandler) Enabled(ctx context.Context, level slog.Level) bool {
	if r.h.Enabled(ctx, slog.LevelDebug) {
		return r.h.Enabled(ctx, level)
	}
	return r.h.Enabled(ctx, level-(slog.LevelInfo-slog.LevelDebug))
}

func (r riverHandler) Handle(ctx context.Context, rec slog.Record) error { return r.h.Handle(ctx, rec) }

func (r riverHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return riverHandler{r.h.WithAttrs(attrs)}
}

func (r riverHandler) WithGroup(name string) slog.Handler { return riverHandler{r.h.WithGroup(name)} }
