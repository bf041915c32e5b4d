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
	"github.com/ffriver/ffriver/cmd/internal/cli"
	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/ffriver/ffriver/scanners"
	"github.com/ffriver/ffriver/subscribe"
)

// runOn runs an ffctl command function on the test's schema and returns
// its exit code, stdout and stderr.
func runOn(t *testing.T, db *testdb.DB, cmd func(context.Context, []string, io.Writer, io.Writer) int, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := cmd(context.Background(), append(args, "--database-url", testdb.URL(), "--schema", db.Schema), &out, &errb)
	return code, out.String(), errb.String()
}

// ffctl config set, get and unset a setting stored in the schema; bad
// input is a usage error that names the problem, before anything is
// stored.
func TestConfigSetGetUnset(t *testing.T) {
	t.Parallel()
	db := testdb.New(t, nil)
	get := func(args ...string) []configEntry {
		t.Helper()
		code, out, errs := runOn(t, db, runConfig, append(append([]string{"get"}, args...), "--format", "json")...)
		if code != cli.ExitOK {
			t.Fatalf("config get: exit %d: %s", code, errs)
		}
		var es []configEntry
		if err := json.Unmarshal([]byte(out), &es); err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		return es
	}
	es := get()
	if len(es) < 2 || es[0].Name != scanners.OutboxRetention || es[0].Stored != nil || es[0].Default != "168h0m0s" || es[0].Flag != "--outbox-retention" {
		t.Fatalf("config get on a new schema = %+v, want outbox_retention first, not stored, default 168h0m0s", es)
	}

	code, out, errs := runOn(t, db, runConfig, "set", scanners.OutboxRetention, "5s")
	if code != cli.ExitOK || !strings.Contains(out, "stored outbox_retention = 5s") {
		t.Fatalf("config set: exit %d, %q, %q", code, out, errs)
	}
	if code, _, errs := runOn(t, db, runConfig, "set", "attempt_timeout.interval", "250ms"); code != cli.ExitOK {
		t.Fatalf("config set attempt_timeout.interval: exit %d: %s", code, errs)
	}
	es = get(scanners.OutboxRetention)
	if len(es) != 1 || es[0].Stored == nil || es[0].Stored.Value != "5s" || !strings.HasPrefix(es[0].Stored.SetBy, "ffctl config set (") ||
		time.Since(es[0].Stored.SetAt) > time.Hour {
		t.Fatalf("config get outbox_retention = %+v, want 5s stored by ffctl config set", es)
	}
	code, out, _ = runOn(t, db, runConfig, "get")
	if code != cli.ExitOK || !strings.Contains(out, "attempt_timeout.interval") || !strings.Contains(out, "250ms") ||
		!strings.Contains(out, "default, not stored (each process's --execution-retention applies)") {
		t.Errorf("config get (text): exit %d:\n%s", code, out)
	}

	code, out, errs = runOn(t, db, runConfig, "unset", scanners.OutboxRetention)
	if code != cli.ExitOK || !strings.Contains(out, "unset outbox_retention") {
		t.Fatalf("config unset: exit %d, %q, %q", code, out, errs)
	}
	if es := get(scanners.OutboxRetention); len(es) != 1 || es[0].Stored != nil {
		t.Errorf("config get after unset = %+v, want nothing stored", es)
	}
	if code, _, errs := runOn(t, db, runConfig, "unset", scanners.OutboxRetention); code != cli.ExitFailure || !strings.Contains(errs, "no stored value of outbox_retention") {
		t.Errorf("unset of nothing stored: exit %d, %q; want 1 saying nothing is stored", code, errs)
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"set", "outbox_retension", "5s"}, `"outbox_retension" is not a setting ffriver stores; known: outbox_retention, execution_retention, attempt_timeout.interval`},
		{[]string{"set", scanners.OutboxRetention, "5"}, `invalid outbox_retention: "5" has no unit: want a duration with a unit, such as 90s, 15m or 168h`},
		{[]string{"set", scanners.ExecutionRetention, "never"}, `invalid execution_retention: "never" is not a duration`},
		{[]string{"set", scanners.OutboxRetention, "0s"}, "invalid outbox_retention: 0s is outside the allowed range 1s.."},
		{[]string{"set", "attempt_timeout.batch", "0"}, "invalid attempt_timeout.batch: 0 is outside the allowed range 1..100000"},
		{[]string{"set", scanners.OutboxRetention}, "want a setting name and a value, got 1 arguments"},
		{[]string{"get", "nope"}, `"nope" is not a setting ffriver stores`},
		{[]string{"unset", "nope"}, `"nope" is not a setting ffriver stores`},
		{[]string{"frob"}, `unknown subcommand "frob"`},
	} {
		code, _, errs := runOn(t, db, runConfig, c.args...)
		if code != cli.ExitUsage || !strings.Contains(errs, c.want) {
			t.Errorf("config %q: exit %d, %q; want a usage error containing %q", c.args, code, errs, c.want)
		}
	}
	// Nothing of the bad input was stored.
	if es := get(); es[0].Stored != nil || es[1].Stored != nil {
		t.Errorf("config get after bad input = %+v, want no retention stored", es[:2])
	}
}

// Issue 40, item 2: with a 5 s outbox retention stored in the schema,
// ffctl status (given no --outbox-retention) judges a consumer holding
// events a minute old against it, and names it as holding retention back.
func TestStatusJudgesConsumersAgainstTheStoredRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t, nil)
	sql := &fftest.DB{TB: t, Ctx: ctx, Pool: db.Pool}
	if code, _, errs := runOn(t, db, runConfig, "set", scanners.OutboxRetention, "5s"); code != cli.ExitOK {
		t.Fatalf("config set: exit %d: %s", code, errs)
	}
	// A consumer reads one event and stops; its position is then a minute
	// old, and events committed after it (an hour old) wait for it.
	s, err := subscribe.Leases(ctx, db.Pool, subscribe.Options{Consumer: "audit"})
	if err != nil {
		t.Fatal(err)
	}
	sql.Exec(`INSERT INTO ff_lease_event (execution_id, event_type, occurred_at_ms, partition_key) VALUES (gen_random_uuid()::text, 'renewed', $1, 0)`,
		time.Now().UnixMilli())
	if _, err := s.Next(ctx); err != nil {
		t.Fatal(err)
	}
	s.Close()
	fftest.Await(t, 30*time.Second, "the consumer's position to be stored", func() bool {
		return sql.Count(`SELECT count(*) FROM ff_stream_consumer WHERE name = 'audit'`) == 1
	})
	sql.Exec(`UPDATE ff_stream_consumer SET position_at_ms = position_at_ms - 60000`)
	sql.Exec(`INSERT INTO ff_lease_event (execution_id, event_type, occurred_at_ms, partition_key)
		SELECT gen_random_uuid()::text, 'renewed', $1::bigint, 0 FROM generate_series(1, 20)`, time.Now().Add(-time.Hour).UnixMilli())

	code, out, errs := runOn(t, db, runStatus, "--format", "json")
	if code != cli.ExitOK {
		t.Fatalf("status: exit %d: %s", code, errs)
	}
	var r status.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if len(r.Consumers) != 1 || !r.Consumers[0].HoldsRetention || !strings.HasPrefix(r.Consumers[0].Retention, "HOLDS events older than 5s") {
		t.Errorf("status consumers = %+v, want audit holding retention back (judged against the stored 5s)", r.Consumers)
	}
	var held bool
	for _, sc := range r.Scanners {
		for _, u := range sc.Unprocessable {
			held = held || (sc.Name == scanners.OutboxRetention && u.Count >= 20 && strings.Contains(u.Reason, `kept for consumer "audit"`) &&
				strings.Contains(u.Reason, "older than the retention (5s)"))
		}
	}
	if !held {
		t.Errorf("status scanners = %+v, want outbox_retention's audit to name the 20 events kept for audit past the 5s retention", r.Scanners)
	}
	code, out, _ = runOn(t, db, runStatus)
	if code != cli.ExitOK || !strings.Contains(out, "HOLDS events older than 5s") {
		t.Errorf("status (text): exit %d, want audit shown holding retention back:\n%s", code, out)
	}
	// A flag that disagrees with the stored value is said, and loses.
	code, out, errs = runOn(t, db, runStatus, "--outbox-retention", "1h")
	if code != cli.ExitOK || !strings.Contains(out, "HOLDS events older than 5s") || !strings.Contains(errs, "given=1h0m0s stored=5s") {
		t.Errorf("status --outbox-retention 1h: exit %d, want the stored 5s used and the disagreement said:\n%s\n%s", code, out, errs)
	}
	// The same judgement in ffctl consumer list.
	code, out, _ = runOn(t, db, runConsumerList)
	if code != cli.ExitOK || !strings.Contains(out, "HOLDS events older than 5s") {
		t.Errorf("consumer list: exit %d, want audit shown holding retention back:\n%s", code, out)
	}
}
