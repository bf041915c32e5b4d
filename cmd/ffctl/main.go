// Command ffctl is ffriver's operator CLI: it migrates a schema, tails the
// outbox streams, shows the scanners' backlog, inspects, cancels and revokes
// executions, shows and changes the settings stored in the schema, runs the
// demo and the benchmarks.
//
//	ffctl <command> [flags]
//	ffctl help [command]
//	ffctl completion bash|zsh|fish|powershell
//
// Exit codes: 0 ok, 1 runtime failure, 2 usage error, 3 schema not migrated.
package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/ffriver/ffriver/cmd/internal/cli"
	"github.com/spf13/cobra"
)

// command is one ffctl subcommand. Each lives in its own file (migrate.go, …)
// as a package-level value and is listed in commands below.
type command struct {
	name    string
	summary string // one line for the command list
	// run executes the command with the arguments after its name and returns
	// the process exit code (see cmd/internal/cli's Exit* constants). ctx is
	// cancelled on SIGINT/SIGTERM.
	run func(ctx context.Context, args []string) int
}

// commands lists ffctl's subcommands in the order `ffctl help` shows them.
// To add one: write <name>.go with `var <name>Command = command{…}` and add
// it here.
var commands = []command{
	migrateCommand,
	tailCommand,
	demoCommand,
	benchCommand,
	statusCommand,
	execCommand,
	consumerCommand,
	configCommand,
	versionCommand,
}

func main() {
	ctx, stop := cli.SignalContext(context.Background())
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// newRoot returns ffctl's cobra command tree: one command per entry of
// commands, each parsing its own flags (its cli.FlagSet: a pflag set) when
// it runs, and cobra's completion command. Running one stores its exit
// code in *code.
func newRoot(stdout, stderr io.Writer, code *int) *cobra.Command {
	root := &cobra.Command{
		Use:           "ffctl",
		Short:         "ffriver's operator CLI",
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	for _, c := range commands {
		root.AddCommand(&cobra.Command{
			Use:   c.name,
			Short: c.summary,
			// The command's cli.FlagSet parses its flags, help included.
			DisableFlagParsing: true,
			RunE: func(cmd *cobra.Command, args []string) error {
				*code = c.run(cmd.Context(), args)
				return nil
			},
		})
	}
	root.InitDefaultCompletionCmd()
	return root
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	code := cli.ExitOK
	root := newRoot(stdout, stderr, &code)
	if len(args) == 0 {
		printCommands(stderr, root)
		return cli.ExitUsage
	}
	switch name, rest := args[0], args[1:]; name {
	case "-version", "--version":
		_, _ = io.WriteString(stdout, cli.Version("ffctl"))
		return cli.ExitOK
	case "help", "-h", "-help", "--help":
		if len(rest) == 0 || strings.HasPrefix(rest[0], "-") {
			printCommands(stdout, root)
			return cli.ExitOK
		}
		// `ffctl help exec get` is `ffctl exec get --help`.
		args = append(slices.Clone(rest), "--help")
	case "completion":
		// cobra answers an unknown shell with the command's help and exit 0.
		if err := cli.CheckCompletionShell(rest); err != nil {
			return cli.Report(stderr, "ffctl completion", err)
		}
	case cobra.ShellCompRequestCmd, cobra.ShellCompNoDescRequestCmd:
		// The completion scripts ask `ffctl __complete WORDS… PARTIAL`:
		// cobra completes the command names; a command's words are its
		// own to complete, from its flag set.
		if len(rest) > 1 {
			if c, ok := findCommand(rest[0]); ok {
				return c.run(ctx, append([]string{name}, rest[1:]...))
			}
		}
	}
	if sub, _, err := root.Find(args); (err != nil || sub == root) && !isCompletionRequest(args[0]) {
		fmt.Fprintf(stderr, "ffctl: unknown command %q%s\nRun 'ffctl help' for the list of commands.\n",
			args[0], didYouMean(root.SuggestionsFor(args[0])))
		return cli.ExitUsage
	}
	root.SetArgs(args)
	if err := root.ExecuteContext(ctx); err != nil {
		return cli.Report(stderr, "ffctl", &cli.UsageError{Err: err})
	}
	return code
}

// isCompletionRequest reports whether arg is cobra's hidden command that
// the completion scripts run.
func isCompletionRequest(arg string) bool {
	return arg == cobra.ShellCompRequestCmd || arg == cobra.ShellCompNoDescRequestCmd
}

// findCommand returns the command called name.
func findCommand(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// didYouMean formats suggestions for an unknown name: "" when there are
// none.
func didYouMean(suggestions []string) string {
	if len(suggestions) == 0 {
		return ""
	}
	return " (did you mean " + strings.Join(suggestions, " or ") + "?)"
}

func printCommands(w io.Writer, root *cobra.Command) {
	var b strings.Builder
	b.WriteString("ffctl is ffriver's operator CLI.\n\nUsage: ffctl <command> [flags]\n\nCommands:\n")
	// ffctl's own commands, in the order of commands; cobra's completion
	// (which takes no database flags) is said below them.
	var cmds []*cobra.Command
	for _, c := range root.Commands() {
		if _, ok := findCommand(c.Name()); ok && c.IsAvailableCommand() {
			cmds = append(cmds, c)
		}
	}
	slices.SortStableFunc(cmds, func(a, b *cobra.Command) int {
		return cmp.Compare(commandIndex(a.Name()), commandIndex(b.Name()))
	})
	width := len("help")
	for _, c := range cmds {
		width = max(width, len(c.Name()))
	}
	for _, c := range cmds {
		fmt.Fprintf(&b, "  %-*s  %s\n", width, c.Name(), c.Short)
	}
	fmt.Fprintf(&b, "  %-*s  %s\n", width, "help", "list the commands, or `ffctl help <command>` for one command's flags")
	b.WriteString("\nEvery command takes --help. Exit codes: 0 ok, 1 runtime failure, 2 usage error, 3 schema not migrated.\n" +
		"tail waits at start while the server refuses for a reason that passes (--startup-wait); the other\n" +
		"commands fail at once.\n" +
		"Shell completion: `ffctl completion bash|zsh|fish|powershell` prints the script (see its --help).\n")
	_, _ = io.WriteString(w, b.String())
}

// commandIndex is the place of the command called name in commands (after
// them when it is not one).
func commandIndex(name string) int {
	for i, c := range commands {
		if c.name == name {
			return i
		}
	}
	return len(commands)
}
