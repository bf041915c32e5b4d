package main

import (
	"context"
	"io"
	"os"

	"github.com/ffriver/ffriver/cmd/internal/cli"
)

var versionCommand = command{
	name:    "version",
	summary: "print the version: ffriver's, its commit, Go's, River's and River UI's (also ffctl --version)",
	run:     runVersion,
}

func runVersion(_ context.Context, args []string) int {
	fs := cli.NewFlagSet("ffctl version", "",
		"Prints ffriver's module version, the git commit it was built from (its time, and\n"+
			"\"modified\" for a dirty tree), and the Go, River and River UI versions it was built with.")
	if err := fs.Parse(args); err != nil {
		return cli.Report(os.Stderr, fs.Name(), err)
	}
	_, _ = io.WriteString(os.Stdout, cli.Version("ffctl"))
	return cli.ExitOK
}
