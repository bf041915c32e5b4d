package cli

import (
	"flag"
	"fmt"
	"runtime/debug"
	"strings"
)

// ErrVersion is what Parse returns after printing the version for
// --version: it matches flag.ErrHelp, so ExitCode makes it ExitOK and Report
// prints nothing more.
var ErrVersion = fmt.Errorf("version printed: %w", flag.ErrHelp)

// Module paths whose versions Version reports.
const (
	libModule     = "github.com/ffriver/ffriver"
	riverModule   = "github.com/riverqueue/river"
	riverUIModule = "riverqueue.com/riverui"
)

// Version describes the binary called name from its build information
// (runtime/debug): ffriver's module version ("(devel)" for a build that
// has none), the VCS commit, its time and whether the tree was modified
// (when built inside a git checkout with -buildvcs, go build's default), and
// the versions of Go, River and River UI (for the binaries that serve it) it
// was built with. Unknown fields read "unknown".
func Version(name string) string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return name + " (no build information)\n"
	}
	return FormatVersion(name, info)
}

// FormatVersion is Version for the build information info.
func FormatVersion(name string, info *debug.BuildInfo) string {
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	deps := map[string]string{}
	for _, d := range info.Deps {
		v := d.Version
		switch {
		case d.Replace != nil && d.Replace.Version == "":
			v = "(devel)" // a directory, as the library beside the binaries is
		case d.Replace != nil:
			v = d.Replace.Version + " (replaces " + d.Version + ")"
		}
		deps[d.Path] = v
	}
	or := func(s string) string {
		if s == "" {
			return "unknown"
		}
		return s
	}
	commit := or(settings["vcs.revision"])
	var extra []string
	if t := settings["vcs.time"]; t != "" {
		extra = append(extra, t)
	}
	if settings["vcs.modified"] == "true" {
		extra = append(extra, "modified")
	}
	if len(extra) > 0 {
		commit += " (" + strings.Join(extra, ", ") + ")"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s\n", name, or(info.Main.Version))
	fmt.Fprintf(&b, "  module:   %s\n", or(info.Main.Path))
	if v, ok := deps[libModule]; ok {
		fmt.Fprintf(&b, "  ffriver:  %s\n", v) // the library the binaries' module was built with
	}
	fmt.Fprintf(&b, "  commit:   %s\n", commit)
	fmt.Fprintf(&b, "  go:       %s\n", or(info.GoVersion))
	fmt.Fprintf(&b, "  river:    %s\n", or(deps[riverModule]))
	if v := deps[riverUIModule]; v != "" {
		fmt.Fprintf(&b, "  river ui: %s\n", v)
	}
	return b.String()
}

// AddVersion adds --version to fs: Parse then prints Version(fs.Name()) on
// fs.Stdout and returns ErrVersion before any other check.
func (fs *FlagSet) AddVersion() {
	fs.version = fs.Bool("version", false, "print the version (ffriver's, its commit, Go's, River's) and exit")
}
