package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A start cut off by a lost server (a failover under ffworker's first
// reads: "verify: reading ff_migration: unavailable: unexpected EOF") is
// started again within --startup-wait instead of ending the process; with
// no --startup-wait, or for an error of another kind, it ends at once.
func TestServeStartsAgainAfterALostServer(t *testing.T) {
	lost := fmt.Errorf("verify: reading ff_migration: %w: unexpected EOF", ff.ErrUnavailable)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	run := func(wait time.Duration, fail int, failWith error) (int, error) {
		calls := 0
		d := Daemon{Flags: &Common{StartupWait: wait}, Serve: func(context.Context, *pgxpool.Pool, *slog.Logger) error {
			calls++
			if calls <= fail {
				return failWith
			}
			return nil
		}}
		err := serveThroughLostServer(t.Context(), d, nil, logger)
		return calls, err
	}
	if calls, err := run(time.Minute, 2, lost); err != nil || calls != 3 {
		t.Errorf("two lost starts with --startup-wait 1m: %d starts, %v; want the third to run, no error", calls, err)
	}
	if calls, err := run(0, 2, lost); !errors.Is(err, ff.ErrUnavailable) || calls != 1 {
		t.Errorf("a lost start with --startup-wait 0: %d starts, %v; want one, and its error", calls, err)
	}
	other := errors.New("schema not migrated")
	if calls, err := run(time.Minute, 2, other); !errors.Is(err, other) || calls != 1 {
		t.Errorf("another error with --startup-wait 1m: %d starts, %v; want one, and its error", calls, err)
	}
	if calls, err := run(300*time.Millisecond, 1000, lost); !errors.Is(err, ff.ErrUnavailable) || calls < 2 {
		t.Errorf("a server lost for longer than --startup-wait: %d starts, %v; want a few, then its error", calls, err)
	}
}
