package executions

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

// A batch starts at once for a lone call, and a further one starts beside
// it only once spill calls wait: calls that come one by one while a batch
// runs ride the next batch together instead of each starting a batch of
// its own (on 16 cores' settings, eight finish batches of one or two calls
// each held the runner at 0.42-0.59 of River's no-op jobs at 64 workers).
// The pipeline, not the database, is under test here: the batches' run
// records the calls it is given.
func TestCoalescerSpillsOnlyAFullEnoughQueue(t *testing.T) {
	// Every batch runs until the test lets them all end, so the batches
	// running are the batches started.
	release, started := make(chan struct{}), make(chan struct{}, 16)
	var mu sync.Mutex
	var sizes []int
	c := &coalescer[int, int]{max: 256, inFlight: 4, spill: 8,
		run: func(ctx context.Context, reqs []int, d *delivery[int, int]) {
			mu.Lock()
			sizes = append(sizes, len(reqs))
			mu.Unlock()
			started <- struct{}{}
			<-release
			for i, r := range reqs {
				d.deliver(i, result[int]{res: r})
			}
		}}
	running := func() int {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.running
	}
	var calls []*call[int, int]
	enqueue := func(n int) {
		for range n {
			cl := &call[int, int]{ctx: context.Background(), req: len(calls), done: make(chan struct{})}
			calls = append(calls, cl)
			c.enqueue(cl)
		}
	}

	enqueue(1)
	<-started // a lone call's batch, at once
	// The next calls queue behind the running batch until spill of them
	// wait.
	enqueue(7)
	if got := running(); got != 1 {
		close(release)
		t.Fatalf("7 calls waiting beside a running batch (spill 8): %d batches running, want 1", got)
	}
	enqueue(8)
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("15 calls waiting (spill 8): no second batch started")
	}
	close(release)
	for i, cl := range calls {
		<-cl.done
		if cl.out.err != nil || cl.out.res != i {
			t.Fatalf("call %d got %d, %v", i, cl.out.res, cl.out.err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	// The batch that started beside the first took every call waiting
	// then: at least spill.
	if len(sizes) < 2 || sizes[0] != 1 || slices.Max(sizes[1:]) < 8 {
		t.Errorf("batch sizes %v: want 1, then a batch of at least 8 (spill) beside it", sizes)
	}
}

// A call that is work enough on its own (a claim asking for spill
// executions or more: a runner's claim of a share of its slots) starts a
// batch beside a running one at once, as claims side by side need.
func TestCoalescerSpillsAHeavyCallAtOnce(t *testing.T) {
	release, started := make(chan struct{}), make(chan struct{}, 2)
	c := &coalescer[int, int]{max: 256, inFlight: 4, spill: 64, weight: func(r int) int { return r },
		run: func(ctx context.Context, reqs []int, d *delivery[int, int]) {
			started <- struct{}{}
			<-release
			for i, r := range reqs {
				d.deliver(i, result[int]{res: r})
			}
		}}
	light := &call[int, int]{ctx: context.Background(), req: 1, done: make(chan struct{})}
	c.enqueue(light)
	<-started
	heavy := &call[int, int]{ctx: context.Background(), req: 64, done: make(chan struct{})}
	c.enqueue(heavy)
	select { // the heavy call's batch runs beside the first
	case <-started:
	case <-time.After(10 * time.Second):
		close(release)
		t.Fatal("a call of spill's weight waited for the running batch instead of starting its own")
	}
	close(release)
	<-light.done
	<-heavy.done
	if light.out.res != 1 || heavy.out.res != 64 {
		t.Fatalf("results %d and %d, want 1 and 64", light.out.res, heavy.out.res)
	}
}
