package executions

import (
	"strconv"
	"strings"

	"github.com/ffriver/ffriver/ff"
	"github.com/google/uuid"
)

// ListCursor is a position in List's order (created_at_ms, partition,
// execution id, all descending): ListParams.After lists what comes after
// it.
type ListCursor struct {
	CreatedAtMs int64
	Partition   int16
	UUID        uuid.UUID
}

// ListCursorOf is the position of e in List's order: pass it as
// ListParams.After for the page after e.
func ListCursorOf(e *Execution) *ListCursor {
	return &ListCursor{CreatedAtMs: e.CreatedAtMs, Partition: e.ID.Partition, UUID: e.ID.UUID}
}

// String is the cursor's text form, "<created_at_ms>.<partition>.<uuid>",
// which ParseListCursor reads.
func (c ListCursor) String() string {
	return strconv.FormatInt(c.CreatedAtMs, 10) + "." + strconv.Itoa(int(c.Partition)) + "." + c.UUID.String()
}

// ParseListCursor reads ListCursor.String's form.
func ParseListCursor(s string) (*ListCursor, error) {
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		return nil, ff.Validationf("after", "%s: want <created_at_ms>.<partition>.<uuid>", ff.Excerpt(s))
	}
	ms, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil || ms < 0 {
		return nil, ff.Validationf("after", "%s: %s is not a time in milliseconds", ff.Excerpt(s), ff.Excerpt(parts[0]))
	}
	p, err := strconv.ParseInt(parts[1], 10, 16)
	if err != nil || p < 0 || p >= ff.MaxPartitions {
		return nil, ff.Validationf("after", "%s: %s is not a partition number", ff.Excerpt(s), ff.Excerpt(parts[1]))
	}
	u, err := uuid.Parse(parts[2])
	if err != nil || len(parts[2]) != 36 {
		return nil, ff.Validationf("after", "%s: %s is not a UUID", ff.Excerpt(s), ff.Excerpt(parts[2]))
	}
	return &ListCursor{CreatedAtMs: ms, Partition: int16(p), UUID: u}, nil
}

// MinIDPrefix is the fewest hexadecimal digits of a UUID an id prefix
// without a partition may give: 4 digits narrow a list to one execution in
// 65,536, about 15 of a million, read through the primary key of each
// partition.
const MinIDPrefix = 4

// IDPrefix selects the executions whose id begins with a prefix: the range
// Low..High of UUIDs, in Partition when one was given.
type IDPrefix struct {
	Partition *int16
	Low, High uuid.UUID
}

// IsZero reports whether p selects everything (the zero IDPrefix).
func (p IDPrefix) IsZero() bool { return p.Partition == nil && p.Low == uuid.Nil && p.High == uuid.Nil }

// ParseIDPrefix reads an execution id or a prefix of one:
//
//   - "{fp:N}:<uuid>", a whole id: that execution;
//   - "{fp:N}:<hex>", a partition and the beginning of a UUID (any
//     length, dashes where the UUID has them or none);
//   - "<hex>", the beginning of a UUID in any partition: at least
//     MinIDPrefix hexadecimal digits.
//
// Letters are matched without regard to case.
func ParseIDPrefix(s string) (IDPrefix, error) {
	var out IDPrefix
	rest := strings.TrimSpace(s)
	if strings.HasPrefix(rest, "{fp:") {
		end := strings.Index(rest, "}:")
		if end < 0 {
			return IDPrefix{}, ff.Validationf("id", "%s: want {fp:N}:<uuid or its beginning>", ff.Excerpt(s))
		}
		n, err := strconv.ParseUint(rest[len("{fp:"):end], 10, 16)
		if err != nil || n >= ff.MaxPartitions {
			return IDPrefix{}, ff.Validationf("id", "%s: %s is not a partition number in 0..%d", ff.Excerpt(s), ff.Excerpt(rest[len("{fp:"):end]), ff.MaxPartitions-1)
		}
		p := int16(n)
		out.Partition = &p
		rest = rest[end+2:]
	}
	hex := strings.ToLower(strings.ReplaceAll(rest, "-", ""))
	if len(hex) > 32 || strings.Trim(hex, "0123456789abcdef") != "" {
		return IDPrefix{}, ff.Validationf("id", "%s: %s is not the beginning of a UUID (hexadecimal digits and dashes)", ff.Excerpt(s), ff.Excerpt(rest))
	}
	if out.Partition == nil && len(hex) < MinIDPrefix {
		return IDPrefix{}, ff.Validationf("id", "%s: give at least %d hexadecimal digits of the UUID, or {fp:N}: before them", ff.Excerpt(s), MinIDPrefix)
	}
	var err error
	if out.Low, err = uuid.Parse(pad(hex, '0')); err != nil {
		return IDPrefix{}, ff.Validationf("id", "%s: %v", ff.Excerpt(s), err)
	}
	if out.High, err = uuid.Parse(pad(hex, 'f')); err != nil {
		return IDPrefix{}, ff.Validationf("id", "%s: %v", ff.Excerpt(s), err)
	}
	return out, nil
}

// pad fills 32 hexadecimal digits with c and dashes them as a UUID.
func pad(hex string, c byte) string {
	h := hex + strings.Repeat(string(c), 32-len(hex))
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
