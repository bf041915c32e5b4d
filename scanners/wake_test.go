package scanners_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/jobs"
	"github.com/ffriver/ffriver/scanners"
	"github.com/ffriver/ffriver/workers"
	"github.com/riverqueue/river"
)

// The timer scanners' NextDueSQL finds the earliest due time after its
// bound, and a wake tick's Due (DueRequest.AfterMs) counts only what came
// due after the bound: two items of each timer, due at t+1 s and t+2 s.
func TestTimerScannersNextDueAndAfter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	k := fftest.New(t, nil)
	t0 := k.Clock.NowMs()
	first, second := t0+1000, t0+2000
	for _, due := range []int64{first, second} {
		k.Create(executions.CreateParams{Lane: "leased"})
		k.ClaimOne("leased", time.Duration(due-t0)*time.Millisecond)
		k.Create(executions.CreateParams{Lane: "delayed", DelayUntil: time.UnixMilli(due)})
		k.Create(executions.CreateParams{Lane: "deadline", Deadline: time.UnixMilli(due)})
	}
	for _, s := range []workers.NextDueScanner{scanners.AttemptTimeoutScanner{}, scanners.DelayedPromoterScanner{}, scanners.ExecutionDeadlineScanner{}} {
		req := workers.DueRequest{Store: k.Store, NowMs: t0 + 5000, Cap: 10}
		for after, want := range map[int64]int64{0: first, first - 1: first, first: second, second: 0} {
			sql, args := s.NextDueSQL(req, after)
			var next *int64
			if err := k.Store.Pool().QueryRow(ctx, sql, args...).Scan(&next); err != nil {
				t.Fatalf("%s: %v", s.Name(), err)
			}
			var got int64 // 0: none
			if next != nil {
				got = *next
			}
			if got != want {
				t.Errorf("%s: next due after %d = %d, want %d (0: none)", s.Name(), after, got, want)
			}
		}
		for after, want := range map[int64]int64{0: 2, first - 1: 2, first: 1, second: 0} {
			r := req
			r.AfterMs = after
			due, err := s.Due(ctx, k.Store.Pool(), r)
			if err != nil {
				t.Fatalf("%s: %v", s.Name(), err)
			}
			var n int64
			for _, d := range due {
				n += d.Count
			}
			if n != want {
				t.Errorf("%s: Due after %d counts %d, want %d", s.Name(), after, n, want)
			}
		}
	}
}

// The timer scanners' DueRangeQuery (workers.RangeScanner, a wake tick's
// items) returns the items that came due after its start and at or before
// its end (the ending instant included, as Scan takes it), with the
// filter, in due order, up to its limit.
func TestTimerScannersDueRange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	k := fftest.New(t, nil)
	t0 := k.Clock.NowMs()
	first, second := t0+1000, t0+2000
	// items[scanner][due] are the items of namespace "ns" due then; one
	// item of each timer in namespace "other" is due at first too.
	items := map[string]map[int64]river.JobArgs{}
	add := func(s string, due int64, it river.JobArgs) {
		if items[s] == nil {
			items[s] = map[int64]river.JobArgs{}
		}
		items[s][due] = it
	}
	for _, ns := range []string{"other", "ns"} {
		for _, due := range []int64{first, second} {
			if ns == "other" && due == second {
				continue
			}
			lane := "leased-" + ns
			k.Create(executions.CreateParams{Lane: lane, Namespace: ns})
			l := k.ClaimOne(lane, time.Duration(due-t0)*time.Millisecond)
			d := k.Create(executions.CreateParams{Lane: "delayed-" + ns, Namespace: ns, DelayUntil: time.UnixMilli(due)})
			dl := k.Create(executions.CreateParams{Lane: "deadline-" + ns, Namespace: ns, Deadline: time.UnixMilli(due)})
			if ns == "ns" {
				add(scanners.AttemptTimeout, due, jobs.ExpireAttemptArgs{ID: l.ID})
				add(scanners.DelayedPromoter, due, jobs.PromoteDelayedArgs{ID: d})
				add(scanners.ExecutionDeadline, due, jobs.ExpireDeadlineArgs{ID: dl})
			}
		}
	}
	enc := func(its []river.JobArgs) string {
		b, err := json.Marshal(its)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	run := func(s workers.RangeScanner, req workers.DueRequest, limit int) workers.ScanResult {
		t.Helper()
		q, err := s.DueRangeQuery(req, limit)
		if err != nil {
			t.Fatalf("%s: %v", s.Name(), err)
		}
		rows, err := k.Store.Pool().Query(ctx, q.SQL, q.Args...)
		if err != nil {
			t.Fatalf("%s: %v", s.Name(), err)
		}
		defer rows.Close()
		res, err := q.Read(rows)
		if err != nil {
			t.Fatalf("%s: %v", s.Name(), err)
		}
		return res
	}
	for _, s := range []workers.RangeScanner{scanners.AttemptTimeoutScanner{}, scanners.DelayedPromoterScanner{}, scanners.ExecutionDeadlineScanner{}} {
		at := items[s.Name()]
		for _, tc := range []struct {
			after, now int64
			limit      int
			want       []river.JobArgs
		}{
			{0, t0 + 5000, 10, []river.JobArgs{at[first], at[second]}},
			{first - 1, first, 10, []river.JobArgs{at[first]}},
			{first, first + 999, 10, nil},
			{first, second, 10, []river.JobArgs{at[second]}},
			{0, t0 + 5000, 1, []river.JobArgs{at[first]}},
		} {
			res := run(s, workers.DueRequest{Store: k.Store, NowMs: tc.now, AfterMs: tc.after, Filter: ff.Filter{Namespace: "ns"}}, tc.limit)
			if got, want := enc(res.Items), enc(tc.want); got != want || res.Candidates != len(tc.want) {
				t.Errorf("%s: items due in (%d, %d], limit %d: %d candidates, %s; want %s", s.Name(), tc.after-t0, tc.now-t0, tc.limit, res.Candidates, got, want)
			}
		}
		// Without the filter the other namespace's item is in the range too.
		if res := run(s, workers.DueRequest{Store: k.Store, NowMs: first, AfterMs: first - 1}, 10); res.Candidates != 2 {
			t.Errorf("%s: unfiltered, %d items due at %d, want 2", s.Name(), res.Candidates, first-t0)
		}
	}
}
