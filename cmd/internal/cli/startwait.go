package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A long-running binary (ffworker, ffscheduler, ffctl tail) that starts
// while the server refuses connections for a reason that passes by itself
// — every slot taken, the server starting up or shutting down, nothing
// listening while it restarts — keeps trying instead of exiting, for up to
// --startup-wait. One-shot commands do not register the flag and fail at
// once.

// FailFastHelp ends the --help of a one-shot command (ffctl status, exec,
// consumer, migrate), which does not register --startup-wait.
const FailFastHelp = "A server that refuses the connection fails the command at once (exit 1), also for a reason that\n" +
	"passes (no free slot, restarting): only ffctl tail, ffworker and ffscheduler wait (--startup-wait)."

// DefaultStartupWait is --startup-wait's default.
const DefaultStartupWait = 5 * time.Minute

// MaxStartupWait is the largest --startup-wait accepted.
const MaxStartupWait = 24 * time.Hour

// StartupReportInterval is the least time between two log lines saying
// what a start-up waits for (the first is logged at the first refusal).
const StartupReportInterval = 10 * time.Second

// The backoff between two tries: from startupFirstRetry, doubling up to
// startupMaxRetry, each drawn between half and the whole of it.
const (
	startupFirstRetry = 100 * time.Millisecond
	startupMaxRetry   = 5 * time.Second
)

// startupWaitEnv is the environment variable read when --startup-wait is
// not given.
const startupWaitEnv = "FF_STARTUP_WAIT"

// AddStartupWait registers --startup-wait on fs, for a long-running
// command: after fs.Parse, c.StartupWait holds the flag, else
// $FF_STARTUP_WAIT, else DefaultStartupWait, and OpenPool waits for up to
// that long while the server refuses for a reason that passes. A command
// that does not call it fails at once (StartupWait 0).
func (c *Common) AddStartupWait(fs *FlagSet) {
	fs.DurationVar(&c.StartupWait, "startup-wait", DefaultStartupWait,
		"at start, keep trying for up to this `duration` while the server refuses for a reason that passes\n"+
			"(every connection slot taken, starting up or shutting down, nothing listening while it restarts,\n"+
			"only standbys answering a multi-host URL with target_session_attrs=read-write: a failover),\n"+
			"logging what it waits for about every 10 s; then exit 1. A wrong password, role or database, an\n"+
			"unmigrated schema or a bad URL exit at once. 0: fail at once. $"+startupWaitEnv+" sets it when the\n"+
			"flag is not given")
	fs.AfterParse(func() error {
		if !fs.Explicit("startup-wait") {
			if v := fs.Getenv(startupWaitEnv); v != "" {
				d, err := ParseDuration(v)
				if err != nil {
					return Usagef("$%s %q is not a duration (e.g. 5m, or 0 not to wait): %v", startupWaitEnv, v, err)
				}
				c.StartupWait = d
			}
		}
		return CheckDuration("startup-wait", c.StartupWait, 0, MaxStartupWait)
	})
}

// passesByItself reports whether err, a first connection's failure, is a
// refusal that passes without anyone changing the configuration: the
// server has no free slot (53300, its max_connections or the role's
// CONNECTION LIMIT), is starting up or shutting down (57P03, 57P01,
// 57P02), or its address refuses, resets, closes or does not answer a
// connection (a server restarting), or a name server failed for now, or
// with target_session_attrs=read-write only standbys answer (a failover
// under way). Any
// other answer of the server (a wrong password, role or database), an
// unknown host or a TLS failure does not pass.
func passesByItself(err error) bool {
	// pgx joins the errors of every address and TLS mode it tried: an
	// answer of the server decides over a network error beside it.
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case connLimitCode, "57P03", "57P01", "57P02":
			return true
		}
		return false
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return dnsErr.IsTemporary || dnsErr.IsTimeout
	}
	// target_session_attrs=read-write and only standbys answer: one is
	// being promoted, or will be.
	return errors.Is(err, pgconn.ErrReadOnlyConnection) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, context.DeadlineExceeded) || isTimeout(err)
}

// startupBackoff returns the pause after the try-th failed try (from 1).
func startupBackoff(try int) time.Duration {
	d := startupMaxRetry
	if try < 16 {
		d = min(startupFirstRetry<<(try-1), startupMaxRetry)
	}
	return d/2 + rand.N(d/2+1)
}

// awaitServer pings pool, opened with cfg, until its server accepts a connection. A failure
// that does not pass by itself, or any failure when c.StartupWait is 0,
// is returned at once, explained (firstConnError); one that passes is
// tried again with backoff and logged on o.Logger at the first refusal and
// then about every StartupReportInterval, until c.StartupWait has passed.
// When ctx ends while it waits, it returns an error that matches ctx's.
func (c *Common) awaitServer(ctx context.Context, pool *pgxpool.Pool, cfg *pgxpool.Config, o PoolOptions) error {
	logger := o.Logger
	if logger == nil {
		logger = slog.Default()
	}
	start := time.Now()
	var lastReport time.Time
	for try := 1; ; try++ {
		err := pool.Ping(ctx)
		if err == nil {
			if try > 1 {
				logger.Info("the server accepted the connection", "waited", time.Since(start).Round(time.Millisecond).String())
			}
			return nil
		}
		logger.Debug("the first connection failed", "url", RedactURL(c.DatabaseURL), "error", redactErr(err, c.DatabaseURL).Error())
		explained := c.firstConnError(cfg, o, err)
		if ctx.Err() != nil {
			return fmt.Errorf("stopped while waiting for the server (%w): %w", context.Cause(ctx), explained)
		}
		if c.StartupWait <= 0 || !passesByItself(err) {
			return explained
		}
		waited := time.Since(start)
		if waited >= c.StartupWait {
			return fmt.Errorf("gave up after waiting %s (--startup-wait): %w", c.StartupWait, explained)
		}
		if lastReport.IsZero() || time.Since(lastReport) >= StartupReportInterval {
			lastReport = time.Now()
			logger.Warn("waiting for the server to accept a connection", "reason", Scrub(explained.Error()),
				"waited", waited.Round(time.Second).String(), "startup_wait", c.StartupWait.String(), "tries", try)
		}
		t := time.NewTimer(min(startupBackoff(try), c.StartupWait-waited))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("stopped while waiting for the server (%w): %w", context.Cause(ctx), explained)
		case <-t.C:
		}
	}
}
