package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/ffriver/ffriver/cmd/internal/cli"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/migrations"
)

var migrateCommand = command{
	name:    "migrate",
	summary: "create the schema if missing and apply River's and ffriver's migrations",
	run:     runMigrate,
}

func runMigrate(ctx context.Context, args []string) int {
	fs := cli.NewFlagSet("ffctl migrate", "",
		"Creates the schema if it is missing, then applies River's migrations (in --river-schema,\n"+
			"by default --schema) and ffriver's own, and records the partition count of a new schema.\n"+
			"Embedding ffriver into an application that runs River: --river-schema names the\n"+
			"application's River schema (its tables are shared, never duplicated). Applying nothing is success: it is\n"+
			"safe to run twice, and from several processes at once (they take turns on a lock).\n"+
			"--dry-run says what would be applied, --show-sql prints its SQL too; neither changes anything.\n"+
			cli.FailFastHelp)
	common := cli.AddCommon(fs)
	common.AddRiverSchema(fs)
	partitions := fs.Int("partitions", ff.DefaultPartitions,
		"logical partition `count` of a NEW schema (1.."+strconv.Itoa(ff.MaxPartitions)+"); fixed once migrated.\n"+
			"Given explicitly on an existing schema, it must match the recorded count (else exit 3)")
	dryRun := fs.Bool("dry-run", false, "say what would be applied (schema creation, River's and ffriver's pending migrations,\n"+
		"the partition count) without changing anything")
	showSQL := fs.Bool("show-sql", false, "print the SQL of each pending migration too; implies --dry-run")
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

	opts := &migrations.Options{Logger: logger, RiverSchema: common.RiverSchema}
	if fs.Explicit("partitions") {
		// Otherwise 0: the default for a new schema, any count for an existing one.
		opts.Partitions = ff.Partitions(*partitions)
	}
	report := func(err error) int {
		var pm *ff.PartitionMismatchError
		if errors.As(err, &pm) {
			pm.Option = "--partitions"
		}
		return cli.Report(os.Stderr, fs.Name(), err)
	}
	if *dryRun || *showSQL {
		plan, err := migrations.PlanMigrate(ctx, pool, common.Schema, opts)
		if err != nil {
			return report(err)
		}
		printPlan(os.Stdout, plan, *showSQL)
		return cli.ExitOK
	}
	res, err := migrations.Migrate(ctx, pool, common.Schema, opts)
	if err != nil {
		if sig, ok := cli.Interrupted(ctx); ok {
			err = fmt.Errorf("interrupted by %v: %w", sig, err)
		}
		return report(err)
	}

	w := os.Stdout
	if len(res.RiverApplied) == 0 && len(res.Applied) == 0 {
		fmt.Fprintf(w, "schema %s is up to date (%d partitions); nothing to apply\n", res.Schema, int(res.Partitions))
		return cli.ExitOK
	}
	fmt.Fprintf(w, "migrated schema %s (%d partitions)\n", res.Schema, int(res.Partitions))
	if res.RiverSchema != res.Schema {
		fmt.Fprintf(w, "  River's tables in schema:   %s\n", res.RiverSchema)
	}
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

// printPlan writes what a migration would do; with sql, each migration's SQL.
func printPlan(w io.Writer, p *migrations.Plan, sql bool) {
	if len(p.River) == 0 && len(p.FF) == 0 && !p.CreateSchema && !p.NewPartitions {
		fmt.Fprintf(w, "dry run: schema %s is up to date (%d partitions); nothing would be applied\n", p.Schema, int(p.Partitions))
		return
	}
	fmt.Fprintf(w, "dry run: nothing was changed. ffctl migrate would, on schema %s:\n", p.Schema)
	if p.CreateSchema {
		fmt.Fprintf(w, "  create schema %s\n", p.Schema)
	}
	if p.CreateRiverSchema {
		fmt.Fprintf(w, "  create River's schema %s\n", p.RiverSchema)
	}
	for _, st := range p.River {
		fmt.Fprintf(w, "  river migration %03d %s\n", st.Version, st.Name)
	}
	for _, st := range p.FF {
		fmt.Fprintf(w, "  ffriver migration %04d_%s\n", st.Version, st.Name)
	}
	if p.NewPartitions {
		fmt.Fprintf(w, "  record %d partitions\n", int(p.Partitions))
	} else {
		fmt.Fprintf(w, "  keep its %d partitions\n", int(p.Partitions))
	}
	if !sql {
		return
	}
	ident := dbutil.Schema(p.Schema).Ident()
	if p.CreateSchema {
		fmt.Fprintf(w, "\n-- create schema %s\nCREATE SCHEMA IF NOT EXISTS %s;\n", p.Schema, ident)
	}
	for _, st := range p.River {
		fmt.Fprintf(w, "\n-- river migration %03d %s\n%s\n", st.Version, st.Name, strings.TrimSpace(st.SQL))
	}
	for _, st := range p.FF {
		fmt.Fprintf(w, "\n-- ffriver migration %04d_%s (recorded in ff_migration)\nSET search_path TO %s;\n%s\n",
			st.Version, st.Name, ident, strings.TrimSpace(st.SQL))
	}
}
