package cli

import (
	"bytes"
	"encoding"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// FlagSet is a pflag flag set for one (sub)command, with help that explains
// every flag, and parsing that reports mistakes as *UsageError in words a
// newcomer can act on: an unknown flag names the closest one ("did you mean
// --schema?"), a duration without a unit says which unit to add. Flags may
// come before, between or after the positional arguments (`ffctl consumer
// drop NAME --stream leases`); "--" ends the flags. Both --name and the
// older single-dash -name are accepted.
type FlagSet struct {
	*pflag.FlagSet
	// ArgsUsage names the positional arguments ("leases|completions"); when
	// empty, positional arguments are a usage error.
	ArgsUsage string
	// Summary is the paragraph --help prints under the usage line.
	Summary string
	// Stdout receives --help and shell completions (default os.Stdout).
	Stdout io.Writer
	// Getenv reads defaults such as $DATABASE_URL (default os.Getenv).
	Getenv func(string) string

	after   []func() error
	version *bool
	values  map[string][]string
}

// NewFlagSet returns an empty flag set for command (e.g. "ffctl migrate").
func NewFlagSet(command, argsUsage, summary string) *FlagSet {
	fs := &FlagSet{
		FlagSet:   pflag.NewFlagSet(command, pflag.ContinueOnError),
		ArgsUsage: argsUsage,
		Summary:   summary,
		Stdout:    os.Stdout,
		Getenv:    os.Getenv,
	}
	// pflag prints errors and the help to Output on a mistake; keep errors
	// short (Report prints them) and the help for --help alone.
	fs.FlagSet.SetOutput(io.Discard)
	fs.FlagSet.Usage = func() {}
	return fs
}

// AfterParse registers a check or default-filling step that Parse runs once
// the flags are parsed. An error it returns is a usage error.
func (fs *FlagSet) AfterParse(f func() error) { fs.after = append(fs.after, f) }

// CompleteValues gives flag name the values shell completion offers for
// it (--log-format: text, json).
func (fs *FlagSet) CompleteValues(name string, values ...string) {
	if fs.values == nil {
		fs.values = map[string][]string{}
	}
	fs.values[name] = values
}

// Duration defines a duration flag whose value must carry a unit ("30s",
// "1500ms", "5m"; "0" alone is zero): a bare number is refused with a
// message that says which unit to add.
func (fs *FlagSet) Duration(name string, value time.Duration, usage string) *time.Duration {
	p := new(time.Duration)
	fs.DurationVar(p, name, value, usage)
	return p
}

// DurationVar is Duration storing into p.
func (fs *FlagSet) DurationVar(p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.FlagSet.Var((*durationValue)(p), name, usage)
}

// Var defines a flag of a standard-library flag.Value (its help names the
// value "value" unless the usage quotes a `name`).
func (fs *FlagSet) Var(value flag.Value, name, usage string) {
	v, ok := value.(pflag.Value)
	if !ok {
		v = typedValue{value}
	}
	fs.FlagSet.Var(v, name, usage)
}

// TextVar defines a flag of a type that marshals itself as text (slog.Level).
func (fs *FlagSet) TextVar(p encoding.TextUnmarshaler, name string, value encoding.TextMarshaler, usage string) {
	fs.FlagSet.TextVar(p, name, value, usage)
}

// typedValue gives a flag.Value the Type pflag asks for.
type typedValue struct{ flag.Value }

func (typedValue) Type() string { return "value" }

// durationValue is a time.Duration flag that explains a missing unit.
type durationValue time.Duration

func (d *durationValue) String() string { return time.Duration(*d).String() }
func (d *durationValue) Type() string   { return "duration" }

func (d *durationValue) Set(s string) error {
	v, err := ParseDuration(s)
	if err != nil {
		return err
	}
	*d = durationValue(v)
	return nil
}

// ParseDuration parses a duration as time.ParseDuration does, with an error
// a newcomer can act on: a number without a unit ("30") is told to add one
// ("30s"), anything else what a duration looks like.
func ParseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err == nil {
		return d, nil
	}
	if _, ferr := strconv.ParseFloat(strings.TrimSpace(s), 64); ferr == nil {
		return 0, fmt.Errorf("a duration needs a unit: %q, for %s seconds (units: ms, s, m, h)", strings.TrimSpace(s)+"s", strings.TrimSpace(s))
	}
	return 0, errors.New("not a duration: want a number with a unit, such as 30s, 1500ms, 5m or 1h30m")
}

// Parse parses args. --help prints the help on Stdout and returns
// flag.ErrHelp (exit code 0); any mistake returns a *UsageError, whose message
// says what was wrong (nothing is printed: pass it to Report).
//
// args starting with cobra's hidden completion command (__complete, which
// the scripts of `ffctl completion` run) print the completions of the last
// one on Stdout instead, and return flag.ErrHelp too.
func (fs *FlagSet) Parse(args []string) error {
	if len(args) > 0 && (args[0] == cobra.ShellCompRequestCmd || args[0] == cobra.ShellCompNoDescRequestCmd) {
		_ = fs.cobra(args)
		return flag.ErrHelp
	}
	if len(args) > 0 && args[0] == "completion" && fs.completionCommand() {
		// A binary without subcommands (ffscheduler, ffworker) takes no
		// arguments: `ffworker completion bash` prints its script.
		if err := CheckCompletionShell(args[1:]); err != nil {
			return Usagef("completion: %v", err)
		}
		if err := fs.cobra(args); err != nil {
			return &UsageError{Err: err}
		}
		return flag.ErrHelp
	}
	err := fs.FlagSet.Parse(fs.longForm(args))
	if errors.Is(err, pflag.ErrHelp) {
		fs.PrintUsage(fs.Stdout)
		return flag.ErrHelp
	}
	if err != nil {
		return &UsageError{Err: fs.explain(err)}
	}
	if fs.version != nil && *fs.version {
		_, _ = io.WriteString(fs.Stdout, Version(fs.Name()))
		return ErrVersion
	}
	if fs.ArgsUsage == "" && fs.NArg() > 0 {
		return Usagef("unexpected argument %q", fs.Arg(0))
	}
	for _, f := range fs.after {
		if err := f(); err != nil {
			var ue *UsageError
			if !errors.As(err, &ue) {
				err = &UsageError{Err: err}
			}
			return err
		}
	}
	return nil
}

// longForm returns args with each single-dash long flag (-schema, -help,
// -schema=x), which the standard library's flag package accepted and the
// binaries' scripts may still use, written with two dashes. Only words in a
// flag's place are rewritten (not the value of a flag, nor anything after
// "--"), and only names the set defines, or help.
func (fs *FlagSet) longForm(args []string) []string {
	out := slices.Clone(args)
	for i := 0; i < len(out); i++ {
		a := out[i]
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "-") || len(a) < 2 {
			continue
		}
		name := strings.TrimLeft(a, "-")
		name, _, hasValue := strings.Cut(name, "=")
		f := fs.Lookup(name)
		if !strings.HasPrefix(a, "--") && len(name) > 1 && (f != nil || name == "help") {
			out[i] = "-" + a
		}
		if f != nil && !hasValue && f.NoOptDefVal == "" && (strings.HasPrefix(out[i], "--")) {
			i++ // the next word is this flag's value
		}
	}
	return out
}

// explain rewrites pflag's parse errors in the words of the help: an
// unknown flag with the closest defined names, a bad value with what the
// flag wants.
func (fs *FlagSet) explain(err error) error {
	var notExist *pflag.NotExistError
	var invalid *pflag.InvalidValueError
	switch {
	case errors.As(err, &notExist):
		if s := notExist.GetSpecifiedShortnames(); s != "" && s[0] >= '0' && s[0] <= '9' {
			return fmt.Errorf("-%s is read as a flag: an argument that begins with '-' goes after \"--\" (… -- -%s)", s, s)
		}
		if s := notExist.GetSpecifiedShortnames(); s != "" {
			return fmt.Errorf("flag provided but not defined: -%s (in -%s); flags are spelled --name", notExist.GetSpecifiedName()[:1], s)
		}
		name := notExist.GetSpecifiedName()
		msg := "flag provided but not defined: --" + name
		if sug := fs.suggest(name); len(sug) > 0 {
			msg += " (did you mean --" + strings.Join(sug, " or --") + "?)"
		}
		return errors.New(msg)
	case errors.As(err, &invalid):
		f := invalid.GetFlag()
		cause := invalid.Unwrap()
		var ne *strconv.NumError
		switch {
		case errors.As(cause, &ne) && f.Value.Type() == "bool":
			cause = errors.New("want true or false")
		case errors.As(cause, &ne) && errors.Is(ne.Err, strconv.ErrRange):
			cause = errors.New("value out of range")
		case errors.As(cause, &ne):
			cause = errors.New("want a whole number")
		}
		return fmt.Errorf("invalid value %q for flag --%s: %w", invalid.GetValue(), f.Name, cause)
	}
	return err
}

// suggest returns the defined flag names closest to name: those it begins,
// those that begin it, and those at most two edits away.
func (fs *FlagSet) suggest(name string) []string {
	var out []string
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		if EditDistance(name, f.Name) <= 2 || (len(name) >= 3 && strings.HasPrefix(f.Name, name)) {
			out = append(out, f.Name)
		}
	})
	if len(out) > 3 {
		out = out[:3]
	}
	return out
}

// EditDistance is the Levenshtein distance between a and b: how many
// bytes to insert, delete or replace to turn one into the other. A
// misspelt name is at most 2 from the one meant.
func EditDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// CompletionShells are the shells `completion SHELL` prints a script for
// (cobra's completion command).
var CompletionShells = []string{"bash", "zsh", "fish", "powershell"}

// CheckCompletionShell returns a *UsageError when args, the arguments
// after "completion", name a shell that has no completion script: cobra
// would print the completion command's help and exit 0, as if the shell
// had been understood. No shell at all (the help asked for) is not an
// error.
func CheckCompletionShell(args []string) error {
	for _, a := range args {
		if strings.HasPrefix(a, "-") {
			continue
		}
		if slices.Contains(CompletionShells, a) || a == "help" {
			return nil
		}
		return Usagef("unsupported shell %q: completion scripts exist for %s and %s", a,
			strings.Join(CompletionShells[:len(CompletionShells)-1], ", "), CompletionShells[len(CompletionShells)-1])
	}
	return nil
}

// completionCommand reports whether the set's command takes `completion
// SHELL` for its completion script: a binary without subcommands, which
// takes no arguments (ffscheduler, ffworker).
func (fs *FlagSet) completionCommand() bool {
	return fs.ArgsUsage == "" && !strings.Contains(fs.Name(), " ")
}

// cobra runs args on a cobra command made of this flag set: cobra's hidden
// completion command ("__complete" or "__completeNoDesc", then the words
// typed so far, the last being the one to complete), or, for a binary
// without subcommands, cobra's completion command that prints the
// scripts. Flag names complete with their help's first line, the values
// given to CompleteValues complete their flags, and a positional argument
// completes to file names only where the command takes positional
// arguments.
func (fs *FlagSet) cobra(args []string) error {
	cmd := &cobra.Command{
		Use:           strings.ReplaceAll(fs.Name(), " ", "-"),
		Run:           func(*cobra.Command, []string) {},
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	if fs.ArgsUsage == "" {
		cmd.ValidArgsFunction = cobra.NoFileCompletions
	}
	fs.VisitAll(func(f *pflag.Flag) {
		// Each completion shows the help's first line, without the
		// quotes that name the help's placeholder (`format`).
		c := *f
		_, c.Usage = pflag.UnquoteUsage(f)
		cmd.Flags().AddFlag(&c)
	})
	for name, values := range fs.values {
		_ = cmd.RegisterFlagCompletionFunc(name, cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp))
	}
	cmd.SetArgs(fs.longForm(args))
	cmd.SetOut(fs.Stdout)
	cmd.SetErr(io.Discard)
	return cmd.Execute()
}

// PrintUsage writes the help: usage line, summary, and every flag with its
// help text and default.
func (fs *FlagSet) PrintUsage(w io.Writer) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "Usage: %s [flags]", fs.Name())
	if fs.ArgsUsage != "" {
		fmt.Fprintf(&b, " %s", fs.ArgsUsage)
	}
	b.WriteString("\n")
	if fs.Summary != "" {
		fmt.Fprintf(&b, "\n%s\n", strings.TrimSpace(fs.Summary))
	}
	b.WriteString("\nFlags:\n")
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		name, usage := pflag.UnquoteUsage(f)
		if f.Shorthand != "" {
			fmt.Fprintf(&b, "  -%s, --%s", f.Shorthand, f.Name)
		} else {
			fmt.Fprintf(&b, "  --%s", f.Name)
		}
		if name != "" && f.NoOptDefVal == "" {
			fmt.Fprintf(&b, " %s", name)
		}
		b.WriteString("\n\t")
		b.WriteString(strings.ReplaceAll(usage, "\n", "\n\t"))
		if !isZeroDefault(f) {
			if name == "string" {
				fmt.Fprintf(&b, " (default %q)", f.DefValue)
			} else {
				fmt.Fprintf(&b, " (default %s)", f.DefValue)
			}
		}
		b.WriteString("\n")
	})
	b.WriteString("  --help\n\tshow this help and exit\n")
	if fs.completionCommand() {
		fmt.Fprintf(&b, "\nShell completion: %s completion bash|zsh|fish|powershell prints the script (see its --help).\n", fs.Name())
	}
	_, _ = w.Write(b.Bytes())
}

// isZeroDefault reports whether f's default is its type's zero value, which
// the help leaves unsaid.
func isZeroDefault(f *pflag.Flag) bool {
	switch f.DefValue {
	case "", "0", "false", "0s", "[]":
		return true
	}
	return false
}

// Explicit reports whether the flag name was set on the command line.
func (fs *FlagSet) Explicit(name string) bool {
	return fs.Changed(name)
}
