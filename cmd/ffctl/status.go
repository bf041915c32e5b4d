package main

import (
	"context"
	"io"
	"os"
	"time"

	"github.com/ffriver/ffriver"
	"github.com/ffriver/ffriver/cmd/ffctl/internal/status"
	"github.com/ffriver/ffriver/cmd/internal/cli"
	"github.com/ffriver/ffriver/scanners"
)

var statusCommand = command{
	name:    "status",
	summary: "show each scanner's backlog, River's queues, the streams' open writers and consumers",
	run:     func(ctx context.Context, args []string) int { return runStatus(ctx, args, os.Stdout, os.Stderr) },
}

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := cli.NewFlagSet("ffctl status", "",
		"Shows River's leader and whether it inserts ffriver's ticks (or why none comes), each\n"+
			"scanner's last tick;\n"+
			"per scanner, the due backlog and how long its oldest item has been overdue, and\n"+
			"apart from it the unprocessable rows (rows that look due but no scan can process: a\n"+
			"partition outside the schema's count, an attempt of no execution, an unknown state), each\n"+
			"reason with a query that lists them;\n"+
			"River's jobs per queue and state; per stream, the newest event and the open transactions\n"+
			"that wrote to it (their events wait for them to commit; nothing else waits), its time\n"+
			"partitions, and whether outbox retention waits for a lock another session holds (who);\n"+
			"the named stream consumers with their lag, whether they hold retention back and whether\n"+
			"a tail is attached; and the oldest open writer on the server.\n"+
			"Exits 3 when the schema is not migrated. River's tables are read in --river-schema.\n"+
			cli.FailFastHelp)
	common := cli.AddCommon(fs)
	common.AddRiverSchema(fs)
	staleAfter := fs.Duration("tick-stale-after", ffriver.DefaultTickStaleAfter,
		"say ticks have stopped when none was inserted for this `duration` (ffworker's --tick-stale-after)")
	format := fs.String("format", "text", "output `format`: text or json")
	retention := fs.Duration("outbox-retention", scanners.DefaultOutboxRetention,
		"the outbox `retention` to judge what is due for retention, and which consumers hold it back,\n"+
			"against when the schema stores none (ffctl config): a stored one wins, as in ffscheduler")
	execRetention := scanners.DefaultExecutionRetention
	fs.Var((*cli.ExecutionRetentionFlag)(&execRetention), "execution-retention",
		"the execution `retention` (or \"forever\") to judge what is due for execution_retention against\n"+
			"when the schema stores none (ffctl config): a stored one wins, as in ffscheduler")
	fs.AfterParse(func() error {
		if *format != "text" && *format != "json" {
			return cli.Usagef("--format %q: want text or json", *format)
		}
		return cli.FirstError(cli.CheckDuration("outbox-retention", *retention, time.Second, cli.MaxRetention),
			cli.CheckExecutionRetention(execRetention), cli.CheckDuration("tick-stale-after", *staleAfter, time.Second, 24*time.Hour))
	})
	if err := fs.Parse(args); err != nil {
		return cli.Report(stderr, fs.Name(), err)
	}
	pool, err := common.OpenPool(ctx, cli.PoolOptions{AppName: "ffctl status", MaxConns: 2, OneShot: true})
	if err != nil {
		return cli.Report(stderr, fs.Name(), err)
	}
	defer pool.Close()
	// The retentions stored in the schema (ffctl config) win over the
	// flags, which apply only when none is stored; a flag given that
	// disagrees with the stored one is warned about.
	cfg := ffriver.Config{Schema: common.Schema, RiverSchema: common.RiverSchema, Logger: common.Logger(stderr)}
	if fs.Explicit("outbox-retention") {
		cfg.OutboxRetention = *retention
	}
	if fs.Explicit("execution-retention") {
		cfg.ExecutionRetention = execRetention
	}
	f, err := ffriver.New(ctx, pool, cfg)
	if err != nil {
		return cli.Report(stderr, fs.Name(), err)
	}
	r, err := status.Collect(ctx, pool, f, f.OutboxRetention())
	if err != nil {
		return cli.Report(stderr, fs.Name(), err)
	}
	if r.Ticks, err = f.Ticks(ctx, *staleAfter); err != nil {
		return cli.Report(stderr, fs.Name(), err)
	}
	if *format == "json" {
		err = status.WriteJSON(stdout, r)
	} else {
		err = status.WriteText(stdout, r)
	}
	return cli.Report(stderr, fs.Name(), err)
}
