package pipeline_test

import (
	"slices"
	"testing"
	"time"

	"github.com/ffriver/ffriver"
	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/pipeline"
	"github.com/ffriver/ffriver/jobs"
	"github.com/ffriver/ffriver/scanners"
	"github.com/ffriver/ffriver/workers"
)

var (
	terminalExpired = state{"terminal", "unowned", "not_applicable", "attempt_terminal", "expired"}
	waitingRetry    = state{"runnable", "unowned", "eligible_now", "pending_retry_attempt", "waiting"}
)

func TestAttemptTimeoutExpiresAndRetries(t *testing.T) {
	t.Parallel()
	h := newHarness(t, ffriver.Config{})
	tags := map[string]string{ff.InstanceTagKey: "inst-1"}
	last := h.Create(executions.CreateParams{Lane: "l1", Namespace: "ns", Tags: tags})
	h.ClaimOne("l1", 10*time.Second)
	retry := h.Create(executions.CreateParams{Lane: "l2", Namespace: "ns", Tags: tags, RetryPolicy: executions.RetryPolicy{MaxRetries: 1}})
	h.ClaimOne("l2", 10*time.Second)
	live := h.Create(executions.CreateParams{Lane: "l3"})
	h.ClaimOne("l3", time.Hour)

	h.client(true, nil)
	h.clock.Advance(11 * time.Second)
	h.AwaitState(last, terminalExpired)
	h.AwaitState(retry, waitingRetry)
	h.Await("items settled", func() bool { return h.jobsSettled(jobs.KindExpireAttempt, jobs.KindScan) })

	h.WantEventStrings(last, []string{"acquired/ns/inst-1/1", "expired/ns/inst-1/1"}, []string{"expired/ns/inst-1"})
	h.WantEventStrings(retry, []string{"acquired/ns/inst-1/1", "expired/ns/inst-1/1"}, nil)
	if e := h.Get(retry); e.AttemptIndex != 1 || e.LastFailureMessage != "attempt_timeout" {
		t.Errorf("retried execution: attempt %d, message %q", e.AttemptIndex, e.LastFailureMessage)
	}
	h.WantState(live, state{"active", "leased", "not_applicable", "running_attempt", "active"})
	h.WantEventStrings(live, []string{"acquired///1"}, nil)
	if got := h.outcomes(jobs.KindExpireAttempt); !slices.Equal(got, []string{"processed", "processed"}) {
		t.Errorf("item outcomes = %v", got)
	}
}

func TestDelayedPromoter(t *testing.T) {
	t.Parallel()
	h := newHarness(t, ffriver.Config{})
	due := h.Create(executions.CreateParams{Lane: "l1", DelayUntil: time.UnixMilli(t0 + 5_000)})
	later := h.Create(executions.CreateParams{Lane: "l2", DelayUntil: time.UnixMilli(t0 + 60_000)})
	h.client(true, nil)
	h.clock.Advance(5 * time.Second) // delay_until <= now is due
	h.AwaitState(due, state{"runnable", "unowned", "eligible_now", "pending_first_attempt", "waiting"})
	h.Await("items settled", func() bool { return h.jobsSettled(jobs.KindPromoteDelayed, jobs.KindScan) })
	h.WantState(later, state{"runnable", "unowned", "not_eligible_until_time", "pending_first_attempt", "delayed"})
	h.WantEventStrings(due, nil, nil)
	if e := h.Get(due); e.DelayUntilMs != nil || e.BlockingReason != nil {
		t.Errorf("promoted execution keeps delay_until %v, blocking %v", e.DelayUntilMs, e.BlockingReason)
	}
	if got := h.outcomes(jobs.KindPromoteDelayed); !slices.Equal(got, []string{"processed"}) {
		t.Errorf("item outcomes = %v", got)
	}
}

func TestExecutionDeadline(t *testing.T) {
	t.Parallel()
	h := newHarness(t, ffriver.Config{})
	dl := time.UnixMilli(t0 + 5_000)
	leased := h.Create(executions.CreateParams{Lane: "l1", Namespace: "ns", Deadline: dl})
	h.ClaimOne("l1", time.Hour)
	waiting := h.Create(executions.CreateParams{Lane: "l2", Deadline: dl})
	notYet := h.Create(executions.CreateParams{Lane: "l3", Deadline: time.UnixMilli(t0 + 60_000)})
	h.client(true, nil)
	h.clock.Advance(6 * time.Second)
	h.AwaitState(leased, terminalExpired)
	h.AwaitState(waiting, terminalExpired)
	h.Await("items settled", func() bool { return h.jobsSettled(jobs.KindExpireDeadline, jobs.KindScan) })
	h.WantEventStrings(leased, []string{"acquired/ns//1", "expired/ns//1"}, []string{"expired/ns/"})
	h.WantEventStrings(waiting, nil, []string{"expired//"})
	h.WantState(notYet, state{"runnable", "unowned", "eligible_now", "pending_first_attempt", "waiting"})
	h.WantEventStrings(notYet, nil, nil)
}

// TestFilterIsDataNotSQL: namespace and tag filters full of SQL
// metacharacters select exactly the executions carrying those values.
func TestFilterIsDataNotSQL(t *testing.T) {
	t.Parallel()
	evilNS := `ns'; DROP TABLE ff_exec_core; --`
	evilKey := `k"') OR 1=1 --`
	evilVal := `v'||pg_sleep(10)||'`
	for _, tc := range []struct {
		name   string
		filter ff.Filter
	}{
		{"namespace", ff.Filter{Namespace: evilNS}},
		{"tag", ff.Filter{InstanceTag: &ff.Tag{Key: evilKey, Value: evilVal}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, ffriver.Config{Filter: tc.filter})
			dl := time.UnixMilli(t0 + 1_000)
			match := h.Create(executions.CreateParams{Lane: "l1", Namespace: evilNS, Tags: map[string]string{evilKey: evilVal}, Deadline: dl})
			otherNS := h.Create(executions.CreateParams{Lane: "l2", Namespace: "ns", Tags: map[string]string{evilKey: evilVal}, Deadline: dl})
			otherTag := h.Create(executions.CreateParams{Lane: "l3", Namespace: evilNS, Tags: map[string]string{evilKey: "x"}, Deadline: dl})
			none := h.Create(executions.CreateParams{Lane: "l4", Deadline: dl})
			c := h.client(true, nil)
			h.clock.Advance(2 * time.Second)
			h.AwaitState(match, terminalExpired)
			// Two more scans of every due partition pass without touching the rest.
			h.Await("two more ticks", func() bool {
				return h.Count(`SELECT count(*) FROM river_job WHERE kind = 'ff.tick' AND state = 'completed'
					AND args->>'scanner' = 'execution_deadline'`) >= 4
			})
			h.Await("scans settled", func() bool { return h.jobsSettled(jobs.KindScan, jobs.KindExpireDeadline) })
			waiting := state{"runnable", "unowned", "eligible_now", "pending_first_attempt", "waiting"}
			switch tc.name {
			case "namespace":
				h.AwaitState(otherTag, terminalExpired)
				h.WantState(otherNS, waiting)
			case "tag":
				h.AwaitState(otherNS, terminalExpired)
				h.WantState(otherTag, waiting)
			}
			h.WantState(none, waiting)
			if q := pipeline.Of(h.ff).ScanQueue(); q == jobs.QueueScan || len(q) > 64 {
				t.Errorf("filtered scan queue %q", q)
			}
			if n := h.Count(`SELECT count(*) FROM river_job WHERE queue IN ('ff_scan', 'ff_apply', 'default')`); n != 0 {
				t.Errorf("%d jobs of a filtered pipeline in unfiltered queues", n)
			}
			_ = c
		})
	}
}

// TestScanBacklogContinues: a scan that fills its batch re-enqueues itself
// after its last candidate; a backlog larger than the batch drains.
func TestScanBacklogContinues(t *testing.T) {
	t.Parallel()
	h := newHarness(t, ffriver.Config{Scanners: map[string]workers.Settings{
		scanners.DelayedPromoter: {Interval: time.Hour, Batch: 3}}})
	var ids []ff.ExecutionID
	for i := range 10 {
		ids = append(ids, h.Create(executions.CreateParams{Lane: "same-lane", DelayUntil: time.UnixMilli(t0 + int64(i))}))
	}
	h.clock.Advance(time.Second)
	h.client(true, nil) // the tick runs on start, then not for an hour
	for _, id := range ids {
		h.AwaitState(id, state{"runnable", "unowned", "eligible_now", "pending_first_attempt", "waiting"})
	}
	h.Await("settled", func() bool { return h.jobsSettled(jobs.KindScan, jobs.KindPromoteDelayed) })
	var cont int
	for _, o := range h.outputs(jobs.KindScan) {
		if o["continued"] == true {
			cont++
		}
	}
	if cont != 3 { // 3+3+3 full, then 1
		t.Errorf("%d scans continued, want 3", cont)
	}
	if got := len(h.outcomes(jobs.KindPromoteDelayed)); got != 10 {
		t.Errorf("%d promote jobs, want 10", got)
	}
}
