package ffriver

import (
	"log/slog"

	"github.com/ffriver/ffriver/internal/riverlog"
)

// RiverLogger returns the logger ffriver gives River's client for l: River's
// own lines need one level more than l's to show (its INFO lines, like the
// per-queue "Producer job counts" every 5 s, show only when l logs DEBUG;
// its WARN lines at INFO), unless l logs DEBUG, which shows everything River
// says. So at the default level the log holds ffriver's lifecycle and what
// needs attention, and --log-level debug brings River's chatter back. A nil
// l gives a logger that discards.
func RiverLogger(l *slog.Logger) *slog.Logger { return riverlog.Quieter(l) }
