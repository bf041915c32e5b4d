package ff

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strings"
)

// Cursor is a position in an outbox stream: everything at or before it has
// been seen. Streams deliver events in commit-safe order, (Xact, EventID)
// ascending, where Xact is the id of the transaction that wrote the event;
// see package subscribe.
//
// A Cursor is opaque to users: store its Bytes or its String and hand either
// back to resume. The zero Cursor is the position before every event.
type Cursor struct {
	// Xact is the writing transaction's id (pg_current_xact_id()).
	Xact int64
	// EventID is the outbox row's event_id.
	EventID int64
	// Legacy is true for a cursor decoded from the upstream 9-byte form,
	// which carries only an event id. A stream resumes from it at the first
	// event with a larger event_id, then continues in commit-safe order.
	Legacy bool
}

const (
	cursorTagLegacy = 0x02 // upstream: 0x02 ‖ event_id i64 BE
	cursorTagV1     = 0x03 // ffriver: 0x03 ‖ xact i64 BE ‖ event_id i64 BE
)

// IsZero reports whether c is the position before every event.
func (c Cursor) IsZero() bool { return c == Cursor{} }

// Bytes returns the opaque binary form: 17 bytes, or the upstream 9-byte form
// for a legacy cursor.
func (c Cursor) Bytes() []byte {
	if c.Legacy {
		b := make([]byte, 9)
		b[0] = cursorTagLegacy
		binary.BigEndian.PutUint64(b[1:], uint64(c.EventID))
		return b
	}
	b := make([]byte, 17)
	b[0] = cursorTagV1
	binary.BigEndian.PutUint64(b[1:], uint64(c.Xact))
	binary.BigEndian.PutUint64(b[9:], uint64(c.EventID))
	return b
}

// String returns the printable form: the binary form in lowercase hex.
func (c Cursor) String() string { return hex.EncodeToString(c.Bytes()) }

// Less reports whether c is strictly before d in stream order. Both must be
// non-legacy.
func (c Cursor) Less(d Cursor) bool {
	if c.Xact != d.Xact {
		return c.Xact < d.Xact
	}
	return c.EventID < d.EventID
}

// DecodeCursor decodes the binary form (17-byte ffriver or 9-byte upstream).
// An empty slice decodes to the zero Cursor.
func DecodeCursor(b []byte) (Cursor, error) {
	switch {
	case len(b) == 0:
		return Cursor{}, nil
	case b[0] == cursorTagV1 && len(b) == 17:
		c := Cursor{Xact: int64(binary.BigEndian.Uint64(b[1:])), EventID: int64(binary.BigEndian.Uint64(b[9:]))}
		if c.Xact < 0 || c.EventID < 0 {
			return Cursor{}, Validationf("cursor", "negative position")
		}
		return c, nil
	case b[0] == cursorTagLegacy && len(b) == 9:
		c := Cursor{EventID: int64(binary.BigEndian.Uint64(b[1:])), Legacy: true}
		if c.EventID < 0 {
			return Cursor{}, Validationf("cursor", "negative event id")
		}
		return c, nil
	case b[0] == cursorTagV1 || b[0] == cursorTagLegacy:
		return Cursor{}, Validationf("cursor", "%d bytes with prefix 0x%02x: wrong length", len(b), b[0])
	default:
		return Cursor{}, Validationf("cursor", "unknown prefix 0x%02x", b[0])
	}
}

// ParseCursor parses the printable form (hex of the binary form, as String
// returns). An empty string parses to the zero Cursor.
func ParseCursor(s string) (Cursor, error) {
	s = strings.TrimSpace(s)
	b, err := hex.DecodeString(s)
	if err != nil {
		return Cursor{}, Validationf("cursor", "%q is not hex: %v", truncate(s, 40), err)
	}
	return DecodeCursor(b)
}

// MarshalText implements encoding.TextMarshaler.
func (c Cursor) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (c *Cursor) UnmarshalText(b []byte) error {
	parsed, err := ParseCursor(string(b))
	if err != nil {
		return err
	}
	*c = parsed
	return nil
}

// GoString makes cursors readable in test failures.
func (c Cursor) GoString() string {
	return fmt.Sprintf("ff.Cursor{Xact:%d, EventID:%d, Legacy:%t}", c.Xact, c.EventID, c.Legacy)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
