package subscribe

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/ffriver/ffriver/ff"
)

// Cursor is a position in an outbox stream: everything at or before it has
// been seen. See package subscribe for the order streams deliver in.
//
// A stream delivers events in batches, as PgQ does: a batch is every event
// whose writing transaction is visible in a newer snapshot and was not
// visible in the older one, and inside a batch events come in (Xact,
// EventID) order. A stream's cursors carry the batch (the pair of
// snapshots) and the position inside it, so a resumed stream
// re-derives exactly the same batch and carries on after the position.
//
// A stream's cursors also record where they were taken from (Origin: the
// stream and the schema), so that a stream can refuse a cursor of another
// one instead of reading on from a position that means nothing to it.
//
// Older forms still decode and work as starting points: batch cursors
// without an origin (prefix 04, written before cursors recorded one), the
// ffriver v1 form (Xact and EventID only, from the horizon-based streams;
// everything in (Xact, EventID) order at or before it was seen) and the
// upstream 9-byte form (Legacy, an event id only). None of them records an
// origin, so any stream accepts them, as it always did.
//
// A Cursor is opaque to users: store its Bytes or its String and hand either
// back to resume. The zero Cursor is the position before every event.
// Cursors compare with ==: equal cursors are the same position.
type Cursor struct {
	// Xact is the writing transaction's id (pg_current_xact_id()).
	Xact int64
	// EventID is the outbox row's event_id.
	EventID int64
	// Legacy is true for a cursor decoded from the upstream 9-byte form,
	// which carries only an event id.
	Legacy bool
	// batch is the encoded snapshot pair of a batch cursor; "" for the
	// older forms. A string keeps Cursor comparable and lets every event of
	// a batch share one encoding.
	batch string
	// origin is the stream the cursor was taken from; zero when it does not
	// say (the older forms).
	origin Origin
}

const (
	cursorTagLegacy = 0x02 // upstream: 0x02 ‖ event_id i64 BE
	cursorTagV1     = 0x03 // ffriver v1: 0x03 ‖ xact i64 BE ‖ event_id i64 BE
	cursorTagBatch  = 0x04 // ffriver v2: 0x04 ‖ uvarint xact ‖ uvarint event_id ‖ snapshot pair
	// ffriver v3: 0x05 ‖ stream byte ‖ uvarint len(schema) ‖ schema ‖ the v2
	// form after its prefix.
	cursorTagOrigin = 0x05
)

// streamCodes are the stream bytes of the v3 cursor form; 0 is none.
var streamCodes = [...]string{1: StreamLeases, 2: StreamCompletions}

// maxSchemaName is the longest schema name, in bytes (Postgres's
// NAMEDATALEN - 1).
const maxSchemaName = 63

// Origin says which stream a cursor was taken from: the outbox stream and
// the schema holding it. A stream refuses a cursor taken from another (see
// package subscribe); the zero Origin says nothing, as cursors of the older
// forms do.
type Origin struct {
	// Stream is StreamLeases or StreamCompletions.
	Stream string
	// Schema is the schema's name, as Postgres spells it.
	Schema string
}

// String describes o for messages: the leases stream of schema "app".
func (o Origin) String() string {
	if o == (Origin{}) {
		return "an unknown stream"
	}
	return fmt.Sprintf("the %s stream of schema %q", o.Stream, o.Schema)
}

// Validate checks that o names a stream and a schema name Postgres can
// hold; errors match ff.ErrValidation.
func (o Origin) Validate() error {
	if streamCode(o.Stream) == 0 {
		return ff.Validationf("stream", "%s: want %q or %q", ff.Excerpt(o.Stream), StreamLeases, StreamCompletions)
	}
	return ff.CheckText("schema", o.Schema, true, maxSchemaName)
}

func streamCode(s string) byte {
	for i, name := range streamCodes {
		if i > 0 && name == s {
			return byte(i)
		}
	}
	return 0
}

// IsZero reports whether c is the position before every event.
func (c Cursor) IsZero() bool { return c == Cursor{} }

// batchOf returns the snapshot pair of a batch cursor; ok is false for the
// older forms.
func (c Cursor) batchOf() (b batch, ok bool) {
	if c.batch == "" {
		return batch{}, false
	}
	return batch{enc: c.batch, origin: c.origin}, true
}

// Origin returns the stream the cursor was taken from; ok is false for a
// cursor that does not say (one of the older forms).
func (c Cursor) Origin() (o Origin, ok bool) { return c.origin, c.origin != (Origin{}) }

// Bytes returns the opaque binary form.
func (c Cursor) Bytes() []byte {
	switch {
	case c.Legacy:
		b := make([]byte, 9)
		b[0] = cursorTagLegacy
		binary.BigEndian.PutUint64(b[1:], uint64(c.EventID))
		return b
	case c.batch != "":
		b := make([]byte, 0, 3+len(c.origin.Schema)+2*binary.MaxVarintLen64+len(c.batch))
		if c.origin != (Origin{}) {
			b = append(b, cursorTagOrigin, streamCode(c.origin.Stream))
			b = binary.AppendUvarint(b, uint64(len(c.origin.Schema)))
			b = append(b, c.origin.Schema...)
		} else {
			b = append(b, cursorTagBatch)
		}
		b = binary.AppendUvarint(b, uint64(c.Xact))
		b = binary.AppendUvarint(b, uint64(c.EventID))
		return append(b, c.batch...)
	default:
		b := make([]byte, 17)
		b[0] = cursorTagV1
		binary.BigEndian.PutUint64(b[1:], uint64(c.Xact))
		binary.BigEndian.PutUint64(b[9:], uint64(c.EventID))
		return b
	}
}

// String returns the printable form: the binary form in lowercase hex.
func (c Cursor) String() string { return hex.EncodeToString(c.Bytes()) }

// Less reports whether c is strictly before d in stream order. Both must
// come from the same stream (batch cursors of one server, or v1 cursors);
// legacy cursors are not ordered. Origins are not compared.
func (c Cursor) Less(d Cursor) bool {
	if c.batch != d.batch && c.batch != "" && d.batch != "" {
		_, ct := batch{enc: c.batch}.Snapshots()
		_, dt := batch{enc: d.batch}.Snapshots()
		if !ct.Equal(dt) {
			return ct.Before(dt)
		}
	}
	if c.Xact != d.Xact {
		return c.Xact < d.Xact
	}
	return c.EventID < d.EventID
}

// cursorHelp ends every error about a malformed cursor: what a cursor is
// and what to do instead.
const cursorHelp = "; a cursor is the hex position a stream gives with each event (ffctl tail prints it, " +
	"Stream.Cursor returns it): resume from one of those, or start from the beginning or from a time (ffctl tail --from-start or --since)"

// explainCursor adds cursorHelp to a malformed cursor's validation error.
func explainCursor(err error) error {
	var ve *ff.ValidationError
	if errors.As(err, &ve) && ve.Field == "cursor" {
		return &ff.ValidationError{Field: "cursor", Reason: "not a stream cursor: " + ve.Reason + cursorHelp}
	}
	return err
}

// DecodeCursor decodes the binary form (any of the four). An empty slice
// decodes to the zero Cursor; callers that must not start from "now" by
// accident reject empty input themselves. An error says what is wrong
// with b, what a cursor is and what to do instead.
func DecodeCursor(b []byte) (Cursor, error) {
	c, err := decodeCursor(b)
	return c, explainCursor(err)
}

func decodeCursor(b []byte) (Cursor, error) {
	switch {
	case len(b) == 0:
		return Cursor{}, nil
	case b[0] == cursorTagBatch:
		return decodeBatchCursor(b)
	case b[0] == cursorTagOrigin:
		return decodeOriginCursor(b)
	case b[0] == cursorTagV1 && len(b) == 17:
		c := Cursor{Xact: int64(binary.BigEndian.Uint64(b[1:])), EventID: int64(binary.BigEndian.Uint64(b[9:]))}
		if c.Xact < 0 || c.EventID < 0 {
			return Cursor{}, ff.Validationf("cursor", "negative position")
		}
		return c, nil
	case b[0] == cursorTagLegacy && len(b) == 9:
		c := Cursor{EventID: int64(binary.BigEndian.Uint64(b[1:])), Legacy: true}
		if c.EventID < 0 {
			return Cursor{}, ff.Validationf("cursor", "negative event id")
		}
		return c, nil
	case b[0] == cursorTagV1 || b[0] == cursorTagLegacy:
		return Cursor{}, ff.Validationf("cursor", "%d bytes with prefix 0x%02x: wrong length", len(b), b[0])
	default:
		return Cursor{}, ff.Validationf("cursor", "unknown prefix 0x%02x", b[0])
	}
}

// decodeOriginCursor decodes the v3 form: the origin, then the v2 form.
func decodeOriginCursor(b []byte) (Cursor, error) {
	if len(b) < 2 || int(b[1]) >= len(streamCodes) || b[1] == 0 {
		return Cursor{}, ff.Validationf("cursor", "batch cursor: unknown stream")
	}
	o := Origin{Stream: streamCodes[b[1]]}
	r := varintReader{b: b[2:]}
	n := r.int()
	if r.err == nil && n > int64(len(r.b)) {
		r.err = fmt.Errorf("truncated schema name")
	}
	if r.err != nil {
		return Cursor{}, ff.Validationf("cursor", "batch cursor: %v", r.err)
	}
	o.Schema, r.b = string(r.b[:n]), r.b[n:]
	if err := o.Validate(); err != nil {
		return Cursor{}, ff.Validationf("cursor", "batch cursor: its origin: %v", err)
	}
	c, err := decodeBatchCursor(append([]byte{cursorTagBatch}, r.b...))
	if err != nil {
		return Cursor{}, err
	}
	c.origin = o
	if !bytes.Equal(c.Bytes(), b) {
		return Cursor{}, ff.Validationf("cursor", "batch cursor: not in canonical form")
	}
	return c, nil
}

func decodeBatchCursor(b []byte) (Cursor, error) {
	r := varintReader{b: b[1:]}
	xact, event := r.int(), r.int()
	if r.err != nil {
		return Cursor{}, ff.Validationf("cursor", "batch cursor: %v", r.err)
	}
	rest := r.b
	from, to, err := decodePair(rest)
	if err != nil {
		return Cursor{}, ff.Validationf("cursor", "batch cursor: %v", err)
	}
	bt := newBatch(from, to)
	c := bt.Cursor(xact, event)
	if !bytes.Equal(c.Bytes(), b) {
		return Cursor{}, ff.Validationf("cursor", "batch cursor: not in canonical form")
	}
	return c, nil
}

// ParseCursor parses the printable form (hex of the binary form, as String
// returns). An empty string parses to the zero Cursor.
func ParseCursor(s string) (Cursor, error) {
	s = strings.TrimSpace(s)
	b, err := hex.DecodeString(s)
	if err != nil {
		return Cursor{}, explainCursor(ff.Validationf("cursor", "%q is not hex: %v", truncate(s, 40), err))
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
	if b, ok := c.batchOf(); ok {
		from, to := b.Snapshots()
		origin := ""
		if o, ok := c.Origin(); ok {
			origin = fmt.Sprintf(", Origin:%s/%s", o.Stream, o.Schema)
		}
		return fmt.Sprintf("subscribe.Cursor{Batch:%s→%s, Xact:%d, EventID:%d%s}", from, to, c.Xact, c.EventID, origin)
	}
	return fmt.Sprintf("subscribe.Cursor{Xact:%d, EventID:%d, Legacy:%t}", c.Xact, c.EventID, c.Legacy)
}

// snapshot is a transaction snapshot as Postgres's pg_current_snapshot()
// returns it: every transaction id below Xmin had finished, none at or
// above Xmax had started, and Xip lists those in between still running
// (ascending). Tick numbers the stream tick that recorded it (see package
// subscribe); 0 when none did.
type snapshot struct {
	Xmin, Xmax int64
	Xip        []int64
	Tick       int64
}

// Visible reports whether transaction x had finished (committed or aborted)
// when s was taken: its rows, if it committed, are visible in s.
func (s snapshot) Visible(x int64) bool {
	if x < s.Xmin {
		return true
	}
	if x >= s.Xmax {
		return false
	}
	_, found := slices.BinarySearch(s.Xip, x)
	return !found
}

// Equal reports whether s and t are the same snapshot (ticks aside).
func (s snapshot) Equal(t snapshot) bool {
	return s.Xmin == t.Xmin && s.Xmax == t.Xmax && slices.Equal(s.Xip, t.Xip)
}

// Before reports whether s sees fewer finished transactions than t, for two
// snapshots of one server (one is then contained in the other).
func (s snapshot) Before(t snapshot) bool {
	if s.Xmax != t.Xmax {
		return s.Xmax < t.Xmax
	}
	return len(s.Xip) > len(t.Xip)
}

// String returns Postgres's text form, xmin:xmax:xip1,xip2.
func (s snapshot) String() string {
	var b strings.Builder
	b.WriteString(strconv.FormatInt(s.Xmin, 10))
	b.WriteByte(':')
	b.WriteString(strconv.FormatInt(s.Xmax, 10))
	b.WriteByte(':')
	for i, x := range s.Xip {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(x, 10))
	}
	return b.String()
}

// parseSnapshot parses Postgres's text form of a pg_snapshot.
func parseSnapshot(text string) (snapshot, error) {
	parts := strings.Split(strings.TrimSpace(text), ":")
	if len(parts) != 3 {
		return snapshot{}, ff.Validationf("snapshot", "%q: want xmin:xmax:xip", truncate(text, 40))
	}
	var s snapshot
	var err error
	if s.Xmin, err = strconv.ParseInt(parts[0], 10, 64); err != nil {
		return snapshot{}, ff.Validationf("snapshot", "%q: xmin: %v", truncate(text, 40), err)
	}
	if s.Xmax, err = strconv.ParseInt(parts[1], 10, 64); err != nil {
		return snapshot{}, ff.Validationf("snapshot", "%q: xmax: %v", truncate(text, 40), err)
	}
	if parts[2] != "" {
		for f := range strings.SplitSeq(parts[2], ",") {
			x, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				return snapshot{}, ff.Validationf("snapshot", "%q: xip: %v", truncate(text, 40), err)
			}
			s.Xip = append(s.Xip, x)
		}
	}
	slices.Sort(s.Xip)
	if err := s.check(); err != nil {
		return snapshot{}, ff.Validationf("snapshot", "%q: %v", truncate(text, 40), err)
	}
	return s, nil
}

func (s snapshot) check() error {
	if s.Xmin < 0 || s.Xmax < s.Xmin {
		return fmt.Errorf("xmin %d, xmax %d out of order", s.Xmin, s.Xmax)
	}
	for i, x := range s.Xip {
		if x < s.Xmin || x >= s.Xmax || (i > 0 && x <= s.Xip[i-1]) {
			return fmt.Errorf("in-progress ids must be ascending within [xmin, xmax)")
		}
	}
	return nil
}

// batch is the span of a stream between two snapshots, From and To: the
// transactions visible in To and not in From. Every committed transaction
// falls in exactly one batch of a chain of snapshots, which is what makes a
// stream of batches exactly-once. A batch is immutable and cheap to copy.
// A batch's cursors record its origin (WithOrigin), if it has one.
type batch struct {
	enc    string
	origin Origin
}

// newBatch returns the batch between from and to. to must not be older
// than from.
func newBatch(from, to snapshot) batch {
	b := appendSnapshot(nil, from, snapshot{})
	b = appendSnapshot(b, to, from)
	return batch{enc: string(b)}
}

// WithOrigin returns b whose cursors record that they were taken from o,
// which must be valid (Origin.Validate); the zero Origin records nothing.
func (b batch) WithOrigin(o Origin) batch {
	b.origin = o
	return b
}

// Snapshots returns the batch's two snapshots.
func (b batch) Snapshots() (from, to snapshot) {
	from, to, _ = decodePair([]byte(b.enc))
	return from, to
}

// Cursor returns the position after the event (xact, eventID) of the batch.
// Cursor(0, 0) is the position before the batch's first event.
func (b batch) Cursor(xact, eventID int64) Cursor {
	return Cursor{Xact: xact, EventID: eventID, batch: b.enc, origin: b.origin}
}

// appendSnapshot encodes s relative to base (the zero snapshot for the
// first of a pair): tick, xmin delta, xmax-xmin, count, xip deltas, as
// uvarints.
func appendSnapshot(b []byte, s, base snapshot) []byte {
	b = binary.AppendUvarint(b, uint64(s.Tick))
	b = binary.AppendUvarint(b, uint64(s.Xmin-base.Xmin))
	b = binary.AppendUvarint(b, uint64(s.Xmax-s.Xmin))
	b = binary.AppendUvarint(b, uint64(len(s.Xip)))
	prev := s.Xmin
	for _, x := range s.Xip {
		b = binary.AppendUvarint(b, uint64(x-prev))
		prev = x
	}
	return b
}

func decodePair(b []byte) (from, to snapshot, err error) {
	r := varintReader{b: b}
	from = r.snapshot(snapshot{})
	to = r.snapshot(from)
	switch {
	case r.err != nil:
		return snapshot{}, snapshot{}, r.err
	case len(r.b) != 0:
		return snapshot{}, snapshot{}, fmt.Errorf("%d trailing bytes", len(r.b))
	}
	if err := from.check(); err != nil {
		return snapshot{}, snapshot{}, err
	}
	if err := to.check(); err != nil {
		return snapshot{}, snapshot{}, err
	}
	if to.Xmax < from.Xmax {
		return snapshot{}, snapshot{}, fmt.Errorf("the newer snapshot is older than the first")
	}
	return from, to, nil
}

// varintReader reads non-negative int64 uvarints, keeping the first error.
type varintReader struct {
	b   []byte
	err error
}

func (r *varintReader) int() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 || v > math.MaxInt64 {
		r.err = fmt.Errorf("truncated or overflowing number")
		return 0
	}
	r.b = r.b[n:]
	return int64(v)
}

func (r *varintReader) add(a, d int64) int64 {
	if r.err == nil && a > math.MaxInt64-d {
		r.err = fmt.Errorf("transaction id overflows")
		return 0
	}
	return a + d
}

func (r *varintReader) snapshot(base snapshot) snapshot {
	var s snapshot
	s.Tick = r.int()
	s.Xmin = r.add(base.Xmin, r.int())
	s.Xmax = r.add(s.Xmin, r.int())
	n := r.int()
	if r.err == nil && n > int64(len(r.b)) { // each id takes at least a byte
		r.err = fmt.Errorf("truncated in-progress list")
	}
	if r.err != nil {
		return snapshot{}
	}
	if n > 0 {
		s.Xip = make([]int64, n)
	}
	prev := s.Xmin
	for i := range s.Xip {
		prev = r.add(prev, r.int())
		s.Xip[i] = prev
	}
	return s
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
