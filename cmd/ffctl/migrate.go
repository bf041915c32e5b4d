package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/cli"
	"github.com/ffriver/ffriver/migrations"
)

var migrateCommand = command{
	name:    "migrate",
	summary: "create the schema if missing and apply River's and ffriver's migrations",
	run:     runMigrate,
}

func runMigrate(ctx context.Context, args []string) int {
	fs := cli.NewFlagSet("ffctl migrate", "",
		"Creates the schema if it is missing, then applies River's migrations and ffriver's own,\n"+
			"and records the partition count of a new schema. Applying nothing is success: it is\n"+
			"safe to run twice, and from several processes at once (they take turns on a lock).")
	common := cli.AddCommon(fs)
	partitions := fs.Int("partitions", ff.DefaultPartitions,
		"logical partition `count` of a NEW schema (1.."+strconv.Itoa(ff.MaxPartitions)+"); fixed once migrated.\n"+
			"Given explicitly on an existing schema, it must match the recorded count (else exit 3)")
	fs.AfterParse(func() error {
		return ff.Partitions(*partitions).Check()
	})
	if err := fs.Parse(args); err != nil {
		return cli.Report(os.Stderr, fs.Name(), err)
	}
	logger := common.Logger(os.Stderr)

	pool, err := common.OpenPool(ctx, cli.PoolOptions{AppName: "ffctl migrate", MaxConns: 4})
	if err != nil {
		return cli.Report(os.Stderr, fs.Name(), err)
	}
	defer pool.Close()

	opts := &migrations.Options{Logger: logger}
	if fs.Explicit("partitions") {
		// Otherwise 0: the default for a new schema, any count for an existing one.
		opts.Partitions = ff.Partitions(*partitions)
	}
	res, err := migrations.Migrate(ctx, pool, common.Schema, opts)
	if err != nil {
		if sig, ok := cli.Interrupted(ctx); ok {
			err = fmt.Errorf("interrupted by %v: %w", sig, err)
		}
		return cli.Report(os.Stderr, fs.Name(), err)
	}

	w := os.Stdout
	if len(res.RiverApplied) == 0 && len(res.Applied) == 0 {
		fmt.Fprintf(w, "schema %s is up to date (%d partitions); nothing to apply\n", res.Schema, int(res.Partitions))
		return cli.ExitOK
	}
	fmt.Fprintf(w, "migrated schema %s (%d partitions)\n", res.Schema, int(res.Partitions))
	if len(res.RiverApplied) > 0 {
		vs := make([]string, len(res.RiverApplied))
		for i, v := range res.RiverApplied {
			vs[i] = strconv.Itoa(v)
		}
		fmt.Fprintf(w, "  river migrations applied:   %s\n", strings.Join(vs, ", "))
	}
	if len(res.Applied) > 0 {
		fmt.Fprintf(w, "  ffriver migrations applied: %s\n", strings.Join(res.Applied, ", "))
	}
	return cli.ExitOK
}
