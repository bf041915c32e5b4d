package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
)

// ReportServe ends a long-running binary: it logs a refusal to start on an
// unmigrated schema (so it shows in the process's structured logs too), then
// reports err like Report and returns the exit code.
func ReportServe(stderr io.Writer, command string, logger *slog.Logger, err error) int {
	if err != nil && ExitCode(err) == ExitNotMigrated {
		logger.Error("refusing to start", "error", err)
	}
	return Report(stderr, command, err)
}

// RunRiver waits until ctx is done (a signal) or the started client stops
// by itself, calls beforeStop (when non-nil), then stops the client
// gracefully: it stops fetching and waits up to timeout for running jobs,
// after which it cancels them (their transactions roll back and River
// retries them).
func RunRiver(ctx context.Context, client *river.Client[pgx.Tx], timeout time.Duration, logger *slog.Logger, beforeStop func()) error {
	select {
	case <-ctx.Done():
		logger.Info("stopping: waiting for running jobs", "timeout", timeout.String())
	case <-client.Stopped():
		return errors.New("the River client stopped unexpectedly")
	}
	if beforeStop != nil {
		beforeStop()
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := client.Stop(stopCtx); err != nil {
		logger.Warn("running jobs did not finish in time; cancelling them", "error", err)
		hard, cancelHard := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancelHard()
		if err := client.StopAndCancel(hard); err != nil {
			return fmt.Errorf("stopping River: %w", err)
		}
	}
	logger.Info("stopped")
	return nil
}
