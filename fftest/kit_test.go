package fftest_test

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/fftest"
	"github.com/jackc/pgx/v5"
)

var (
	waiting = fftest.State{ff.PhaseRunnable, ff.OwnershipUnowned, ff.EligibleNow, ff.AttemptPendingFirst, ff.PublicWaiting}
	active  = fftest.State{ff.PhaseActive, ff.OwnershipLeased, ff.EligibleNotApplicable, ff.AttemptRunning, ff.PublicActive}
	done    = fftest.State{ff.PhaseTerminal, ff.OwnershipUnowned, ff.EligibleNotApplicable, ff.AttemptTerminal, ff.PublicCompleted}
)

// An execution's way through the kit: created, claimed, completed, its
// states and events read back.
func TestKit(t *testing.T) {
	t.Parallel()
	k := fftest.New(t, &fftest.KitOptions{Schema: fftest.Options{Partitions: 4, MaxConns: 4}})
	if k.Schema.Partitions != 4 || k.Store.Schema() != k.Schema.Name || k.Pool != k.Schema.Pool {
		t.Fatalf("kit on %s (%d partitions), store on %s", k.Schema.Name, k.Schema.Partitions, k.Store.Schema())
	}
	if k.Clock == nil || k.Clock.NowMs() != fftest.StartMs {
		t.Fatalf("clock %v, want a manual clock at StartMs", k.Clock)
	}
	id := k.Create(executions.CreateParams{Namespace: "ns", Tags: map[string]string{ff.InstanceTagKey: "i-1"}})
	if e := k.WantState(id, waiting); e.Lane != fftest.DefaultLane {
		t.Errorf("lane %q, want %q", e.Lane, fftest.DefaultLane)
	}
	l := k.ClaimOne(fftest.DefaultLane, time.Minute)
	if l.ID != id {
		t.Fatalf("claimed %s, want %s", l.ID, id)
	}
	k.AwaitState(id, active)
	k.Clock.Advance(time.Second)
	if err := k.Store.Complete(k.Ctx, l, nil); err != nil {
		t.Fatal(err)
	}
	k.AwaitPublicState(id, ff.PublicCompleted)
	if got := k.State(id); got != done {
		t.Fatalf("state %v, want %v", got, done)
	}
	lease := k.LeaseEvents(id)
	if len(lease) != 2 || lease[0] != (fftest.LeaseEvent{Type: ff.LeaseAcquired, Namespace: "ns", InstanceTag: "i-1", Epoch: 1, Attempt: 0, AtMs: fftest.StartMs}) ||
		lease[1] != (fftest.LeaseEvent{Type: ff.LeaseRevoked, Namespace: "ns", InstanceTag: "i-1", Epoch: 1, Attempt: 0, AtMs: fftest.StartMs + 1000}) {
		t.Fatalf("lease events %+v", lease)
	}
	completion := k.CompletionEvents(id)
	if len(completion) != 1 || completion[0] != (fftest.CompletionEvent{Outcome: ff.OutcomeSuccess, Namespace: "ns", InstanceTag: "i-1", AtMs: fftest.StartMs + 1000}) {
		t.Fatalf("completion events %+v", completion)
	}
	k.WantEvents(id, []string{"acquired", "revoked"}, []string{"success"})
	k.WantEventStrings(id, []string{"acquired/ns/i-1/1", "revoked/ns/i-1/1"}, []string{"success/ns/i-1"})

	// A flow and its member, on another lane, claimed by a named worker.
	flow := k.Flow()
	member := k.Create(executions.CreateParams{FlowID: flow, Lane: "other"})
	if l := k.ClaimOneWith(executions.ClaimParams{Lane: "other", WorkerID: "me", LeaseTTL: time.Minute}); l.ID != member {
		t.Fatalf("claimed %s, want %s", l.ID, member)
	}
	if got := k.Strings(`SELECT worker_instance_id FROM ff_lease_event WHERE execution_id = $1`, member.UUID.String()); len(got) != 1 || got[0] != "me-1" {
		t.Fatalf("worker instance %q, want me-1", got)
	}
}

// The SQL helpers: a DB of the kit's, and one built on a pool.
func TestDB(t *testing.T) {
	t.Parallel()
	k := fftest.New(t, nil)
	k.Exec(`CREATE TABLE notes (body text)`)
	k.Exec(`INSERT INTO notes VALUES ($1), ($2)`, "a", "b")
	if n := k.Count(`SELECT count(*) FROM notes`); n != 2 {
		t.Fatalf("count %d, want 2", n)
	}
	if got := k.Strings(`SELECT body FROM notes ORDER BY body`); fmt.Sprint(got) != "[a b]" {
		t.Fatalf("strings %q", got)
	}
	refused := errors.New("refused")
	err := k.InTx(func(tx pgx.Tx) error {
		if _, err := tx.Exec(k.Ctx, `INSERT INTO notes VALUES ('rolled back')`); err != nil {
			return err
		}
		return refused
	})
	if !errors.Is(err, refused) {
		t.Fatalf("InTx = %v, want fn's error", err)
	}
	if err := k.InTx(func(tx pgx.Tx) error {
		_, err := tx.Exec(k.Ctx, `INSERT INTO notes VALUES ('committed')`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	d := fftest.DB{TB: t, Ctx: t.Context(), Pool: k.Schema.Pool, Timeout: 10 * time.Second}
	if got := d.Strings(`SELECT body FROM notes ORDER BY body`); fmt.Sprint(got) != "[a b committed]" {
		t.Fatalf("after the transactions: %q", got)
	}
}

// On: a kit over a store the test opened itself, on a system clock.
func TestOn(t *testing.T) {
	t.Parallel()
	st, s := fftest.NewStore(t, executions.Config{})
	k := fftest.On(t, s, st, nil)
	id := k.Create(executions.CreateParams{})
	k.AwaitPublicState(id, ff.PublicWaiting)
	if k.Clock != nil {
		t.Fatalf("clock %v, want none", k.Clock)
	}
}

// recorder is a testing.TB whose Fatalf and Errorf are recorded: Fatalf
// ends the goroutine, as testing's does.
type recorder struct {
	testing.TB
	failures []string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.failures = append(r.failures, fmt.Sprintf(format, args...))
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.Errorf(format, args...)
	runtime.Goexit()
}

// failures runs fn on a kit that records its failures instead of failing
// t, and returns them.
func failures(t *testing.T, k *fftest.Kit, fn func(k *fftest.Kit)) []string {
	r := &recorder{TB: t}
	rk := *k
	rk.TB = r
	end := make(chan struct{})
	go func() {
		defer close(end)
		fn(&rk)
	}()
	<-end
	return r.failures
}

// The checks fail the test when what they check does not hold.
func TestKitChecksFail(t *testing.T) {
	t.Parallel()
	k := fftest.New(t, nil)
	k.Within = 100 * time.Millisecond
	id := k.Create(executions.CreateParams{Namespace: "ns"})
	k.ClaimOne(fftest.DefaultLane, time.Minute)
	for _, c := range []struct {
		name string
		fn   func(k *fftest.Kit)
		want []string
	}{
		{"WantState", func(k *fftest.Kit) { k.WantState(id, waiting) }, []string{"state of"}},
		{"AwaitState", func(k *fftest.Kit) { k.AwaitState(id, done) }, []string{"timed out after 100ms waiting for"}},
		{"AwaitPublicState", func(k *fftest.Kit) { k.AwaitPublicState(id, ff.PublicCompleted) }, []string{"it is active"}},
		{"Await", func(k *fftest.Kit) { k.Await("never", func() bool { return false }) }, []string{"waiting for never"}},
		{"WantEvents", func(k *fftest.Kit) { k.WantEvents(id, []string{"acquired", "expired"}, []string{"expired"}) },
			[]string{"lease events of", "completion events of"}},
		{"WantEventStrings", func(k *fftest.Kit) { k.WantEventStrings(id, []string{"acquired/ns//2"}, nil) }, []string{`["acquired/ns//1"]`}},
		{"ClaimOne", func(k *fftest.Kit) { k.ClaimOne(fftest.DefaultLane, time.Minute) }, []string{"returned 0 leases"}},
		{"Count", func(k *fftest.Kit) { k.Count(`SELECT 'x'`) }, []string{"SELECT 'x'"}},
	} {
		got := failures(t, k, c.fn)
		if len(got) != len(c.want) {
			t.Errorf("%s: failures %q, want %d", c.name, got, len(c.want))
			continue
		}
		for i, w := range c.want {
			if !strings.Contains(got[i], w) {
				t.Errorf("%s: failure %q, want it to say %q", c.name, got[i], w)
			}
		}
	}
	k.WantState(id, active)
}
