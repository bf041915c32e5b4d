// Package cli is what ffctl, ffscheduler and ffworker share: the common flags
// (--database-url, --schema, --log-format, --log-level) on pflag flag sets
// (spf13/pflag, as cobra uses: ffctl's commands are a cobra tree) with help
// that explains every flag and errors that say what to do, the logger, the
// connection pool, signal handling and exit codes.
//
// A subcommand is written like this:
//
//	fs := cli.NewFlagSet("ffctl migrate", "", "Create the schema if missing and apply the migrations.")
//	common := cli.AddCommon(fs)
//	partitions := fs.Int("partitions", 256, "partition count of a new schema")
//	if err := fs.Parse(args); err != nil {
//		return cli.Report(os.Stderr, fs.Name(), err) // 0 for --help, 2 for bad flags
//	}
//	logger := common.Logger(os.Stderr)
//	pool, err := common.OpenPool(ctx, cli.PoolOptions{AppName: "ffctl", MaxConns: 4})
//	...
//	return cli.Report(os.Stderr, fs.Name(), err)
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/ffriver/ffriver/ff"
)

// Exit codes of every ffriver binary.
const (
	// ExitOK: the command did what was asked (or stopped gracefully on a
	// signal, for the long-running ones).
	ExitOK = 0
	// ExitFailure: a runtime failure (database unreachable, a query failed,
	// interrupted before finishing).
	ExitFailure = 1
	// ExitUsage: bad flags or arguments; nothing was done.
	ExitUsage = 2
	// ExitNotMigrated: the schema lacks ffriver's tables, is behind, or has a
	// different partition count (errors.Is(err, ff.ErrNotMigrated)).
	ExitNotMigrated = 3
)

// UsageError is a mistake in how the command was invoked: an unknown or
// malformed flag, a bad value, a missing argument. It maps to ExitUsage.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Usagef returns a *UsageError with a formatted message.
func Usagef(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// ExitCode maps err onto the exit codes above: nil and flag.ErrHelp are
// ExitOK; ff.ErrNotMigrated is ExitNotMigrated; a *UsageError or an
// ff.ErrValidation (malformed input such as a cursor or an id given on the
// command line) is ExitUsage; anything else is ExitFailure.
func ExitCode(err error) int {
	var ue *UsageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return ExitOK
	case errors.Is(err, ff.ErrNotMigrated):
		return ExitNotMigrated
	case errors.As(err, &ue), errors.Is(err, ff.ErrValidation):
		return ExitUsage
	default:
		return ExitFailure
	}
}

// Report writes err to w prefixed by the command's name, with a pointer to
// --help for usage errors, and returns its exit code. The passwords of the
// connection strings parsed by AddCommon are masked (Scrub). It writes nothing for
// nil and for flag.ErrHelp (the help was already printed).
func Report(w io.Writer, command string, err error) int {
	code := ExitCode(err)
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return code
	}
	fmt.Fprintf(w, "%s: %s\n", command, Scrub(err.Error()))
	if code == ExitUsage {
		fmt.Fprintf(w, "Run '%s --help' for usage.\n", command)
	}
	return code
}

// SignalError is the cause of a SignalContext's cancellation by a signal. It
// matches context.Canceled with errors.Is.
type SignalError struct{ Signal os.Signal }

func (e *SignalError) Error() string { return "received " + e.Signal.String() }

// Is makes errors.Is(err, context.Canceled) true.
func (e *SignalError) Is(target error) bool { return target == context.Canceled }

// SignalContext returns a context cancelled on SIGINT or SIGTERM, with a
// *SignalError as its context.Cause. After the first signal the default
// behaviour comes back, so a second Ctrl-C kills a process whose graceful stop
// hangs. Call stop when done.
func SignalContext(parent context.Context) (ctx context.Context, stop context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		select {
		case sig := <-ch:
			signal.Stop(ch)
			cancel(&SignalError{Signal: sig})
		case <-ctx.Done():
			signal.Stop(ch)
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

// Interrupted reports whether ctx, or the SignalContext it derives from, was
// cancelled by a signal, and which.
func Interrupted(ctx context.Context) (os.Signal, bool) {
	var se *SignalError
	if ctx.Err() != nil && errors.As(context.Cause(ctx), &se) {
		return se.Signal, true
	}
	return nil, false
}
