package executions_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/google/uuid"
)

func TestListFilters(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	flow := f.Flow()
	a := f.Create(executions.CreateParams{Lane: "l1", Namespace: "ns-a"})
	f.clock.Advance(time.Millisecond)
	b := f.Create(executions.CreateParams{Lane: "l2", Namespace: "ns-a", FlowID: flow})
	f.clock.Advance(time.Millisecond)
	c := f.Create(executions.CreateParams{Lane: "l1", Namespace: "ns-b", DelayUntil: time.UnixMilli(t0 + time.Hour.Milliseconds())})
	f.clock.Advance(time.Millisecond)
	d := f.Create(executions.CreateParams{Lane: "l1", Namespace: "ns-b"})
	f.ClaimOne("l1", time.Minute) // a: the oldest eligible on l1

	list := func(p executions.ListParams) []ff.ExecutionID {
		t.Helper()
		es, err := f.st.List(f.ctx, p)
		if err != nil {
			t.Fatalf("List(%+v): %v", p, err)
		}
		var ids []ff.ExecutionID
		for _, e := range es {
			if e.Payload != nil || e.Result != nil {
				t.Errorf("List read the payload of %s", e.ID)
			}
			ids = append(ids, e.ID)
		}
		return ids
	}
	for _, tc := range []struct {
		name string
		p    executions.ListParams
		want []ff.ExecutionID
	}{
		{"all, newest first", executions.ListParams{}, []ff.ExecutionID{d, c, b, a}},
		{"namespace", executions.ListParams{Namespace: "ns-a"}, []ff.ExecutionID{b, a}},
		{"lane", executions.ListParams{Lane: "l1"}, []ff.ExecutionID{d, c, a}},
		{"state active", executions.ListParams{State: ff.PublicActive}, []ff.ExecutionID{a}},
		{"state delayed", executions.ListParams{State: ff.PublicDelayed}, []ff.ExecutionID{c}},
		{"state waiting, namespace", executions.ListParams{State: ff.PublicWaiting, Namespace: "ns-b"}, []ff.ExecutionID{d}},
		{"flow", executions.ListParams{FlowID: flow}, []ff.ExecutionID{b}},
		{"limit", executions.ListParams{Limit: 2}, []ff.ExecutionID{d, c}},
		{"nothing", executions.ListParams{Lane: "l2", State: ff.PublicActive}, nil},
		{"whole id", executions.ListParams{ID: mustPrefix(t, c.String())}, []ff.ExecutionID{c}},
		{"uuid prefix", executions.ListParams{ID: mustPrefix(t, b.UUID.String()[:6])}, []ff.ExecutionID{b}},
		{"partition and uuid prefix", executions.ListParams{ID: mustPrefix(t, fmt.Sprintf("{fp:%d}:%s", d.Partition, d.UUID.String()[:10]))}, []ff.ExecutionID{d}},
		{"page after b", executions.ListParams{After: &executions.ListCursor{CreatedAtMs: t0 + 1, Partition: b.Partition, UUID: b.UUID}}, []ff.ExecutionID{a}},
		{"page after d, lane l1", executions.ListParams{Lane: "l1", Limit: 1, After: &executions.ListCursor{CreatedAtMs: t0 + 3, Partition: d.Partition, UUID: d.UUID}}, []ff.ExecutionID{c}},
	} {
		if got := list(tc.p); !equalIDs(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
	es, err := f.st.List(f.ctx, executions.ListParams{State: ff.PublicActive})
	if err != nil {
		t.Fatal(err)
	}
	if at := es[0].Attempt; at == nil || at.WorkerID == nil || *at.WorkerID != "w" || at.LeaseExpiresAtMs == nil {
		t.Errorf("List did not read the current attempt: %+v", at)
	}
	for _, bad := range []executions.ListParams{{State: "running"}, {Limit: -1}, {Limit: executions.MaxListLimit + 1}} {
		if _, err := f.st.List(f.ctx, bad); !errors.Is(err, ff.ErrValidation) {
			t.Errorf("List(%+v): %v, want a validation error", bad, err)
		}
	}
}

func mustPrefix(t *testing.T, s string) executions.IDPrefix {
	t.Helper()
	p, err := executions.ParseIDPrefix(s)
	if err != nil {
		t.Fatalf("ParseIDPrefix(%q): %v", s, err)
	}
	return p
}

// TestListPagesThroughTies pages one execution at a time through
// executions created in the same millisecond: each appears once.
func TestListPagesThroughTies(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	want := map[ff.ExecutionID]bool{}
	for i := range 7 {
		want[f.Create(executions.CreateParams{Lane: fmt.Sprintf("lane-%d", i)})] = true
	}
	var after *executions.ListCursor
	seen := map[ff.ExecutionID]bool{}
	for range 10 {
		es, err := f.st.List(f.ctx, executions.ListParams{Limit: 1, After: after})
		if err != nil {
			t.Fatal(err)
		}
		if len(es) == 0 {
			break
		}
		if seen[es[0].ID] {
			t.Fatalf("%s listed twice", es[0].ID)
		}
		seen[es[0].ID] = true
		after = executions.ListCursorOf(es[0])
		if c, err := executions.ParseListCursor(after.String()); err != nil || *c != *after {
			t.Fatalf("cursor %s reads back as %v, %v", after, c, err)
		}
	}
	if len(seen) != len(want) {
		t.Errorf("paged through %d executions, want %d", len(seen), len(want))
	}
}

func TestParseIDPrefixRefuses(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"abc", "xyz1", "{fp:1", "{fp:x}:ab", "{fp:40000}:ab", strings.Repeat("a", 33), "{fp:1}:g"} {
		if _, err := executions.ParseIDPrefix(s); !errors.Is(err, ff.ErrValidation) {
			t.Errorf("ParseIDPrefix(%q): %v, want a validation error", s, err)
		}
	}
	for _, s := range []string{"", "1.2", "x.1.00000000-0000-0000-0000-000000000000", "1.99999.00000000-0000-0000-0000-000000000000", "1.2.nope"} {
		if _, err := executions.ParseListCursor(s); !errors.Is(err, ff.ErrValidation) {
			t.Errorf("ParseListCursor(%q): %v, want a validation error", s, err)
		}
	}
}

func equalIDs(a, b []ff.ExecutionID) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// History lists an execution's lease and completion events in order, and
// only its own.
func TestHistory(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	id := f.Create(executions.CreateParams{})
	other := f.Create(executions.CreateParams{Lane: "lane-b"})
	l := f.ClaimOne("lane-a", time.Minute)
	if l.ID != id {
		t.Fatalf("claimed %s, want %s", l.ID, id)
	}
	f.clock.Advance(time.Second)
	l, err := f.st.Renew(f.ctx, l, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(time.Second)
	if err := f.st.Complete(f.ctx, l, nil); err != nil {
		t.Fatal(err)
	}
	if err := f.st.Cancel(f.ctx, other, executions.CancelParams{}); err != nil {
		t.Fatal(err)
	}

	h, err := f.st.History(f.ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	type ev struct {
		stream, typ string
		at          int64
	}
	want := []ev{
		{executions.StreamLease, ff.LeaseAcquired, t0},
		{executions.StreamLease, ff.LeaseRenewed, t0 + 1000},
		{executions.StreamLease, ff.LeaseRevoked, t0 + 2000},
		{executions.StreamCompletion, ff.OutcomeSuccess, t0 + 2000},
	}
	if len(h) != len(want) {
		t.Fatalf("history %+v, want %v", h, want)
	}
	for i, w := range want {
		if g := h[i]; g.Stream != w.stream || g.Type != w.typ || g.OccurredAtMs != w.at {
			t.Errorf("event %d: %+v, want %+v", i, g, w)
		}
	}
	if a := h[0]; a.AttemptIndex == nil || *a.AttemptIndex != 0 || a.LeaseEpoch == nil || *a.LeaseEpoch != 1 ||
		a.WorkerInstanceID == nil || *a.WorkerInstanceID != "w-1" || a.LeaseID == nil {
		t.Errorf("acquired event without its lease fields: %+v", a)
	}
	// The newest ones when limited, still oldest first.
	h, err = f.st.History(f.ctx, id, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 2 || h[0].Type != ff.LeaseRevoked || h[1].Type != ff.OutcomeSuccess {
		t.Errorf("History(limit 2) = %+v, want revoked then success", h)
	}
	h, err = f.st.History(f.ctx, ff.ExecutionID{Partition: id.Partition, UUID: uuid.New()}, 0)
	if err != nil || len(h) != 0 {
		t.Errorf("History of an unknown id: %v, %v; want none", h, err)
	}
}

// TestHistoryAcrossClocks: a worker whose clock is two minutes behind the
// creator's stamps its events before the execution's creation; History,
// which reads the lease outbox within the execution's lifetime, still
// shows them.
func TestHistoryAcrossClocks(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	behind, err := executions.Open(f.ctx, f.db.Pool, executions.Config{Schema: f.db.Name, Clock: ff.NewManualClock(t0 - 120_000)})
	if err != nil {
		t.Fatal(err)
	}
	id := f.Create(executions.CreateParams{})
	leases, err := behind.Claim(f.ctx, executions.ClaimParams{Lane: "lane-a", WorkerInstanceID: "slow", LeaseTTL: time.Hour})
	if err != nil || len(leases) != 1 {
		t.Fatalf("claim: %v, %d", err, len(leases))
	}
	if err := behind.Complete(f.ctx, leases[0], nil); err != nil {
		t.Fatal(err)
	}
	h, err := f.st.History(f.ctx, id, 0)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range h {
		types = append(types, e.Type)
	}
	if want := []string{ff.LeaseAcquired, ff.LeaseRevoked, ff.OutcomeSuccess}; !slices.Equal(types, want) {
		t.Errorf("history %v, want %v", types, want)
	}
}
