package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"text/tabwriter"
	"time"

	"github.com/ffriver/ffriver"
	"github.com/ffriver/ffriver/cmd/internal/cli"
	"github.com/ffriver/ffriver/ff"
)

var configCommand = command{
	name:    "config",
	summary: "show and change the settings stored in the schema: config get|set|unset",
	run:     func(ctx context.Context, args []string) int { return runConfig(ctx, args, os.Stdout, os.Stderr) },
}

var configSubcommands = []subcommand{
	{"get", "every setting (or NAME): its stored value, who set it and when, else its default", runConfigGet},
	{"set", "store NAME's VALUE: every process of the schema runs it", runConfigSet},
	{"unset", "delete NAME's stored value: each process's own flag applies again", runConfigUnset},
}

func runConfig(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return runSubcommands(ctx, "config", "[flags] [NAME [VALUE]]",
		"The settings every process of a schema must agree on — outbox_retention, execution_retention,\n"+
			"and each scanner's <scanner>.interval and <scanner>.batch — are stored in the schema.\n"+
			"A stored value wins over a process's flags (ffscheduler warns at start about a flag that\n"+
			"disagrees, naming both); with none stored, each process's flag applies, else the default.\n"+
			"A scheduler stores the flags it was given explicitly that are not stored yet. The retentions\n"+
			"apply from the next tick of whichever scheduler leads; intervals and batches as each\n"+
			"scheduler restarts. ffctl status judges against the stored values.", configSubcommands, args, stdout, stderr)
}

// configEntry is one line of ffctl config get.
type configEntry struct {
	ffriver.SettingInfo
	// Stored is the stored value, nil when none is.
	Stored *ffriver.Setting `json:"stored"`
	// Unknown: stored, but not a setting this ffctl knows (written by hand
	// or by another version).
	Unknown bool `json:"unknown,omitempty"`
}

func runConfigGet(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f := newSubcommandFlags("ffctl config get", "[NAME]",
		"Lists every setting, or the one called NAME: its stored value, who stored it and when, or,\n"+
			"when none is stored, its default (which each process's own flag overrides).", stdout)
	pos, err := f.parse(args)
	if err == nil && len(pos) > 1 {
		err = cli.Usagef("want at most one setting name, got %d arguments", len(pos))
	}
	var only string
	if err == nil && len(pos) == 1 {
		only = pos[0]
		if err = knownSetting(only); err != nil {
			err = &cli.UsageError{Err: err}
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
	stored, err := ffriver.StoredSettings(ctx, pool, f.common.Schema)
	if err != nil {
		return cli.Report(stderr, f.fs.Name(), err)
	}
	byName := map[string]ffriver.Setting{}
	for _, st := range stored {
		byName[st.Name] = st
	}
	var out []configEntry
	for _, info := range ffriver.KnownSettings() {
		if only != "" && info.Name != only {
			continue
		}
		e := configEntry{SettingInfo: info}
		if st, ok := byName[info.Name]; ok {
			e.Stored = &st
			delete(byName, info.Name)
		}
		out = append(out, e)
	}
	if only == "" {
		for _, st := range stored {
			if _, ok := byName[st.Name]; ok {
				out = append(out, configEntry{SettingInfo: ffriver.SettingInfo{Name: st.Name}, Stored: &st, Unknown: true})
			}
		}
	}
	if *f.format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return cli.Report(stderr, f.fs.Name(), enc.Encode(out))
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "setting\tvalue\tsource\tflag")
	for _, e := range out {
		switch {
		case e.Unknown:
			fmt.Fprintf(tw, "%s\t%s\tstored by %s at %s, but not a setting this ffctl knows (ffctl config unset removes it)\t-\n",
				e.Name, e.Stored.Value, e.Stored.SetBy, e.Stored.SetAt.UTC().Format(time.RFC3339))
		case e.Stored != nil:
			fmt.Fprintf(tw, "%s\t%s\tstored by %s at %s\t%s\n", e.Name, e.Stored.Value, e.Stored.SetBy, e.Stored.SetAt.UTC().Format(time.RFC3339), e.Flag)
		default:
			fmt.Fprintf(tw, "%s\t%s\tdefault, not stored (each process's %s applies)\t%s\n", e.Name, e.Default, e.Flag, e.Flag)
		}
	}
	return cli.Report(stderr, f.fs.Name(), tw.Flush())
}

func runConfigSet(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f := newSubcommandFlags("ffctl config set", "NAME VALUE",
		"Stores VALUE as the setting NAME, replacing a stored one: every process of the schema runs it,\n"+
			"whatever its flags (the retentions from the next tick, intervals and batches as each\n"+
			"scheduler restarts). Durations need a unit (90s, 15m, 168h); execution_retention also takes\n"+
			"\"forever\". `ffctl config get` lists the settings.", stdout)
	pos, err := f.parse(args)
	if err == nil && len(pos) != 2 {
		err = cli.Usagef("want a setting name and a value, got %d arguments", len(pos))
	}
	var value string
	if err == nil {
		if value, err = ffriver.CheckSetting(pos[0], pos[1]); err != nil {
			err = &cli.UsageError{Err: err}
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
	st, err := ffriver.SetSetting(ctx, pool, f.common.Schema, pos[0], value, "ffctl config set ("+whoAmI()+")")
	if err == nil {
		if *f.format == "json" {
			err = json.NewEncoder(stdout).Encode(st)
		} else {
			_, err = fmt.Fprintf(stdout, "stored %s = %s: every process of the schema runs it\n", st.Name, st.Value)
		}
	}
	return cli.Report(stderr, f.fs.Name(), err)
}

func runConfigUnset(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f := newSubcommandFlags("ffctl config unset", "NAME",
		"Deletes the stored value of the setting NAME: each process's own flag (else the default)\n"+
			"applies again, the retentions from the next tick. Exits 1 when none is stored.", stdout)
	pos, err := f.parse(args)
	if err == nil && len(pos) != 1 {
		err = cli.Usagef("want exactly one setting name, got %d arguments", len(pos))
	}
	if err == nil {
		if err = knownSetting(pos[0]); err != nil {
			err = &cli.UsageError{Err: err}
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
	err = ffriver.UnsetSetting(ctx, pool, f.common.Schema, pos[0])
	switch {
	case errors.Is(err, ff.ErrNotFound):
		err = fmt.Errorf("no stored value of %s (ffctl config get shows the stored settings)", pos[0])
	case err == nil:
		if *f.format == "json" {
			err = json.NewEncoder(stdout).Encode(map[string]string{"unset": pos[0]})
		} else {
			_, err = fmt.Fprintf(stdout, "unset %s: each process's own flag applies again\n", pos[0])
		}
	}
	return cli.Report(stderr, f.fs.Name(), err)
}

// knownSetting returns an error naming name when it is not a setting
// ffriver stores.
func knownSetting(name string) error {
	for _, info := range ffriver.KnownSettings() {
		if info.Name == name {
			return nil
		}
	}
	// CheckSetting's error names it and lists the known ones.
	_, err := ffriver.CheckSetting(name, "")
	return err
}

// whoAmI is the user and host running ffctl, for a stored setting's
// set_by.
func whoAmI() string {
	name := "unknown user"
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	host, _ := os.Hostname()
	return name + "@" + host
}
