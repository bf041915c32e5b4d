package cli

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// FlagSet is a standard-library flag set for one (sub)command, with help that
// prints flags the GNU way (--name) and parsing that reports mistakes as
// *UsageError. Both -name and --name are accepted.
type FlagSet struct {
	*flag.FlagSet
	// ArgsUsage names the positional arguments ("leases|completions"); when
	// empty, positional arguments are a usage error.
	ArgsUsage string
	// Summary is the paragraph --help prints under the usage line.
	Summary string
	// Stdout receives --help (default os.Stdout).
	Stdout io.Writer
	// Getenv reads defaults such as $DATABASE_URL (default os.Getenv).
	Getenv func(string) string

	after   []func() error
	version *bool
}

// NewFlagSet returns an empty flag set for command (e.g. "ffctl migrate").
func NewFlagSet(command, argsUsage, summary string) *FlagSet {
	fs := &FlagSet{
		FlagSet:   flag.NewFlagSet(command, flag.ContinueOnError),
		ArgsUsage: argsUsage,
		Summary:   summary,
		Stdout:    os.Stdout,
		Getenv:    os.Getenv,
	}
	fs.FlagSet.Usage = func() { fs.PrintUsage(fs.FlagSet.Output()) }
	return fs
}

// AfterParse registers a check or default-filling step that Parse runs once
// the flags are parsed. An error it returns is a usage error.
func (fs *FlagSet) AfterParse(f func() error) { fs.after = append(fs.after, f) }

// Parse parses args. --help prints the help on Stdout and returns
// flag.ErrHelp (exit code 0); any mistake returns a *UsageError, whose message
// says what was wrong (nothing is printed: pass it to Report).
func (fs *FlagSet) Parse(args []string) error {
	// The flag package prints errors and the whole help to Output on a
	// mistake; keep errors short and the help for --help alone.
	fs.FlagSet.SetOutput(io.Discard)
	usage := fs.FlagSet.Usage
	fs.FlagSet.Usage = func() {}
	err := fs.FlagSet.Parse(args)
	fs.FlagSet.Usage = usage
	fs.FlagSet.SetOutput(nil)
	if errors.Is(err, flag.ErrHelp) {
		fs.PrintUsage(fs.Stdout)
		return flag.ErrHelp
	}
	if err != nil {
		return &UsageError{Err: gnuFlagError(err)}
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

// gnuFlagError rewrites the flag package's "-name" in its messages as
// "--name", the spelling the help uses.
func gnuFlagError(err error) error {
	msg := err.Error()
	for _, p := range []string{"flag -", "defined: -", "argument: -"} {
		if i := strings.Index(msg, p); i >= 0 && !strings.HasPrefix(msg[i+len(p):], "-") {
			msg = msg[:i+len(p)] + "-" + msg[i+len(p):]
		}
	}
	return errors.New(msg)
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
	fs.VisitAll(func(f *flag.Flag) {
		name, usage := flag.UnquoteUsage(f)
		fmt.Fprintf(&b, "  --%s", f.Name)
		if name != "" {
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
	_, _ = w.Write(b.Bytes())
}

// isZeroDefault reports whether f's default is its type's zero value, which
// the help leaves unsaid.
func isZeroDefault(f *flag.Flag) bool {
	switch f.DefValue {
	case "", "0", "false", "0s", "[]":
		return true
	}
	return false
}

// Explicit reports whether the flag name was set on the command line.
func (fs *FlagSet) Explicit(name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			set = true
		}
	})
	return set
}
