package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/ffriver/ffriver/cmd/ffctl/internal/status"
	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/internal/outboxretention"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/ffriver/ffriver/outbox"
	"github.com/ffriver/ffriver/scanners"
	"github.com/ffriver/ffriver/subscribe"
	"github.com/ffriver/ffriver/workers"
	"github.com/jackc/pgx/v5"
)

// A named consumer that read some events and never came back holds
// retention back: ffctl consumer list says so, the retention scanner
// reports it (the tick's warning, status's unprocessable column) and
// `ffctl consumer drop` releases the events at the next trim.
func TestConsumerAbandonedHoldsRetentionUntilDropped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t, nil)
	st, err := executions.Open(ctx, db.Pool, executions.Config{Schema: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	sql := &fftest.DB{TB: t, Ctx: ctx, Pool: db.Pool}
	insert := func(n int) {
		t.Helper()
		// Events that happened an hour ago: older than any retention below.
		sql.Exec(`INSERT INTO ff_lease_event (execution_id, event_type, occurred_at_ms, partition_key)
			SELECT gen_random_uuid()::text, 'renewed', (extract(epoch FROM now()) * 1000)::bigint - 3600000, 0
			FROM generate_series(1, $1)`, n)
	}
	insert(10)
	// The consumer reads the ten events and stops.
	s, err := subscribe.Leases(ctx, db.Pool, subscribe.Options{Consumer: "audit", Start: subscribe.StartBeginning})
	if err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if _, err := s.Next(ctx); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	insert(5) // committed after its position: not acknowledged

	retention := time.Second
	run := func(cmd func(context.Context, []string, io.Writer, io.Writer) int, args ...string) (int, string, string) {
		t.Helper()
		var out, errb bytes.Buffer
		code := cmd(ctx, append(args, "--database-url", testdb.URL(), "--schema", db.Schema), &out, &errb)
		return code, out.String(), errb.String()
	}
	list := func() []status.Consumer {
		t.Helper()
		code, out, errs := run(runConsumerList, "--format", "json", "--outbox-retention", retention.String())
		if code != 0 {
			t.Fatalf("consumer list: exit %d: %s", code, errs)
		}
		var cs []status.Consumer
		if err := json.Unmarshal([]byte(out), &cs); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		return cs
	}
	var cs []status.Consumer
	fftest.Await(t, 30*time.Second, "the consumer's position to grow older than the retention", func() bool {
		cs = list()
		return len(cs) == 1 && cs[0].Lag > retention
	})
	if c := cs[0]; c.Name != "audit" || c.Stream != subscribe.StreamLeases || c.Attached || !c.HoldsRetention ||
		!strings.HasPrefix(c.Retention, "HOLDS events older than 1s") {
		t.Fatalf("consumer list = %+v, want audit of leases, detached, holding retention", c)
	}

	// The retention scanner reports what the consumer holds.
	audit, err := scanners.NewOutboxRetentionScanner(retention).Unprocessable(ctx, db.Pool,
		workers.DueRequest{Store: st, NowMs: time.Now().UnixMilli()})
	if err != nil {
		t.Fatal(err)
	}
	// It holds at least the five events it never read (the events of the
	// batch it stopped in too: its stored position is that batch's start).
	if len(audit) != 1 || audit[0].Count < 5 || !strings.Contains(audit[0].Reason, `consumer "audit"`) ||
		!strings.Contains(audit[0].Reason, "ffctl consumer drop --stream leases audit") {
		t.Fatalf("retention audit = %+v, want the events kept for audit and the command that drops it", audit)
	}
	held := audit[0].Count
	var listed int64
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM (`+audit[0].List+`) l`).Scan(&listed); err != nil || listed != held {
		t.Fatalf("the audit's list query: %d rows, %v; want %d", listed, err, held)
	}

	trim := func() int64 {
		t.Helper()
		var n int64
		if err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
			var err error
			n, err = outboxretention.Trim(ctx, tx, dbutil.Schema(st.Schema()), outboxretention.TrimParams{Table: outbox.LeaseTable, CutoffMs: time.Now().Add(-retention).UnixMilli(), NowMs: st.NowMs(), Limit: 1000})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := trim(); n != 15-held {
		t.Fatalf("first trim deleted %d events, want all but the %d the consumer holds", n, held)
	}

	// Dropping a consumer that a stream holds is refused.
	attached, err := subscribe.Leases(ctx, db.Pool, subscribe.Options{Consumer: "audit"})
	if err != nil {
		t.Fatal(err)
	}
	if code, _, errs := run(runConsumerDrop, "audit", "--stream", "leases"); code != 1 || !strings.Contains(errs, "attached") {
		t.Errorf("drop of an attached consumer: exit %d, %q; want 1 and a message saying it is attached", code, errs)
	}
	attached.Close()
	// The server releases the stream's hold on the name when its session
	// ends, a moment after Close has returned.
	fftest.Await(t, 30*time.Second, "the closed stream's session to end", func() bool {
		cs := list()
		return len(cs) == 1 && !cs[0].Attached
	})

	code, out, errs := run(runConsumerDrop, "audit", "--stream", "leases")
	if code != 0 || !strings.Contains(out, `dropped consumer "audit"`) {
		t.Fatalf("consumer drop: exit %d, %q, %q", code, out, errs)
	}
	if cs := list(); len(cs) != 0 {
		t.Errorf("consumers after the drop = %+v, want none", cs)
	}
	if n := trim(); n != held {
		t.Errorf("trim after the drop deleted %d events, want the %d the consumer held", n, held)
	}
	if code, _, errs := run(runConsumerDrop, "audit", "--stream", "leases"); code != 1 || !strings.Contains(errs, "no consumer") {
		t.Errorf("second drop: exit %d, %q; want 1 and no such consumer", code, errs)
	}
	if code, _, errs := run(runConsumerDrop, "audit"); code != 2 || !strings.Contains(errs, "--stream") {
		t.Errorf("drop without --stream: exit %d, %q; want a usage error", code, errs)
	}
}
