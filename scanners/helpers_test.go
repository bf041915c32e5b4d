package scanners_test

import (
	"context"
	"testing"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/fftest"
	"github.com/ffriver/ffriver/jobs"
	"github.com/ffriver/ffriver/scanners"
	"github.com/ffriver/ffriver/workers"
)

// A scanner is only what is due: the execution_deadline scanner's Due counts
// the executions past their deadline per partition, and its Scan walks them
// in keyset order, a batch at a time, with the filter in SQL.
func TestExecutionDeadlineDueAndKeysetScan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := ff.NewManualClock(1_800_000_000_000)
	st, s := fftest.NewStore(t, executions.Config{Clock: clock})
	deadline := time.UnixMilli(clock.NowMs()).Add(time.Second)
	want := map[ff.ExecutionID]bool{}
	for i := range 5 {
		ns := "tenant-a"
		if i == 4 {
			ns = "tenant-b"
		}
		id, err := st.Create(ctx, executions.CreateParams{Lane: "lane", Namespace: ns, Deadline: deadline})
		if err != nil {
			t.Fatal(err)
		}
		if ns == "tenant-a" {
			want[id] = true
		}
	}
	if _, err := st.Create(ctx, executions.CreateParams{Lane: "lane", Namespace: "tenant-a"}); err != nil { // no deadline
		t.Fatal(err)
	}
	sc := scanners.ExecutionDeadlineScanner{}
	if due, err := sc.Due(ctx, s.Pool, workers.DueRequest{Store: st, NowMs: clock.NowMs()}); err != nil || len(due) != 0 {
		t.Fatalf("before the deadline: due %v, %v", due, err)
	}
	clock.Advance(2 * time.Second)
	due, err := sc.Due(ctx, s.Pool, workers.DueRequest{Store: st, NowMs: clock.NowMs()})
	if err != nil {
		t.Fatal(err)
	}
	if len(due) != 1 || due[0].Count != 5 || due[0].OldestMs != deadline.UnixMilli() {
		t.Fatalf("due %+v, want one partition with 5 due since %d", due, deadline.UnixMilli())
	}
	// Batches of 3, filtered to tenant-a: 3, then the last 1 after the cursor.
	filter := ff.Filter{Namespace: "tenant-a"}
	got := map[ff.ExecutionID]bool{}
	req := workers.ScanRequest{Store: st, Partition: due[0].Partition, NowMs: clock.NowMs(), Limit: 3, Filter: filter}
	for _, wantCandidates := range []int{3, 1} {
		res, err := sc.Scan(ctx, s.Pool, req)
		if err != nil {
			t.Fatal(err)
		}
		if res.Candidates != wantCandidates || len(res.Items) != wantCandidates {
			t.Fatalf("scan after %s: %d candidates, %d items; want %d", req.After, res.Candidates, len(res.Items), wantCandidates)
		}
		for _, it := range res.Items {
			got[it.(jobs.ExpireDeadlineArgs).ID] = true
		}
		req.After = res.Next
	}
	if len(got) != len(want) {
		t.Fatalf("scanned %d executions of tenant-a, want %d", len(got), len(want))
	}
	for id := range want {
		if !got[id] {
			t.Errorf("%s was not scanned", id)
		}
	}
}
