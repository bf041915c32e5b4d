package cli

import (
	"strings"
	"testing"
	"time"
)

// TestParseExplainsMistakes: the mistakes a newcomer makes get a message
// that says what to do: the closest flag for a misspelt one, the unit a
// bare number lacks.
func TestParseExplainsMistakes(t *testing.T) {
	env := map[string]string{"DATABASE_URL": "postgres://u@h/db"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--shema", "x"}, "not defined: --shema (did you mean --schema?)"},
		{[]string{"--log-formt", "json"}, "did you mean --log-format?"},
		{[]string{"--wait", "30"}, `invalid value "30" for flag --wait: a duration needs a unit: "30s"`},
		{[]string{"--wait=1.5"}, `"1.5s"`},
		{[]string{"--wait", "soon"}, "not a duration: want a number with a unit, such as 30s"},
		{[]string{"--count", "x"}, `invalid value "x" for flag --count: want a whole number`},
		{[]string{"-x"}, "flags are spelled --name"},
		{[]string{"-1h"}, `-1h is read as a flag: an argument that begins with '-' goes after "--" (… -- -1h)`},
	} {
		fs, _, _ := newTestFlagSet(env)
		fs.Duration("wait", time.Second, "how long to `wait`")
		fs.Int("count", 1, "how many")
		err := fs.Parse(tc.args)
		if ExitCode(err) != ExitUsage || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v; want a usage error with %q", tc.args, err, tc.want)
		}
	}
}

// TestParseFlagsAnywhere: flags may follow or surround the positional
// arguments, the single-dash spelling of a long flag still works (but not
// in a flag's value), and "--" ends the flags.
func TestParseFlagsAnywhere(t *testing.T) {
	fs, c, _ := newTestFlagSet(map[string]string{"DATABASE_URL": "postgres://u@h/db"})
	fs.ArgsUsage = "NAME ..."
	reason := fs.String("reason", "", "why")
	wait := fs.Duration("wait", 0, "how long")
	err := fs.Parse([]string{"one", "--schema", "s1", "two", "-reason", "-schema", "-wait=0", "--", "--three"})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(fs.Args(), ","); got != "one,two,--three" || c.Schema != "s1" || *reason != "-schema" || *wait != 0 || !fs.Explicit("wait") {
		t.Errorf("args %q, schema %q, reason %q, wait %v", got, c.Schema, *reason, *wait)
	}
}

// TestComplete: the completion request cobra's scripts send lists the
// flags that begin with what was typed, with their help.
func TestComplete(t *testing.T) {
	fs, _, out := newTestFlagSet(nil)
	fs.Bool("dry-run", false, "print what would be done")
	if err := fs.Parse([]string{"__complete", "--sch"}); ExitCode(err) != ExitOK {
		t.Fatalf("Parse(__complete) = %v", err)
	}
	if got := out.String(); !strings.Contains(got, "--schema\t") || strings.Contains(got, "--dry-run") {
		t.Errorf("completions of --sch:\n%s", got)
	}
}
