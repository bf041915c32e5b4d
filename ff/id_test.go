package ff_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/ffriver/ffriver/ff"
	"github.com/google/uuid"
)

func TestCRC16XModemCheckValue(t *testing.T) {
	// The standard check value of CRC-16/XMODEM.
	if got := ff.CRC16XModem([]byte("123456789")); got != 0x31C3 {
		t.Fatalf("CRC16XModem(123456789) = %#04x, want 0x31c3", got)
	}
}

func TestPartitionMath(t *testing.T) {
	p := ff.Partitions(256)
	flow := uuid.MustParse("00000000-0000-0000-0000-000000000001")
	if got, want := p.ForFlow(flow), int16(ff.CRC16XModem(flow[:])%256); got != want {
		t.Errorf("ForFlow = %d, want %d", got, want)
	}
	if got, want := p.ForLane("emails"), int16(ff.CRC16XModem([]byte("emails"))%256); got != want {
		t.Errorf("ForLane = %d, want %d", got, want)
	}
	if got := ff.Partitions(1).ForLane("anything"); got != 0 {
		t.Errorf("one partition: ForLane = %d", got)
	}
	if err := ff.Partitions(0).Check(); !errors.Is(err, ff.ErrValidation) {
		t.Errorf("Check(0) = %v", err)
	}
}

func TestExecutionIDRoundTrip(t *testing.T) {
	id := ff.NewExecutionID(42)
	s := id.String()
	back, err := ff.ParseExecutionID(s)
	if err != nil || back != id {
		t.Fatalf("ParseExecutionID(%q) = %v, %v", s, back, err)
	}
	b, err := json.Marshal(struct{ ID ff.ExecutionID }{id})
	if err != nil {
		t.Fatal(err)
	}
	var v struct{ ID ff.ExecutionID }
	if err := json.Unmarshal(b, &v); err != nil || v.ID != id {
		t.Fatalf("JSON round trip = %v, %v (%s)", v.ID, err, b)
	}
}

func TestParseExecutionIDRejects(t *testing.T) {
	u := "8a3c9d5e-0f1b-4c2d-9e8f-7a6b5c4d3e2f"
	for _, s := range []string{
		"", u, "{fp:}:" + u, "{fp:-1}:" + u, "{fp:+1}:" + u, "{fp:01}:" + u, "{fp:32767}:" + u,
		"{fp:70000}:" + u, "{fp:1}" + u, "{fp:1}:", "{fp:1}:not-a-uuid", "{fp:1}:" + u + "x",
		"{fp:1}:{" + u[:34] + "}", "{fp:1}:urn:uuid:" + u, "(fp:1):" + u,
	} {
		_, err := ff.ParseExecutionID(s)
		var verr *ff.ValidationError
		if !errors.As(err, &verr) || verr.Field != "execution_id" {
			t.Errorf("ParseExecutionID(%q) = %v, want an execution_id ValidationError", s, err)
		}
	}
	var id ff.ExecutionID
	if err := json.Unmarshal([]byte(`17`), &id); !errors.Is(err, ff.ErrValidation) {
		t.Errorf("UnmarshalJSON(17) = %v", err)
	}
}

func FuzzParseExecutionID(f *testing.F) {
	for _, s := range []string{"{fp:0}:8a3c9d5e-0f1b-4c2d-9e8f-7a6b5c4d3e2f", "{fp:255}:00000000-0000-0000-0000-000000000000", "{fp:", "}:", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ff.ParseExecutionID(s)
		if err != nil {
			if !errors.Is(err, ff.ErrValidation) {
				t.Fatalf("error %v is not a validation error", err)
			}
			return
		}
		// Whatever parses formats back to itself and parses again.
		again, err := ff.ParseExecutionID(id.String())
		if err != nil || again != id {
			t.Fatalf("%q parsed to %v, which re-parses to %v, %v", s, id, again, err)
		}
		if id.String() != s && len(s) == len(id.String()) {
			// Only letter case in the UUID may differ.
			if !equalFold(s, id.String()) {
				t.Fatalf("%q parsed but formats as %q", s, id.String())
			}
		}
	})
}

func equalFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range len(a) {
		x, y := a[i], b[i]
		if x|0x20 != y|0x20 {
			return false
		}
	}
	return true
}

func TestParseTag(t *testing.T) {
	tag, err := ff.ParseTag("cairn.instance_id=a=b")
	if err != nil || tag.Key != "cairn.instance_id" || tag.Value != "a=b" {
		t.Fatalf("ParseTag = %+v, %v", tag, err)
	}
	for _, bad := range []string{"novalue", "=v", " =v"} {
		if _, err := ff.ParseTag(bad); !errors.Is(err, ff.ErrValidation) {
			t.Errorf("ParseTag(%q) = %v, want a validation error", bad, err)
		}
	}
}

func TestFilterMatchesRow(t *testing.T) {
	ns, tag := "a", "i-1"
	f := ff.Filter{Namespace: "a", InstanceTag: &ff.Tag{Key: "cairn.instance_id", Value: "i-1"}}
	if !f.MatchesRow(&ns, &tag) {
		t.Error("matching row rejected")
	}
	if f.MatchesRow(nil, &tag) || f.MatchesRow(&ns, nil) {
		t.Error("a NULL column matched a set dimension")
	}
	if !(ff.Filter{}).MatchesRow(nil, nil) {
		t.Error("the zero filter rejected a row")
	}
}
