package ff_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ffriver/ffriver/ff"
)

func TestCheckText(t *testing.T) {
	huge := strings.Repeat("a", 128<<10)
	for _, c := range []struct {
		name, v  string
		required bool
		want     string // "" = accepted
	}{
		{"empty optional", "", false, ""},
		{"empty required", "", true, "is required"},
		{"plain", "tenant-a", true, ""},
		{"unicode", "tenant-é-日本", true, ""},
		{"at the limit", strings.Repeat("x", ff.MaxName), true, ""},
		{"invalid utf-8", "ab\xffcd", false, `"ab\xffcd" is not valid UTF-8`},
		{"nul", "a\x00b", false, "contains a NUL byte"},
		{"too long", strings.Repeat("x", ff.MaxName+1), false, "is 256 bytes, longer than 255"},
		{"huge", huge, false, "is 131072 bytes, longer than 255"},
	} {
		err := ff.CheckText("lane", c.v, c.required, ff.MaxName)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v, want accepted", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ff.ErrValidation)):
			t.Errorf("%s: %v, want a validation error saying %q", c.name, err, c.want)
		case err != nil && len(err.Error()) > 200:
			t.Errorf("%s: the error is %d bytes long: it must quote only the value's beginning", c.name, len(err.Error()))
		}
	}
	// A multi-byte character is never cut in half.
	if got := ff.Excerpt(strings.Repeat("é", 40)); got != `"`+strings.Repeat("é", 16)+`"…` {
		t.Errorf("Excerpt = %s", got)
	}
}
