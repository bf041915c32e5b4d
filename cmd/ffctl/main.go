// Command ffctl is ffriver's operator CLI: it migrates a schema, tails the
// outbox streams, shows the scanners' backlog, inspects, cancels and revokes
// executions, shows and changes the settings stored in the schema, runs the
// demo and the benchmarks.
//
//	ffctl <command> [flags]
//	ffctl help [command]
//
// Exit codes: 0 ok, 1 runtime failure, 2 usage error, 3 schema not migrated.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/ffriver/ffriver/cmd/internal/cli"
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

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		printCommands(stderr)
		return cli.ExitUsage
	}
	name, rest := args[0], args[1:]
	switch name {
	case "-version", "--version":
		_, _ = io.WriteString(stdout, cli.Version("ffctl"))
		return cli.ExitOK
	case "help", "-h", "-help", "--help":
		if len(rest) == 0 {
			printCommands(stdout)
			return cli.ExitOK
		}
		// `ffctl help migrate` is `ffctl migrate --help`.
		name, rest = rest[0], []string{"--help"}
	}
	for _, c := range commands {
		if c.name == name {
			return c.run(ctx, rest)
		}
	}
	fmt.Fprintf(stderr, "ffctl: unknown command %q\nRun 'ffctl help' for the list of commands.\n", name)
	return cli.ExitUsage
}

func printCommands(w io.Writer) {
	var b strings.Builder
	b.WriteString("ffctl is ffriver's operator CLI.\n\nUsage: ffctl <command> [flags]\n\nCommands:\n")
	width := len("help")
	for _, c := range commands {
		width = max(width, len(c.name))
	}
	for _, c := range commands {
		fmt.Fprintf(&b, "  %-*s  %s\n", width, c.name, c.summary)
	}
	fmt.Fprintf(&b, "  %-*s  %s\n", width, "help", "list the commands, or `ffctl help <command>` for one command's flags")
	b.WriteString("\nEvery command takes --help. Exit codes: 0 ok, 1 runtime failure, 2 usage error, 3 schema not migrated.\n" +
		"tail waits at start while the server refuses for a reason that passes (--startup-wait); the other\n" +
		"commands fail at once.\n")
	_, _ = io.WriteString(w, b.String())
}
