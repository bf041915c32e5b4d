package uiserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/ffriver/ffriver/internal/testlog"
)

// River UI's errors that are only a cancellation (its query cacher's
// "Error running query" when the stop cancels its context, logged after
// ffscheduler's "stopped") come out at DEBUG; its other errors stay errors
// (issue 40, item 5).
func TestQuietCancelDemotesCancellations(t *testing.T) {
	canceled := fmt.Errorf("error beginning transaction: %w", context.Canceled)
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		var buf testlog.Buffer
		logger := quietCancel(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: level})))
		logger.Error("querycacher.QueryCacher[riverui.stateCountSnapshot]: Error running query", "err", canceled)
		logger.With("component", "ui").Error("cancelled, with attrs", "err", canceled)
		logger.Error("a real failure", "err", errors.New("relation does not exist"))
		logger.Error("no error attribute", "n", 1)
		out := buf.String()
		if strings.Contains(out, "level=ERROR msg=querycacher") || strings.Contains(out, `level=ERROR msg="querycacher`) ||
			strings.Contains(out, `level=ERROR msg="cancelled`) {
			t.Errorf("level %v: a cancellation logged as an error:\n%s", level, out)
		}
		if got := strings.Contains(out, "Error running query"); got != (level == slog.LevelDebug) {
			t.Errorf("level %v: the cancellation logged: %v, want %v (at DEBUG only):\n%s", level, got, level == slog.LevelDebug, out)
		}
		if level == slog.LevelDebug && !strings.Contains(out, "component=ui") {
			t.Errorf("the logger's attributes were lost:\n%s", out)
		}
		if !strings.Contains(out, `level=ERROR msg="a real failure"`) || !strings.Contains(out, `level=ERROR msg="no error attribute"`) {
			t.Errorf("level %v: other errors not logged as errors:\n%s", level, out)
		}
	}
}
