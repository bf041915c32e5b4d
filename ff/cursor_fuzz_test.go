package ff_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/ffriver/ffriver/ff"
)

var cursorSeeds = []ff.Cursor{
	{},
	{Xact: 1, EventID: 1},
	{Xact: 3202, EventID: 4},
	{Xact: 1<<63 - 1, EventID: 1<<63 - 1},
	{EventID: 42, Legacy: true},
	{EventID: 0, Legacy: true},
	{EventID: 1<<63 - 1, Legacy: true},
}

// checkRoundTrip fails unless c survives every encoding unchanged.
func checkRoundTrip(t *testing.T, c ff.Cursor) {
	t.Helper()
	if c.Xact < 0 || c.EventID < 0 || (c.Legacy && c.Xact != 0) {
		t.Fatalf("decoded an impossible cursor %#v", c)
	}
	if got, err := ff.DecodeCursor(c.Bytes()); err != nil || got != c {
		t.Fatalf("DecodeCursor(Bytes(%#v)) = %#v, %v", c, got, err)
	}
	if got, err := ff.ParseCursor(c.String()); err != nil || got != c {
		t.Fatalf("ParseCursor(String(%#v)) = %#v, %v", c, got, err)
	}
	text, err := c.MarshalText()
	if err != nil {
		t.Fatal(err)
	}
	var got ff.Cursor
	if err := got.UnmarshalText(text); err != nil || got != c {
		t.Fatalf("UnmarshalText(MarshalText(%#v)) = %#v, %v", c, got, err)
	}
}

func FuzzParseCursor(f *testing.F) {
	for _, c := range cursorSeeds {
		f.Add(c.String())
		f.Add(strings.ToUpper(c.String()))
	}
	for _, s := range []string{"", " ", "zz", "0", "03", "02", "0300", "04" + strings.Repeat("0", 32),
		" 020000000000000001\n", "03ffffffffffffffff0000000000000001", "020000000000000001ff", "0x02", "é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := ff.ParseCursor(s)
		if err != nil {
			if !errors.Is(err, ff.ErrValidation) {
				t.Fatalf("ParseCursor(%q): %v is not a validation error", s, err)
			}
			return
		}
		checkRoundTrip(t, c)
		// A non-empty printable form is canonical up to case and spaces.
		if trimmed := strings.ToLower(strings.TrimSpace(s)); trimmed != "" && c.String() != trimmed {
			t.Fatalf("ParseCursor(%q) = %#v, which prints as %q", s, c, c.String())
		}
	})
}

func FuzzDecodeCursor(f *testing.F) {
	for _, c := range cursorSeeds {
		f.Add(c.Bytes())
	}
	for _, b := range [][]byte{nil, {0}, {2}, {3}, {1, 2, 3}, bytes.Repeat([]byte{0xff}, 17), bytes.Repeat([]byte{0xff}, 9),
		append([]byte{3}, make([]byte, 17)...)} {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ff.DecodeCursor(b)
		if err != nil {
			if !errors.Is(err, ff.ErrValidation) {
				t.Fatalf("DecodeCursor(%x): %v is not a validation error", b, err)
			}
			return
		}
		checkRoundTrip(t, c)
		if len(b) > 0 && !bytes.Equal(c.Bytes(), b) {
			t.Fatalf("DecodeCursor(%x) = %#v, which encodes as %x", b, c, c.Bytes())
		}
	})
}
