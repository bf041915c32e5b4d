package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/ffriver/ffriver/cmd/internal/cli"
	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/actions"
	"github.com/ffriver/ffriver/internal/testdb"
	"github.com/jackc/pgx/v5"
)

// ffctl exec get, list, cancel and revoke against a real schema, in JSON
// and text.
func TestExecCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t, nil)
	st, err := executions.Open(ctx, db.Pool, executions.Config{Schema: db.Schema})
	if err != nil {
		t.Fatal(err)
	}
	flow, err := st.CreateFlow(ctx, [16]byte{})
	if err != nil {
		t.Fatal(err)
	}
	leased, err := st.Create(ctx, executions.CreateParams{Lane: "emails", Namespace: "tenant-a",
		Tags: map[string]string{"cairn.instance_id": "i-7"}, RetryPolicy: executions.RetryPolicy{MaxRetries: 3}})
	if err != nil {
		t.Fatal(err)
	}
	waiting, err := st.Create(ctx, executions.CreateParams{Lane: "search", Namespace: "tenant-b", FlowID: flow})
	if err != nil {
		t.Fatal(err)
	}
	leases, err := st.Claim(ctx, executions.ClaimParams{Lane: "emails", WorkerID: "mailer", WorkerInstanceID: "mailer-1", LeaseTTL: time.Hour})
	if err != nil || len(leases) != 1 {
		t.Fatalf("claim: %v, %v", leases, err)
	}
	if _, err := st.Renew(ctx, leases[0], time.Hour); err != nil {
		t.Fatal(err)
	}

	run := func(want int, args ...string) (string, string) {
		t.Helper()
		var out, errOut bytes.Buffer
		args = append(args, "--database-url", testdb.URL(), "--schema", db.Schema)
		if code := runExec(ctx, args, &out, &errOut); code != want {
			t.Fatalf("ffctl exec %v: exit %d, want %d; stderr %s", args, code, want, errOut.String())
		}
		return out.String(), errOut.String()
	}
	getJSON := func(args ...string) execView {
		t.Helper()
		out, _ := run(cli.ExitOK, args...)
		var v execView
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("%v: %v in %s", args, err, out)
		}
		return v
	}

	// get: the flags may follow the id.
	v := getJSON("get", leased.String(), "--format", "json")
	if v.ID != leased.String() || v.State != ff.PublicActive || v.Lane != "emails" || v.Namespace != "tenant-a" ||
		v.Attempts != 1 || v.MaxRetries != 3 || v.Tags["cairn.instance_id"] != "i-7" {
		t.Errorf("get: %+v", v)
	}
	if v.Lease == nil || v.Lease.Epoch != 1 || v.Lease.WorkerID == nil || *v.Lease.WorkerID != "mailer" || v.Lease.Expired ||
		v.Lease.LeaseID == nil || *v.Lease.LeaseID != leases[0].LeaseID {
		t.Errorf("get: lease %+v", v.Lease)
	}
	if got := eventTypes(v.Events); got != "lease/acquired lease/renewed" {
		t.Errorf("get: events %s", got)
	}
	text, _ := run(cli.ExitOK, "get", leased.String())
	for _, want := range []string{"execution  " + leased.String(), "state", "active (phase active, ownership leased",
		"live: worker mailer (instance mailer-1), epoch 1", "1 started, current index 0, max retries 3",
		"events (2, oldest first)", "acquired", "renewed"} {
		if !strings.Contains(text, want) {
			t.Errorf("get text lacks %q:\n%s", want, text)
		}
	}

	// list with each filter.
	list := func(args ...string) []string {
		t.Helper()
		out, _ := run(cli.ExitOK, append([]string{"list", "--format", "json"}, args...)...)
		var vs []execView
		if err := json.Unmarshal([]byte(out), &vs); err != nil {
			t.Fatalf("list %v: %v in %s", args, err, out)
		}
		var ids []string
		for _, v := range vs {
			ids = append(ids, v.ID)
		}
		return ids
	}
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--namespace", "tenant-a"}, []string{leased.String()}},
		{[]string{"--lane", "search"}, []string{waiting.String()}},
		{[]string{"--state", "active"}, []string{leased.String()}},
		{[]string{"--flow", flow.String()}, []string{waiting.String()}},
		{[]string{"--state", "completed"}, nil},
		{[]string{"--id", waiting.String()}, []string{waiting.String()}},
		{[]string{"--id", leased.UUID.String()[:8]}, []string{leased.String()}},
	} {
		if got := list(tc.args...); strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("list %v: %v, want %v", tc.args, got, tc.want)
		}
	}
	if got := list(); len(got) != 2 {
		t.Errorf("list: %v, want both", got)
	}
	text, _ = run(cli.ExitOK, "list", "--lane", "emails")
	if !strings.Contains(text, leased.String()) || !strings.Contains(text, "mailer (mailer-1) until") || strings.Contains(text, waiting.String()) ||
		strings.Contains(text, "more may follow") {
		t.Errorf("list text (the lease's worker and instance, no next page):\n%s", text)
	}
	// Pages: a full page says how to get the next, which lists the rest.
	text, _ = run(cli.ExitOK, "list", "--limit", "1")
	_, next, ok := strings.Cut(text, "more may follow: the next page is the same command with --after ")
	if !ok {
		t.Fatalf("list --limit 1 names no next page:\n%s", text)
	}
	first := list("--limit", "1")
	second := list("--limit", "1", "--after", strings.TrimSpace(next))
	if len(first) != 1 || len(second) != 1 || first[0] == second[0] {
		t.Errorf("pages of one: %v then %v, want the two executions", first, second)
	}
	if rest := list("--after", strings.TrimSpace(next)); strings.Join(rest, ",") != strings.Join(second, ",") {
		t.Errorf("after the first page: %v, want %v", rest, second)
	}
	if _, stderr := run(cli.ExitUsage, "list", "--after", "yesterday"); !strings.Contains(stderr, "--after") {
		t.Errorf("list --after yesterday: %s", stderr)
	}
	if _, stderr := run(cli.ExitUsage, "list", "--id", "ab"); !strings.Contains(stderr, "at least 4 hexadecimal digits") {
		t.Errorf("list --id ab: %s", stderr)
	}
	_, stderr := run(cli.ExitUsage, "list", "--state", "running")
	if !strings.Contains(stderr, "waiting, delayed") {
		t.Errorf("list --state running: %s", stderr)
	}

	// revoke: back to waiting, the lease fenced, a revoked event.
	v = getJSON("revoke", leased.String(), "--reason", "stuck", "--format", "json")
	if v.State != ff.PublicWaiting || v.Lease != nil || eventTypes(v.Events) != "lease/acquired lease/renewed lease/revoked" {
		t.Errorf("revoke: %+v, events %s", v, eventTypes(v.Events))
	}
	if _, err := st.Renew(ctx, leases[0], time.Hour); err == nil {
		t.Error("the revoked lease still renews")
	}
	_, stderr = run(cli.ExitFailure, "revoke", leased.String())
	if !strings.Contains(stderr, "holds no lease") {
		t.Errorf("second revoke: %s", stderr)
	}

	// cancel: terminal, with its completion event.
	v = getJSON("cancel", waiting.String(), "--reason", "not needed", "--by", "ops", "--format", "json")
	if v.State != ff.PublicCancelled || v.CancellationReason == nil || *v.CancellationReason != "not needed" ||
		v.CancelledBy == nil || *v.CancelledBy != "ops" || eventTypes(v.Events) != "completion/cancelled" {
		t.Errorf("cancel: %+v, events %s", v, eventTypes(v.Events))
	}
	_, stderr = run(cli.ExitFailure, "cancel", waiting.String())
	if !strings.Contains(stderr, "already terminal") {
		t.Errorf("second cancel: %s", stderr)
	}

	// Removed by retention: get says so, not "not found".
	if err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		_, err := actions.Of(st.Pipeline()).RemoveExecutions(ctx, tx, actions.RemoveParams{Partition: waiting.Partition, CutoffMs: st.NowMs() + 1, Limit: 10})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	_, stderr = run(cli.ExitFailure, "get", waiting.String())
	if !strings.Contains(stderr, "removed by retention at") || !strings.Contains(stderr, "cancelled since") {
		t.Errorf("get of a removed execution: %s", stderr)
	}

	// Mistakes.
	_, stderr = run(cli.ExitFailure, "get", ff.NewExecutionID(leased.Partition).String())
	if !strings.Contains(stderr, "not found") {
		t.Errorf("get of an unknown id: %s", stderr)
	}
	run(cli.ExitUsage, "get", "nonsense")
	run(cli.ExitUsage, "get")
	run(cli.ExitUsage, "frobnicate")
}

func eventTypes(evs []eventView) string {
	var s []string
	for _, e := range evs {
		s = append(s, e.Stream+"/"+e.Type)
	}
	return strings.Join(s, " ")
}
