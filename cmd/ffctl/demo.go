package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ffriver/ffriver/cmd/ffctl/internal/demo"
	"github.com/ffriver/ffriver/cmd/internal/cli"
	"github.com/ffriver/ffriver/cmd/internal/uiserver"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/redact"
)

var demoCommand = command{
	name:    "demo",
	summary: "run a live workload in a scratch schema: every scanner, both streams, River UI",
	run: func(ctx context.Context, args []string) int {
		return runDemo(ctx, args, os.Stdout, os.Stderr, os.Getenv)
	},
}

const demoSummary = `Runs a live ffriver deployment and workload for a while, then prints a summary.

It creates and migrates a fresh schema ffdemo_<random> (--schema and $FF_SCHEMA are
ignored), starts a scheduler (River leader, periodic ticks, River UI) and two workers
as River clients in this process, built as ffscheduler and ffworker build theirs, and
runs simulated application workers against it: they claim, renew, complete, fail and
delay executions of several lanes and namespaces, crash now and then (their leases
expire), a peer reclaims some expired leases, an operator revokes some; flows cancel
their remaining siblings or skip an impossible downstream. A live view, refreshed once
a second (redrawn on a terminal, one line per second otherwise), counts the events the
lease and completion streams deliver, each scanner's backlog and what its River jobs
did. At the end the clients stop gracefully and the schema is dropped unless --keep.

If an event type has not been seen when the time is up, it runs up to --grace more
(15s by default: on a slow or busy machine, give it longer).
Exit codes: 0 ok (also when ended early with Ctrl-C), 1 failure (database unreachable,
an event type never seen, …), 2 usage error.`

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := cli.NewFlagSet("ffctl demo", "", demoSummary)
	fs.Stdout = stdout
	fs.Getenv = getenv
	common := cli.AddCommon(fs)
	fs.Lookup("schema").Usage = "ignored (and $FF_SCHEMA too): the demo always creates a fresh `schema` ffdemo_<random>"
	duration := fs.Duration("duration", 0, "how long the workload runs, e.g. 30s or 2m (default $DEMO_DURATION, else 60s)")
	grace := fs.Duration("grace", demo.DefaultGrace, "how much longer the workload runs, at most, when an event type it guarantees\n"+
		"has not been seen when --duration is up (0: none)")
	keep := fs.Bool("keep", false, "keep the demo schema at the end (the demo prints how to look at it and drop it)")
	uiAddr := fs.String("ui-addr", demo.DefaultUIAddr, "loopback `host:port` for River UI; when the default is taken, a free port\n"+
		"is used instead; \"off\" serves no UI")
	tele := cli.AddTelemetry(fs)
	fs.AfterParse(func() error {
		if !fs.Explicit("duration") {
			d, err := demoDuration(getenv("DEMO_DURATION"))
			if err != nil {
				return err
			}
			*duration = d
		}
		if *duration <= 0 {
			return cli.Usagef("--duration %s: must be positive", *duration)
		}
		if *grace < 0 {
			return cli.Usagef("--grace %s: must not be negative", *grace)
		}
		if *uiAddr != "off" && !uiserver.IsLoopback(*uiAddr) {
			return cli.Usagef("--ui-addr %q: want a loopback host:port such as 127.0.0.1:8080 (the demo serves River UI without credentials), or off", *uiAddr)
		}
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return cli.Report(stderr, fs.Name(), err)
	}
	logger := common.Logger(stderr)
	if common.Schema != "" {
		logger.Info("the demo works in a fresh schema of its own; ignoring --schema / $FF_SCHEMA", "schema", common.Schema)
		common.Schema = ""
	}
	riverLevel := max(common.LogLevel, slog.LevelWarn)
	if common.LogLevel <= slog.LevelDebug {
		riverLevel = common.LogLevel
	}

	// Check the database first, for a clear message when it is not there.
	pool, err := common.OpenPool(ctx, cli.PoolOptions{AppName: "ffctl demo", MaxConns: 1})
	if err != nil {
		if errors.Is(err, ff.ErrUnavailable) {
			err = fmt.Errorf("%w\n(is PostgreSQL running? `make demo` finds or starts one through scripts/devdb.sh)", err)
		}
		return cli.Report(stderr, fs.Name(), err)
	}
	defer pool.Close()
	cfg, err := common.PoolConfig(cli.PoolOptions{AppName: "ffctl demo"})
	if err != nil {
		return cli.Report(stderr, fs.Name(), err)
	}
	tel, err := tele.Start(ctx, "ffctl demo", logger)
	if err != nil {
		return cli.Report(stderr, fs.Name(), err)
	}
	defer cli.StopTelemetry(tel, logger)
	tel.SetReady(pool.Ping) // the database answers; the demo's processes are in this one

	if *grace == 0 {
		*grace = -1 // demo.Options: negative is none, 0 the default
	}
	sum, err := demo.Run(ctx, demo.Options{
		PoolConfig:  cfg,
		Duration:    *duration,
		Grace:       *grace,
		Keep:        *keep,
		UIAddr:      *uiAddr,
		UIFallback:  !fs.Explicit("ui-addr"),
		Out:         stdout,
		Terminal:    isTerminal(stdout, getenv),
		Logger:      logger,
		RiverLogger: cli.NewLogger(stderr, common.LogFormat, riverLevel),
		Target:      cli.RedactURL(common.DatabaseURL),
		KeepURL:     keepURL(common.DatabaseURL),

		MeterProvider:  tel.MeterProvider(),
		TracerProvider: tel.TracerProvider(),
	})
	if _, interrupted := cli.Interrupted(ctx); interrupted && errors.Is(err, context.Canceled) {
		// Ctrl-C while the demo was still setting up: it cleaned up.
		fmt.Fprintln(stderr, "ffctl demo: interrupted while starting")
		return cli.ExitOK
	}
	if err == nil && sum != nil && !sum.Interrupted && len(sum.Missing) > 0 {
		err = fmt.Errorf("not every event type was seen (%s): the workload guarantees them; something is wrong", strings.Join(sum.Missing, ", "))
	}
	return cli.Report(stderr, fs.Name(), err)
}

// demoDuration parses $DEMO_DURATION: a Go duration ("45s", "2m") or a
// number of seconds; empty means 60s.
func demoDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return demo.DefaultDuration, nil
	}
	if n, err := strconv.Atoi(s); err == nil {
		if n <= 0 {
			return 0, cli.Usagef("DEMO_DURATION=%q: must be positive", s)
		}
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, cli.Usagef("DEMO_DURATION=%q: want a positive duration such as 45s or 2m, or a number of seconds", s)
	}
	return d, nil
}

// isTerminal reports whether w is a terminal that understands the cursor
// movements of the live view.
func isTerminal(w io.Writer, getenv func(string) string) bool {
	f, ok := w.(*os.File)
	if !ok || getenv("TERM") == "dumb" {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// keepURL is the URL the demo's kept-schema commands export: the database
// URL itself, with a password replaced by a placeholder to fill in (the
// commands are printed, so no secret is); "" without a URL (PG*
// variables).
func keepURL(u string) string {
	if u == "" {
		return ""
	}
	if len(redact.Secrets(u)) == 0 {
		return u
	}
	return strings.ReplaceAll(cli.RedactURL(u), redact.Mask, "PASSWORD")
}
