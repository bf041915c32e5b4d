package subscribe

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/ffriver/ffriver/ff"
)

var cursorSeeds = []Cursor{
	{},
	{Xact: 1, EventID: 1},
	{Xact: 3202, EventID: 4},
	{Xact: 1<<63 - 1, EventID: 1<<63 - 1},
	{EventID: 42, Legacy: true},
	{EventID: 0, Legacy: true},
	{EventID: 1<<63 - 1, Legacy: true},
	newBatch(snapshot{Xmin: 1, Xmax: 1}, snapshot{Xmin: 740, Xmax: 760, Xip: []int64{740, 755}, Tick: 3}).Cursor(0, 0),
	newBatch(snapshot{Xmin: 700, Xmax: 745, Xip: []int64{700, 744}, Tick: 1 << 40}, snapshot{Xmin: 700, Xmax: 760, Xip: []int64{700}, Tick: 1<<40 + 1}).Cursor(744, 12),
	newBatch(snapshot{Xmin: 5, Xmax: 5}, snapshot{Xmin: 5, Xmax: 5}).Cursor(5, 1<<63-1),
	newBatch(snapshot{Xmin: 700, Xmax: 745, Xip: []int64{700, 744}, Tick: 1}, snapshot{Xmin: 700, Xmax: 760, Tick: 2}).
		WithOrigin(Origin{Stream: StreamLeases, Schema: "app"}).Cursor(744, 12),
	newBatch(snapshot{Xmin: 5, Xmax: 5}, snapshot{Xmin: 5, Xmax: 9}).
		WithOrigin(Origin{Stream: StreamCompletions, Schema: strings.Repeat("s", maxSchemaName)}).Cursor(0, 0),
}

// checkRoundTrip fails unless c survives every encoding unchanged.
func checkRoundTrip(t *testing.T, c Cursor) {
	t.Helper()
	if c.Xact < 0 || c.EventID < 0 || (c.Legacy && c.Xact != 0) {
		t.Fatalf("decoded an impossible cursor %#v", c)
	}
	if got, err := DecodeCursor(c.Bytes()); err != nil || got != c {
		t.Fatalf("DecodeCursor(Bytes(%#v)) = %#v, %v", c, got, err)
	}
	if got, err := ParseCursor(c.String()); err != nil || got != c {
		t.Fatalf("ParseCursor(String(%#v)) = %#v, %v", c, got, err)
	}
	text, err := c.MarshalText()
	if err != nil {
		t.Fatal(err)
	}
	var got Cursor
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
		c, err := ParseCursor(s)
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
		append([]byte{3}, make([]byte, 17)...), {4}, {4, 0, 0, 0, 0, 0, 0, 0, 0}, {4, 0x80, 0, 0, 0, 0, 0, 0, 0, 0},
		{4, 1, 1, 0, 5, 0, 3, 0, 0, 0, 0}, {4, 2, 7, 9, 5, 0, 0, 9, 5, 0, 0}, {5}, {5, 1}, {5, 3, 1, 'a', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
		{5, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, {5, 2, 1, 'a', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, {5, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}} {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeCursor(b)
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

// TestCursorOrigin: a batch cursor records the stream and schema it was
// taken from, through every encoding; the older forms record none.
func TestCursorOrigin(t *testing.T) {
	o := Origin{Stream: StreamCompletions, Schema: "tenant_app"}
	b := newBatch(snapshot{Xmin: 10, Xmax: 12, Xip: []int64{11}}, snapshot{Xmin: 12, Xmax: 14})
	c := b.WithOrigin(o).Cursor(11, 3)
	checkRoundTrip(t, c)
	if !strings.HasPrefix(c.String(), "05") {
		t.Errorf("a cursor with an origin prints as %s, want prefix 05", c)
	}
	parsed, err := ParseCursor(c.String())
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := parsed.Origin(); !ok || got != o {
		t.Errorf("Origin() = %v, %t; want %v", got, ok, o)
	}
	if bb, _ := parsed.batchOf(); bb.Cursor(0, 0) != b.WithOrigin(o).Cursor(0, 0) {
		t.Errorf("the batch of a cursor loses its origin")
	}
	// Same position, same order, whatever the origin says.
	plain := b.Cursor(11, 3)
	if plain.Less(c) || c.Less(plain) {
		t.Errorf("origins take part in the order")
	}
	for _, old := range []Cursor{plain, {Xact: 5, EventID: 2}, {EventID: 9, Legacy: true}} {
		got, err := ParseCursor(old.String())
		if err != nil {
			t.Fatalf("an old cursor %s no longer parses: %v", old, err)
		}
		if _, ok := got.Origin(); ok || got != old {
			t.Errorf("ParseCursor(%s) = %#v, want %#v without an origin", old, got, old)
		}
	}
	for _, bad := range []Origin{{Stream: "events", Schema: "app"}, {Stream: StreamLeases}, {Stream: StreamLeases, Schema: strings.Repeat("s", 64)}} {
		if err := bad.Validate(); !errors.Is(err, ff.ErrValidation) {
			t.Errorf("%#v.Validate() = %v, want a validation error", bad, err)
		}
	}
}

func TestSnapshotVisible(t *testing.T) {
	s, err := parseSnapshot("100:110:100,104")
	if err != nil {
		t.Fatal(err)
	}
	for x, want := range map[int64]bool{99: true, 100: false, 101: true, 104: false, 109: true, 110: false, 200: false} {
		if got := s.Visible(x); got != want {
			t.Errorf("Visible(%d) = %t, want %t", x, got, want)
		}
	}
	if s.String() != "100:110:100,104" {
		t.Errorf("String() = %q", s.String())
	}
	for _, bad := range []string{"", "1:2", "5:4:", "1:5:7", "1:5:3,3", "a:b:"} {
		if _, err := parseSnapshot(bad); !errors.Is(err, ff.ErrValidation) {
			t.Errorf("ParseSnapshot(%q) = %v, want a validation error", bad, err)
		}
	}
}

func TestBatchCursorOrder(t *testing.T) {
	s1 := snapshot{Xmin: 100, Xmax: 110, Xip: []int64{100, 104}}
	s2 := snapshot{Xmin: 100, Xmax: 110, Xip: []int64{100}}
	s3 := snapshot{Xmin: 120, Xmax: 120}
	b1, b2 := newBatch(s1, s2), newBatch(s2, s3)
	order := []Cursor{b1.Cursor(0, 0), b1.Cursor(104, 3), b1.Cursor(104, 9), b2.Cursor(100, 1), b2.Cursor(115, 2)}
	for i := range order {
		for j := range order {
			if got, want := order[i].Less(order[j]), i < j; got != want {
				t.Errorf("%#v.Less(%#v) = %t, want %t", order[i], order[j], got, want)
			}
		}
		checkRoundTrip(t, order[i])
	}
	if from, to := b2.Snapshots(); !from.Equal(s2) || !to.Equal(s3) {
		t.Errorf("Snapshots() = %s, %s", from, to)
	}
}
