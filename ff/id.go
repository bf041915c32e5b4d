package ff

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/google/uuid"
)

// DefaultPartitions is the number of logical partitions a schema is migrated
// with unless told otherwise.
const DefaultPartitions = 256

// MaxPartitions is the largest partition count a schema may be migrated with;
// partition keys are stored as smallint.
const MaxPartitions = 32767

// ExecutionID identifies one execution: the logical partition it lives in and
// its UUID. Its string form is "{fp:N}:<uuid>", the upstream FlowFabric form.
//
// The zero value is not a valid id; use IsZero to test for it.
type ExecutionID struct {
	Partition int16
	UUID      uuid.UUID
}

// NewExecutionID returns an id with a random UUID (v4) in the given partition.
func NewExecutionID(partition int16) ExecutionID {
	return ExecutionID{Partition: partition, UUID: uuid.New()}
}

// IsZero reports whether id is the zero value.
func (id ExecutionID) IsZero() bool { return id.UUID == uuid.Nil && id.Partition == 0 }

// String returns the "{fp:N}:<uuid>" form.
func (id ExecutionID) String() string {
	return "{fp:" + strconv.Itoa(int(id.Partition)) + "}:" + id.UUID.String()
}

// ParseExecutionID parses the "{fp:N}:<uuid>" form. It checks the shape, that
// N is a partition number (0..32766) and that the UUID is valid; it cannot check
// N against a schema's partition count (see Partitions.Check).
func ParseExecutionID(s string) (ExecutionID, error) {
	const prefix = "{fp:"
	if !strings.HasPrefix(s, prefix) {
		return ExecutionID{}, Validationf("execution_id", "%s: want the form {fp:N}:<uuid>", Excerpt(s))
	}
	rest := s[len(prefix):]
	end := strings.Index(rest, "}:")
	if end < 0 {
		return ExecutionID{}, Validationf("execution_id", "%s: missing \"}:\" after the partition", Excerpt(s))
	}
	numStr := rest[:end]
	if numStr == "" || (len(numStr) > 1 && numStr[0] == '0') || strings.ContainsAny(numStr, "+-") {
		return ExecutionID{}, Validationf("execution_id", "%s: partition %s is not a canonical number", Excerpt(s), Excerpt(numStr))
	}
	n, err := strconv.ParseUint(numStr, 10, 16)
	if err != nil || n >= MaxPartitions {
		return ExecutionID{}, Validationf("execution_id", "%s: partition %s is not a number in 0..%d", Excerpt(s), Excerpt(numStr), MaxPartitions-1)
	}
	uStr := rest[end+2:]
	if len(uStr) != 36 {
		return ExecutionID{}, Validationf("execution_id", "%s: %s is not a UUID in its 36-character form", Excerpt(s), Excerpt(uStr))
	}
	u, err := uuid.Parse(uStr)
	if err != nil {
		return ExecutionID{}, Validationf("execution_id", "%s: %s is not a UUID", Excerpt(s), Excerpt(uStr))
	}
	return ExecutionID{Partition: int16(n), UUID: u}, nil
}

// MustParseExecutionID is ParseExecutionID that panics on error; for tests
// and constants.
func MustParseExecutionID(s string) ExecutionID {
	id, err := ParseExecutionID(s)
	if err != nil {
		panic(err)
	}
	return id
}

// MarshalText implements encoding.TextMarshaler.
func (id ExecutionID) MarshalText() ([]byte, error) { return []byte(id.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (id *ExecutionID) UnmarshalText(b []byte) error {
	parsed, err := ParseExecutionID(string(b))
	if err != nil {
		return err
	}
	*id = parsed
	return nil
}

// MarshalJSON implements json.Marshaler as the JSON string of String.
func (id ExecutionID) MarshalJSON() ([]byte, error) { return json.Marshal(id.String()) }

// UnmarshalJSON implements json.Unmarshaler.
func (id *ExecutionID) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return Validationf("execution_id", "not a JSON string: %v", err)
	}
	return id.UnmarshalText([]byte(s))
}

// Partitions is a schema's logical partition count.
type Partitions int

// Check returns a validation error unless p is a valid partition count.
func (p Partitions) Check() error {
	if p < 1 || p > MaxPartitions {
		return Validationf("partitions", "%d is outside 1..%d", int(p), MaxPartitions)
	}
	return nil
}

// ForFlow returns the partition of every execution of a flow:
// CRC-16/XMODEM of the flow UUID's 16 bytes, modulo the partition count.
func (p Partitions) ForFlow(flow uuid.UUID) int16 {
	return int16(int(CRC16XModem(flow[:])) % int(p))
}

// ForLane returns the partition of a solo execution (one in no flow):
// CRC-16/XMODEM of the lane name's UTF-8 bytes, modulo the partition count.
func (p Partitions) ForLane(lane string) int16 {
	return int16(int(CRC16XModem([]byte(lane))) % int(p))
}

// Contains reports whether partition is one of 0..p-1.
func (p Partitions) Contains(partition int16) bool {
	return partition >= 0 && int(partition) < int(p)
}

// CheckID returns a validation error when id's partition is outside p.
func (p Partitions) CheckID(id ExecutionID) error {
	if !p.Contains(id.Partition) {
		return Validationf("execution_id", "%s: partition %d is outside this schema's 0..%d", id, id.Partition, int(p)-1)
	}
	return nil
}

// CRC16XModem is CRC-16/XMODEM (polynomial 0x1021, initial value 0, no
// reflection, no final xor): the checksum upstream FlowFabric partitions by.
func CRC16XModem(b []byte) uint16 {
	var crc uint16
	for _, c := range b {
		crc ^= uint16(c) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// String implements fmt.Stringer.
func (p Partitions) String() string { return fmt.Sprintf("%d partitions", int(p)) }
