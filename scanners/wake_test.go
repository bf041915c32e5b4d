package scanners_test

import (
	"context"
	"testing"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/scanners"
	"github.com/ffriver/ffriver/workers"
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
