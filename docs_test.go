package ffriver_test

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/ffriver/ffriver/internal/testproc"
)

// The README is the first page and docs/ holds the guides behind it
// (issue 40). These tests keep them true for a reader: every link between
// them lands on a file and a heading that exist, every guide is in the
// index, and every command the README and the guides show names a make
// target, or a subcommand and flags the binaries have.

// mdDoc is one Markdown file: its text outside fenced code blocks (inline
// code left in), its fenced blocks, and its headings' anchors.
type mdDoc struct {
	path    string // slash-separated, relative to the repository's root
	prose   []mdLine
	blocks  []mdBlock
	anchors map[string]bool
}

type mdLine struct {
	n    int
	text string
}

type mdBlock struct {
	info  string // the fence's info string: sh, go, sql…
	lines []mdLine
}

var (
	fenceRe   = regexp.MustCompile("^\\s*(```+|~~~+)\\s*([^`\\s]*)")
	headingRe = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	// A link or an image: [text](target) or ![alt](target "title"). The
	// text may run over a line break.
	linkRe     = regexp.MustCompile(`!?\[([^\]]*)\]\(\s*([^)\s]+)(?:\s+"[^"]*")?\s*\)`)
	codeSpanRe = regexp.MustCompile("`[^`]*`")
)

func readDoc(t *testing.T, file string) *mdDoc {
	t.Helper()
	b, err := os.ReadFile(filepath.FromSlash(file))
	if err != nil {
		t.Fatal(err)
	}
	d := &mdDoc{path: file, anchors: map[string]bool{}}
	seen := map[string]int{}
	var block *mdBlock
	var fence string
	for i, line := range strings.Split(string(b), "\n") {
		n := i + 1
		if m := fenceRe.FindStringSubmatch(line); m != nil {
			switch {
			case block == nil:
				block, fence = &mdBlock{info: m[2]}, m[1]
				continue
			case strings.HasPrefix(m[1], fence[:1]) && len(m[1]) >= len(fence) && m[2] == "":
				d.blocks = append(d.blocks, *block)
				block = nil
				continue
			}
		}
		if block != nil {
			block.lines = append(block.lines, mdLine{n, line})
			continue
		}
		d.prose = append(d.prose, mdLine{n, line})
		if m := headingRe.FindStringSubmatch(line); m != nil {
			// GitHub numbers a repeated heading's anchor: x, x-1, x-2…
			a := anchor(m[2])
			if k := seen[a]; k > 0 {
				d.anchors[fmt.Sprintf("%s-%d", a, k)] = true
			} else {
				d.anchors[a] = true
			}
			seen[a]++
		}
	}
	if block != nil {
		t.Errorf("%s: a code block opened with %s is never closed", file, fence)
	}
	return d
}

// anchor is the id GitHub gives a heading: its text without Markdown, lower
// case, spaces as hyphens, every other character that is not a letter, a
// digit, a hyphen or an underscore dropped.
func anchor(heading string) string {
	heading = linkRe.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// docFiles are the README and the guides.
func docFiles(t *testing.T) []string {
	t.Helper()
	guides, err := filepath.Glob(filepath.Join("docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(guides) == 0 {
		t.Fatal("no guides in docs/")
	}
	files := []string{"README.md"}
	for _, g := range guides {
		files = append(files, filepath.ToSlash(g))
	}
	return files
}

// docLink is a relative link found in a document's prose.
type docLink struct {
	line   int
	target string // as written
	file   string // the file it names, relative to the repository's root
	anchor string
}

// links returns d's links to other files of the repository or to its own
// headings; links to web pages are left out.
func (d *mdDoc) links(t *testing.T) []docLink {
	t.Helper()
	// The prose as one text, so that a link's text may break across lines;
	// code spans are blanked (keeping line breaks) so that what they quote
	// is not taken for a link.
	var text strings.Builder
	starts := make([]int, 0, len(d.prose))
	for _, l := range d.prose {
		starts = append(starts, text.Len())
		text.WriteString(l.text)
		text.WriteByte('\n')
	}
	s := codeSpanRe.ReplaceAllStringFunc(text.String(), func(span string) string {
		return strings.Map(func(r rune) rune {
			if r == '\n' {
				return r
			}
			return ' '
		}, span)
	})
	var out []docLink
	for _, m := range linkRe.FindAllStringSubmatchIndex(s, -1) {
		target := s[m[4]:m[5]]
		if u, err := url.Parse(target); err == nil && u.Scheme != "" {
			continue // https:, mailto:
		}
		i, _ := slices.BinarySearch(starts, m[4])
		if i == len(starts) || starts[i] > m[4] {
			i--
		}
		l := docLink{line: d.prose[i].n, target: target}
		p, frag, _ := strings.Cut(target, "#")
		l.anchor = frag
		if p == "" {
			l.file = d.path
		} else {
			unescaped, err := url.PathUnescape(p)
			if err != nil {
				t.Errorf("%s:%d: link %q: %v", d.path, l.line, target, err)
				continue
			}
			l.file = path.Clean(path.Join(path.Dir(d.path), unescaped))
		}
		out = append(out, l)
	}
	return out
}

// TestDocLinksResolve: every relative link and image of the README and the
// guides names a file of the repository, and every #anchor a heading of
// the file it points into; every guide is listed in docs/README.md.
func TestDocLinksResolve(t *testing.T) {
	docs := map[string]*mdDoc{}
	files := docFiles(t)
	for _, f := range files {
		docs[f] = readDoc(t, f)
	}
	for _, f := range files {
		d := docs[f]
		for _, l := range d.links(t) {
			if strings.HasPrefix(l.file, "../") || l.file == ".." {
				t.Errorf("%s:%d: link %q leaves the repository", f, l.line, l.target)
				continue
			}
			if _, err := os.Stat(filepath.FromSlash(l.file)); err != nil {
				t.Errorf("%s:%d: link %q: %s does not exist", f, l.line, l.target, l.file)
				continue
			}
			if l.anchor == "" {
				continue
			}
			target, ok := docs[l.file]
			if !ok {
				if !strings.HasSuffix(l.file, ".md") {
					t.Errorf("%s:%d: link %q: an anchor into %s, which is not Markdown", f, l.line, l.target, l.file)
					continue
				}
				target = readDoc(t, l.file)
				docs[l.file] = target
			}
			if !target.anchors[l.anchor] {
				t.Errorf("%s:%d: link %q: %s has no heading with anchor #%s", f, l.line, l.target, l.file, l.anchor)
			}
		}
	}

	indexed := map[string]bool{}
	for _, l := range docs["docs/README.md"].links(t) {
		indexed[l.file] = true
	}
	for _, f := range files {
		if strings.HasPrefix(f, "docs/") && f != "docs/README.md" && !indexed[f] {
			t.Errorf("docs/README.md does not link %s: a guide missing from the index", f)
		}
	}
}

func TestAnchor(t *testing.T) {
	for heading, want := range map[string]string{
		"Using it from Go: the execution lifecycle":    "using-it-from-go-the-execution-lifecycle",
		"A worker runtime: package `runner`":           "a-worker-runtime-package-runner",
		"Writing a plug-in (a scanner and its items)":  "writing-a-plug-in-a-scanner-and-its-items",
		"Embedding in an app that already runs River":  "embedding-in-an-app-that-already-runs-river",
		"The [execution view](view.md), `/ff/` & more": "the-execution-view-ff--more",
	} {
		if got := anchor(heading); got != want {
			t.Errorf("anchor(%q) = %q, want %q", heading, got, want)
		}
	}
}

// shellCommand is one command line the README or a guide shows.
type shellCommand struct {
	file string
	line int
	text string
	args []string // the words after the command: flags, subcommands, targets
	name string   // make, ffctl, ffscheduler or ffworker
}

// docCommands returns the make and binary command lines of d's shell code
// blocks and of its inline code that starts with one.
func docCommands(t *testing.T, d *mdDoc) []shellCommand {
	t.Helper()
	var out []shellCommand
	add := func(n int, text string) {
		// Only lines that start like a command are split into words: a code
		// block without an info string may hold a tree or program output.
		fields := strings.Fields(text)
		for len(fields) > 0 && isAssignment(fields[0]) {
			fields = fields[1:]
		}
		if len(fields) == 0 || !slices.Contains([]string{"make", "go", "ffctl", "ffscheduler", "ffworker"},
			strings.TrimPrefix(strings.TrimPrefix(fields[0], "./"), "bin/")) {
			return
		}
		words, err := shellWords(text)
		if err != nil {
			t.Errorf("%s:%d: %q: %v", d.path, n, text, err)
			return
		}
		for len(words) > 0 && isAssignment(words[0]) {
			words = words[1:] // DEMO_DURATION=30s make demo
		}
		if len(words) == 0 {
			return
		}
		name, args := words[0], words[1:]
		if name == "go" && len(words) >= 3 && words[1] == "run" && strings.HasPrefix(words[2], "./cmd/") {
			name, args = strings.TrimPrefix(words[2], "./cmd/"), words[3:]
		}
		name = strings.TrimPrefix(strings.TrimPrefix(name, "./"), "bin/")
		switch name {
		case "make", "ffctl", "ffscheduler", "ffworker":
			out = append(out, shellCommand{file: d.path, line: n, text: text, args: args, name: name})
		}
	}
	for _, b := range d.blocks {
		switch b.info {
		case "sh", "bash", "shell", "console", "":
		default:
			continue
		}
		for _, l := range b.lines {
			add(l.n, l.text)
		}
	}
	for _, l := range d.prose {
		for _, span := range codeSpanRe.FindAllString(l.text, -1) {
			add(l.n, strings.Trim(span, "`"))
		}
	}
	return out
}

func isAssignment(word string) bool {
	name, _, ok := strings.Cut(word, "=")
	return ok && name != "" && !strings.HasPrefix(name, "-")
}

// shellWords splits a command line into words as a shell would for the
// documents' lines: quotes grouped, a comment (" #…") dropped, nothing
// expanded.
func shellWords(line string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord := false
	var quote rune
	for _, r := range line {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				w.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == '#' && !inWord:
			return words, nil
		case unicode.IsSpace(r):
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		default:
			w.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, errors.New("unterminated quote")
	}
	if inWord {
		words = append(words, w.String())
	}
	return words, nil
}

// makeTargets returns the Makefile's targets.
func makeTargets(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("Makefile")
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	re := regexp.MustCompile(`^([A-Za-z0-9_][A-Za-z0-9_.-]*(?:\s+[A-Za-z0-9_][A-Za-z0-9_.-]*)*)\s*:([^=]|$)`)
	for _, line := range strings.Split(string(b), "\n") {
		if m := re.FindStringSubmatch(line); m != nil {
			for _, name := range strings.Fields(m[1]) {
				targets[name] = true
			}
		}
	}
	return targets
}

// TestDocCommandsExist: every make target the README and the guides name is
// in the Makefile, and every ffctl, ffscheduler and ffworker command line
// they show names a subcommand the binary has and only flags that
// subcommand's --help lists.
func TestDocCommandsExist(t *testing.T) {
	var cmds []shellCommand
	for _, f := range docFiles(t) {
		cmds = append(cmds, docCommands(t, readDoc(t, f))...)
	}
	targets := makeTargets(t)
	binaries := map[string]bool{}
	for _, c := range cmds {
		if c.name == "make" {
			for _, a := range c.args {
				if strings.HasPrefix(a, "-") || isAssignment(a) {
					continue
				}
				if !targets[a] {
					t.Errorf("%s:%d: %q: the Makefile has no target %q", c.file, c.line, c.text, a)
				}
			}
			continue
		}
		binaries[c.name] = true
	}
	if !targets["demo"] || !targets["test"] {
		t.Errorf("the Makefile lacks demo or test, the README's two commands")
	}
	if len(binaries) == 0 {
		t.Fatal("the README and the guides show no command line of ffctl, ffscheduler or ffworker")
	}

	bins, err := testproc.Build(t.Context(), t.TempDir(), slices.Sorted(func(yield func(string) bool) {
		for name := range binaries {
			if !yield(name) {
				return
			}
		}
	})...)
	if err != nil {
		t.Fatal(err)
	}
	help := map[string]string{} // by command path, "ffctl exec list"
	helpOf := func(name string, path []string) (string, error) {
		key := strings.Join(append([]string{name}, path...), " ")
		if h, ok := help[key]; ok {
			return h, nil
		}
		cmd := exec.CommandContext(t.Context(), bins[name], append(slices.Clone(path), "--help")...)
		cmd.Env = testproc.Env()
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("%s --help: %v: %s", key, err, strings.TrimSpace(out.String()))
		}
		help[key] = out.String()
		return out.String(), nil
	}

	for _, c := range cmds {
		if c.name == "make" {
			continue
		}
		// ffctl's subcommand, and its own subcommand where it has some
		// (ffctl exec list); ffscheduler and ffworker have none.
		var path []string
		if c.name == "ffctl" {
			for _, a := range c.args {
				if strings.HasPrefix(a, "-") {
					break
				}
				path = append(path, a)
			}
			if len(path) > 2 {
				path = path[:2] // the rest are arguments: ffctl exec get ID
			}
			if len(path) == 2 {
				h, err := helpOf(c.name, path[:1])
				if err != nil {
					t.Errorf("%s:%d: %q: %v", c.file, c.line, c.text, err)
					continue
				}
				if !strings.Contains(h, "\nSubcommands:") {
					path = path[:1]
				}
			}
		}
		h, err := helpOf(c.name, path)
		if err != nil {
			t.Errorf("%s:%d: %q: %v", c.file, c.line, c.text, err)
			continue
		}
		for _, a := range c.args {
			if !strings.HasPrefix(a, "--") || a == "--help" {
				continue
			}
			flag, _, _ := strings.Cut(a, "=")
			if !regexp.MustCompile(`(?m)^\s+` + regexp.QuoteMeta(flag) + `(\s|$)`).MatchString(h) {
				t.Errorf("%s:%d: %q: %s does not accept %s",
					c.file, c.line, c.text, strings.Join(append([]string{c.name}, path...), " "), flag)
			}
		}
	}
	t.Logf("%d command lines checked against the Makefile and %d --help texts", len(cmds), len(help))
}
