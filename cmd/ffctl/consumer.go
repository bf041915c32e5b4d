package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/ffriver/ffriver"
	"github.com/ffriver/ffriver/cmd/ffctl/internal/status"
	"github.com/ffriver/ffriver/cmd/internal/cli"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/scanners"
	"github.com/ffriver/ffriver/subscribe"
	"github.com/jackc/pgx/v5/pgxpool"
)

var consumerCommand = command{
	name:    "consumer",
	summary: "list and drop named stream consumers: consumer list|drop",
	run:     func(ctx context.Context, args []string) int { return runConsumer(ctx, args, os.Stdout, os.Stderr) },
}

var consumerSubcommands = []subcommand{
	{"list", "named consumers: lag, max lag, whether they hold retention back, attached", runConsumerList},
	{"drop", "delete a consumer's stored position, releasing the events retention kept for it", runConsumerDrop},
}

func runConsumer(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runSubcommands(ctx, "consumer", "[flags] [NAME]",
		"Named stream consumers (ffctl tail --consumer NAME, subscribe.Options.Consumer) keep their\n"+
			"acknowledged position in the database, and outbox retention keeps every event they have not\n"+
			"acknowledged until their position is older than their maximum lag (a week by default).\n"+
			"A consumer nobody runs any more therefore holds retention back: drop it.", consumerSubcommands, args, stdout, stderr)
}

func runConsumerList(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f := newSubcommandFlags("ffctl consumer list", "",
		"Lists the named consumers of both streams: how old each one's position is (lag), how old it\n"+
			"may grow before retention stops waiting for it (max lag), whether it holds retention back\n"+
			"(its position is older than --outbox-retention and younger than its max lag: events\n"+
			"retention would delete are kept for it) and whether a stream is attached to it now.", stdout)
	retention := f.fs.Duration("outbox-retention", scanners.DefaultOutboxRetention,
		"the outbox `retention` to judge the consumers against when the schema stores none\n(ffctl config): a stored one wins, as in ffscheduler")
	f.fs.AfterParse(func() error {
		return cli.CheckDuration("outbox-retention", *retention, time.Second, cli.MaxRetention)
	})
	pos, err := f.parse(args)
	if err == nil && len(pos) > 0 {
		err = cli.Usagef("takes no arguments, got %q", pos)
	}
	if err != nil {
		return cli.Report(stderr, f.fs.Name(), err)
	}
	pool, err := f.connect(ctx)
	if err != nil {
		return cli.Report(stderr, f.fs.Name(), err)
	}
	defer pool.Close()
	if *retention, err = storedOutboxRetention(ctx, pool, f.common.Schema, *retention); err != nil {
		return cli.Report(stderr, f.fs.Name(), err)
	}
	cs, err := subscribe.Consumers(ctx, pool, f.common.Schema)
	if err != nil {
		return cli.Report(stderr, f.fs.Name(), err)
	}
	out := make([]status.Consumer, len(cs))
	for i, c := range cs {
		out[i] = status.Consumer{ConsumerInfo: c, HoldsRetention: c.HoldsRetention(*retention), Retention: status.ConsumerRetention(c, *retention)}
	}
	if *f.format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return cli.Report(stderr, f.fs.Name(), enc.Encode(out))
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "consumer\tstream\tlag\tmax lag\tattached\tstored at\tretention")
	if len(cs) == 0 {
		fmt.Fprintln(tw, "(no named consumers)")
	}
	for _, c := range out {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%t\t%s\t%s\n", c.Name, c.Stream, c.Lag.Round(time.Millisecond), c.MaxLag,
			c.Attached, c.UpdatedAt.UTC().Format(time.RFC3339), c.Retention)
	}
	return cli.Report(stderr, f.fs.Name(), tw.Flush())
}

func runConsumerDrop(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f := newSubcommandFlags("ffctl consumer drop", "NAME",
		"Deletes the stored position of the named consumer of --stream: retention no longer keeps\n"+
			"events for it from its next trim on, and a tail that later uses the name starts afresh\n"+
			"(--from-start, --since or now). Refused while a stream is attached to the consumer (stop\n"+
			"it first). Exits 1 when there is no such consumer.", stdout)
	stream := f.fs.String("stream", "", "the consumer's `stream`: leases or completions (required)")
	f.fs.CompleteValues("stream", "leases", "completions")
	pos, err := f.parse(args)
	if err == nil && len(pos) != 1 {
		err = cli.Usagef("want exactly one consumer name, got %d arguments", len(pos))
	}
	if err == nil && *stream == "" {
		err = cli.Usagef("--stream is required: leases or completions")
	}
	if err == nil {
		if _, serr := subscribe.StreamTable(*stream); serr != nil {
			err = &cli.UsageError{Err: serr}
		} else if nerr := subscribe.CheckConsumerName(pos[0]); nerr != nil {
			err = &cli.UsageError{Err: nerr}
		}
	}
	if err != nil {
		return cli.Report(stderr, f.fs.Name(), err)
	}
	pool, err := f.connect(ctx)
	if err != nil {
		return cli.Report(stderr, f.fs.Name(), err)
	}
	defer pool.Close()
	err = subscribe.DropConsumer(ctx, pool, f.common.Schema, *stream, pos[0])
	switch {
	case errors.Is(err, ff.ErrNotFound):
		err = fmt.Errorf("no consumer %q of the %s stream (ffctl consumer list shows them)", pos[0], *stream)
	case errors.Is(err, subscribe.ErrConsumerBusy):
		err = fmt.Errorf("consumer %q of the %s stream is attached to a running stream: stop it first", pos[0], *stream)
	case err == nil:
		if *f.format == "json" {
			err = json.NewEncoder(stdout).Encode(map[string]string{"dropped": pos[0], "stream": *stream})
		} else {
			_, err = fmt.Fprintf(stdout, "dropped consumer %q of the %s stream: retention no longer keeps events for it\n", pos[0], *stream)
		}
	}
	return cli.Report(stderr, f.fs.Name(), err)
}

// storedOutboxRetention returns the outbox retention stored in schema
// (ffctl config set outbox_retention), else otherwise.
func storedOutboxRetention(ctx context.Context, pool *pgxpool.Pool, schema string, otherwise time.Duration) (time.Duration, error) {
	stored, err := ffriver.StoredSettings(ctx, pool, schema)
	if err != nil {
		return 0, err
	}
	for _, st := range stored {
		if st.Name == scanners.OutboxRetention {
			v, err := ffriver.CheckSetting(st.Name, st.Value)
			if err != nil {
				return 0, fmt.Errorf("the stored setting %s (ffctl config set or unset fixes it): %w", st.Name, err)
			}
			return time.ParseDuration(v)
		}
	}
	return otherwise, nil
}
