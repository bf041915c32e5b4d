package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"runtime/metrics"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ffriver/ffriver/executions"
	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/outbox"
	"github.com/ffriver/ffriver/subscribe"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// StreamOptions size the stream scenario.
type StreamOptions struct {
	// EventsPerSec is the steady rate at which the writers commit lease
	// events in the latency runs (default 1,000).
	EventsPerSec int
	// Duration of the latency run with the Waker (default 30s). The
	// poll-only run lasts a third of it, at least 5 s (or Duration when that
	// is shorter).
	Duration time.Duration
	// CatchUp is the backlog of lease events the catch-up run drains
	// (default 1,000,000).
	CatchUp int
	// Writers committing the events (default 16). Each owns LeasesPerWriter
	// leases and renews them in turn.
	Writers int
	// LeasesPerWriter (default 8).
	LeasesPerWriter int
	// WakeInterval of the Waker (default outbox.DefaultWakeInterval).
	WakeInterval time.Duration
}

// Targets of the stream scenario (DESIGN §7).
const (
	streamP50Target     = 5 * time.Millisecond
	streamP99Target     = 50 * time.Millisecond
	catchUpTarget       = 500_000 // events/s
	catchUpHeapTarget   = 64      // MiB of peak heap growth while catching up
	catchUpGrowthMargin = 8       // MiB the live heap may grow from the first half of the drain to the second
)

// Stream measures the lease stream (subscribe.Leases, default options) the
// way a consumer sees it.
//
// Latency: Writers commit Renew transitions through executions.Store at a
// steady EventsPerSec for Duration, while one stream started from now
// consumes them. Each event's latency is the time from the moment its Renew
// returned (the transaction had committed) to the moment the consumer's
// Next returned it. The run is done twice: with an outbox.Waker on the
// store (the wake-up path: a debounced NOTIFY after commits) and, as the
// baseline, without one, where the stream only finds events by polling.
// Targets: with the Waker, p50 ≤ 5 ms and p99 ≤ 50 ms. The run with the
// Waker is repeated (for the poll-only run's duration) while a session
// sits idle in a transaction holding an xid, first in another database of
// the server, then having written an event to the schema's own outbox:
// the targets are the same, the baseline is the run without it.
//
// Catch-up: CatchUp lease events are bulk-inserted, then a stream started
// at the beginning drains them. Target ≥ 500,000 events/s. While it drains,
// the process's heap is sampled every few milliseconds: memory must stay
// flat, that is the peak heap growth over the heap before the drain stays
// under 64 MiB (a bounded buffer, whatever the backlog), and the live heap
// does not grow from the first half of the drain to the second.
func Stream(ctx context.Context, env *Env, o StreamOptions) ([]Result, error) {
	if o.EventsPerSec == 0 {
		o.EventsPerSec = 1000
	}
	if o.Duration == 0 {
		o.Duration = 30 * time.Second
	}
	if o.CatchUp == 0 {
		o.CatchUp = 1_000_000
	}
	if o.Writers == 0 {
		o.Writers = 16
	}
	if o.LeasesPerWriter == 0 {
		o.LeasesPerWriter = 8
	}
	if o.WakeInterval == 0 {
		o.WakeInterval = outbox.DefaultWakeInterval
	}
	if o.EventsPerSec < 0 || o.Duration < 0 || o.CatchUp < 0 || o.Writers < 0 || o.LeasesPerWriter < 0 || o.WakeInterval < 0 {
		return nil, ff.Validationf("stream bench", "sizes must be positive")
	}
	pollOnly := max(o.Duration/3, min(o.Duration, 5*time.Second))

	pool, schema, cleanup, err := env.scratch(ctx, "stream", int32(o.Writers+4))
	if err != nil {
		return nil, err
	}
	defer cleanup()

	leases, err := streamLeases(ctx, pool, schema, o.Writers, o.LeasesPerWriter)
	if err != nil {
		return nil, err
	}

	env.Logger.InfoContext(ctx, "bench stream: commit → consumer latency with the Waker",
		"events_per_sec", o.EventsPerSec, "for", o.Duration, "writers", o.Writers, "wake_interval", o.WakeInterval)
	woke, err := latencyWithWaker(ctx, env, pool, schema, leases, o.EventsPerSec, o.Duration, o.WakeInterval)
	if err != nil {
		return nil, fmt.Errorf("stream bench (with the Waker): %w", err)
	}

	noWaker, err := executions.Open(ctx, pool, executions.Config{Schema: schema})
	if err != nil {
		return nil, err
	}
	env.Logger.InfoContext(ctx, "bench stream: commit → consumer latency without the Waker (poll only)",
		"events_per_sec", o.EventsPerSec, "for", pollOnly)
	polled, err := streamLatency(ctx, env, pool, schema, noWaker, leases, o.EventsPerSec, pollOnly)
	if err != nil {
		return nil, fmt.Errorf("stream bench (poll only): %w", err)
	}

	// The same run, the Waker on, while a session sits idle in a
	// transaction holding an xid: in another database of the server, then
	// in this schema's outbox (it wrote an event and never commits).
	idle := make(map[string]latencyStats, 2)
	for _, where := range []string{idleElsewhere, idleInOutbox} {
		stats, err := streamIdleRun(ctx, env, pool, schema, leases, o, pollOnly, where)
		if err != nil {
			return nil, fmt.Errorf("stream bench (idle transaction %s): %w", where, err)
		}
		idle[where] = stats
	}

	// Replay of what the latency runs wrote: events committed live by
	// concurrent writers, across thousands of ticks.
	rp, err := streamReplay(ctx, env, pool, schema)
	if err != nil {
		return nil, fmt.Errorf("stream bench (replay): %w", err)
	}

	env.Logger.InfoContext(ctx, "bench stream: catch-up", "events", o.CatchUp)
	cu, err := streamCatchUp(ctx, env, pool, schema, o.CatchUp)
	if err != nil {
		return nil, fmt.Errorf("stream bench (catch-up): %w", err)
	}

	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	rate := fmt.Sprintf("%d events/s, Waker every ≥ %s", o.EventsPerSec, o.WakeInterval)
	base := fmt.Sprintf("poll only (no Waker, poll every %s)", subscribe.DefaultPollInterval)
	ratio := func(a, b time.Duration) float64 {
		if b <= 0 {
			return 0
		}
		return float64(a) / float64(b)
	}
	results := []Result{
		{Scenario: "stream", Figure: "commit → consumer p50, " + rate, Value: ms(woke.p50), Unit: "ms",
			Baseline: base, BaselineValue: ms(polled.p50), Ratio: ratio(woke.p50, polled.p50),
			Target: "≤ 5 ms", Met: met(woke.p50 <= streamP50Target), Note: woke.note("with the Waker") + " " + polled.note("poll only")},
		{Scenario: "stream", Figure: "commit → consumer p99, " + rate, Value: ms(woke.p99), Unit: "ms",
			Baseline: base, BaselineValue: ms(polled.p99), Ratio: ratio(woke.p99, polled.p99),
			Target: "≤ 50 ms", Met: met(woke.p99 <= streamP99Target)},
		{Scenario: "stream", Figure: "commit → consumer max, " + rate, Value: ms(woke.max), Unit: "ms",
			Baseline: base, BaselineValue: ms(polled.max), Ratio: ratio(woke.max, polled.max)},
	}
	noIdle := "no idle transaction (the run above, with the Waker)"
	for _, where := range []string{idleElsewhere, idleInOutbox} {
		st := idle[where]
		results = append(results,
			Result{Scenario: "stream", Figure: "commit → consumer p50, idle transaction " + where + ", " + rate, Value: ms(st.p50), Unit: "ms",
				Baseline: noIdle, BaselineValue: ms(woke.p50), Ratio: ratio(st.p50, woke.p50),
				Target: "≤ 5 ms", Met: met(st.p50 <= streamP50Target), Note: st.note("idle transaction " + where)},
			Result{Scenario: "stream", Figure: "commit → consumer p99, idle transaction " + where + ", " + rate, Value: ms(st.p99), Unit: "ms",
				Baseline: noIdle, BaselineValue: ms(woke.p99), Ratio: ratio(st.p99, woke.p99),
				Target: "≤ 50 ms", Met: met(st.p99 <= streamP99Target)})
	}
	results = append(results, []Result{
		{Scenario: "stream", Figure: fmt.Sprintf("replay from the start of the %d events the latency runs committed live, over %d ticks", rp.events, rp.ticks),
			Value: rp.rate, Unit: "events/s", Baseline: "the bulk catch-up below", BaselineValue: cu.rate, Ratio: ratioF(rp.rate, cu.rate),
			Note: fmt.Sprintf("%d events over %d ticks in %.2f s.", rp.events, rp.ticks, rp.elapsed.Seconds())},
		{Scenario: "stream", Figure: fmt.Sprintf("catch-up of %d events", o.CatchUp), Value: cu.rate, Unit: "events/s",
			Target: fmt.Sprintf("≥ %d", catchUpTarget), Met: met(cu.rate >= catchUpTarget), Note: cu.note()},
		{Scenario: "stream", Figure: "reader peak heap growth while catching up", Value: cu.peakGrowthMiB, Unit: "MiB",
			Baseline: "bytes allocated by the drain", BaselineValue: cu.allocMiB, Ratio: ratioF(cu.peakGrowthMiB, cu.allocMiB),
			Target: fmt.Sprintf("flat: ≤ %d MiB, live heap not growing", catchUpHeapTarget),
			Met:    met(cu.peakGrowthMiB <= catchUpHeapTarget && cu.live2MiB <= cu.live1MiB+catchUpGrowthMargin)},
	}...)
	return results, nil
}

// Where streamIdleRun keeps its idle transaction.
const (
	idleElsewhere = "in another database"
	idleInOutbox  = "in this schema's outbox"
)

// streamIdleRun is a latency run with the Waker while a session is idle in
// a transaction that holds an xid, in another database of the server
// (idleElsewhere) or having written an event to the schema's lease outbox
// (idleInOutbox). The transaction rolls back after the run: its event is
// never delivered, and nothing else may wait for it.
func streamIdleRun(ctx context.Context, env *Env, pool *pgxpool.Pool, schema string, leases [][]executions.Lease,
	o StreamOptions, d time.Duration, where string) (latencyStats, error) {
	cfg := pool.Config().ConnConfig.Copy()
	if where == idleElsewhere {
		cfg.Database = "postgres"
		delete(cfg.RuntimeParams, "search_path")
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return latencyStats{}, fmt.Errorf("connecting the idle session: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	tx, err := conn.Begin(ctx)
	if err != nil {
		return latencyStats{}, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if where == idleElsewhere {
		_, err = tx.Exec(ctx, `SELECT pg_current_xact_id()`)
	} else {
		_, err = tx.Exec(ctx, `INSERT INTO ff_lease_event (execution_id, event_type, occurred_at_ms, partition_key)
			VALUES (gen_random_uuid()::text, 'renewed', 0, 0)`)
	}
	if err != nil {
		return latencyStats{}, fmt.Errorf("opening the idle transaction: %w", err)
	}

	env.Logger.InfoContext(ctx, "bench stream: commit → consumer latency with an idle transaction "+where,
		"events_per_sec", o.EventsPerSec, "for", d)
	return latencyWithWaker(ctx, env, pool, schema, leases, o.EventsPerSec, d, o.WakeInterval)
}

func ratioF(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// streamLeases creates and claims writers×perWriter executions, spread over
// lanes (and so partitions), and returns them grouped by writer.
func streamLeases(ctx context.Context, pool *pgxpool.Pool, schema string, writers, perWriter int) ([][]executions.Lease, error) {
	st, err := executions.Open(ctx, pool, executions.Config{Schema: schema})
	if err != nil {
		return nil, err
	}
	out := make([][]executions.Lease, writers)
	for w := range writers {
		lane := fmt.Sprintf("bench-stream-%d", w)
		for range perWriter {
			if _, err := st.Create(ctx, executions.CreateParams{Lane: lane, Namespace: "bench",
				Tags: map[string]string{"cairn.instance_id": "bench-1"}}); err != nil {
				return nil, err
			}
		}
		ls, err := st.Claim(ctx, executions.ClaimParams{Lane: lane, WorkerID: "bench", WorkerInstanceID: "bench-1",
			LeaseTTL: 24 * time.Hour, Max: perWriter})
		if err != nil {
			return nil, err
		}
		if len(ls) != perWriter {
			return nil, fmt.Errorf("claimed %d of %d executions in lane %s", len(ls), perWriter, lane)
		}
		out[w] = ls
	}
	return out, nil
}

// latencyStats summarises one latency run.
type latencyStats struct {
	events        int
	duration      time.Duration // first due time to last commit
	rate          float64       // achieved events/s
	maxLag        time.Duration // how late a writer started its worst transition
	p50, p99, max time.Duration
	early         int // events received before their Renew returned
	// renewP50 and renewP99 are how long a Renew call took (begin to
	// commit acknowledged): a transaction holds back the delivery of every
	// transaction after it in stream order while it is open.
	renewP50, renewP99, renewMax time.Duration
}

func (s latencyStats) note(name string) string {
	n := fmt.Sprintf("%s: %d events over %.1f s (%.0f/s achieved, worst writer lag %.1f ms), p50 %.2f ms, p99 %.2f ms, max %.1f ms; Renew call p50 %.2f ms, p99 %.2f ms, max %.1f ms.",
		name, s.events, s.duration.Seconds(), s.rate, float64(s.maxLag)/1e6,
		float64(s.p50)/1e6, float64(s.p99)/1e6, float64(s.max)/1e6,
		float64(s.renewP50)/1e6, float64(s.renewP99)/1e6, float64(s.renewMax)/1e6)
	if s.early > 0 {
		n += fmt.Sprintf(" %d events reached the consumer before their Renew call had returned (the reader saw the commit before the writer got the acknowledgement); they count with their negative latency.", s.early)
	}
	return n
}

// latencyWithWaker is streamLatency through a store whose Waker (wake
// interval wake) runs for the run's length, as the processes' stores do.
func latencyWithWaker(ctx context.Context, env *Env, pool *pgxpool.Pool, schema string, leases [][]executions.Lease,
	rate int, d, wake time.Duration) (latencyStats, error) {
	wctx, stopWaker := context.WithCancel(ctx)
	waker := outbox.NewWaker(pool, schema, wake, env.Logger)
	wakerDone := make(chan struct{})
	go func() {
		defer close(wakerDone)
		waker.Run(wctx)
	}()
	defer func() {
		stopWaker()
		<-wakerDone
	}()
	st, err := executions.Open(ctx, pool, executions.Config{Schema: schema, Waker: waker})
	if err != nil {
		return latencyStats{}, err
	}
	return streamLatency(ctx, env, pool, schema, st, leases, rate, d)
}

// streamLatency runs writers renewing their leases (in place: leases is
// updated) at rate events/s for d, while one stream from now consumes, and
// returns the commit → consumer latency of every event.
func streamLatency(ctx context.Context, env *Env, pool *pgxpool.Pool, schema string, st *executions.Store,
	leases [][]executions.Lease, rate int, d time.Duration) (latencyStats, error) {
	writers := len(leases)
	// slot numbers every lease; an event is identified by its execution's
	// slot and its rank among that execution's events: one writer renews
	// each lease, one transaction after another, and the stream delivers
	// one execution's events in commit order.
	slotOf := map[ff.ExecutionID]int{}
	var slots int
	for _, ls := range leases {
		for _, l := range ls {
			slotOf[l.ID] = slots
			slots++
		}
	}
	commits := make([][]time.Time, slots)
	recvs := make([][]time.Time, slots)

	// Warm up before the stream starts: one Renew per writer at once, so
	// that every writer has an open pool connection with its statements
	// prepared when the clock starts.
	var warm sync.WaitGroup
	warmErrs := make([]error, writers)
	for w := range writers {
		warm.Go(func() {
			leases[w][0], warmErrs[w] = st.Renew(ctx, leases[w][0], 24*time.Hour)
		})
	}
	warm.Wait()
	if err := errors.Join(warmErrs...); err != nil {
		return latencyStats{}, fmt.Errorf("warming up: %w", err)
	}

	s, err := subscribe.Leases(ctx, pool, subscribe.Options{Schema: schema, Logger: env.Logger})
	if err != nil {
		return latencyStats{}, err
	}
	defer s.Close()

	cctx, stopConsumer := context.WithCancel(ctx)
	defer stopConsumer()
	var received atomic.Int64
	consumerErr := make(chan error, 1)
	go func() {
		for {
			ev, err := s.Next(cctx)
			now := time.Now()
			if err != nil {
				if cctx.Err() != nil {
					err = nil
				}
				consumerErr <- err
				return
			}
			slot, ok := slotOf[ev.ExecutionID]
			if !ok || ev.Type != ff.LeaseRenewed {
				consumerErr <- fmt.Errorf("unexpected %s event for %s", ev.Type, ev.ExecutionID)
				return
			}
			recvs[slot] = append(recvs[slot], now)
			received.Add(1)
		}
	}()

	period := time.Second / time.Duration(rate)
	start := time.Now().Add(10 * time.Millisecond)
	end := start.Add(d)
	var wg sync.WaitGroup
	errs := make([]error, writers)
	lags := make([]time.Duration, writers)
	lasts := make([]time.Time, writers)
	calls := make([][]time.Duration, writers)
	for w := range writers {
		wg.Go(func() {
			mine := leases[w]
			for k := 0; ; k++ {
				due := start.Add(time.Duration(k*writers+w) * period)
				if !due.Before(end) {
					return
				}
				if wait := time.Until(due); wait > 0 {
					select {
					case <-ctx.Done():
						errs[w] = ctx.Err()
						return
					case <-time.After(wait):
					}
				}
				lags[w] = max(lags[w], time.Since(due))
				i := k % len(mine)
				began := time.Now()
				l, err := st.Renew(ctx, mine[i], 24*time.Hour)
				if err != nil {
					errs[w] = err
					return
				}
				at := time.Now()
				calls[w] = append(calls[w], at.Sub(began))
				mine[i] = l
				slot := slotOf[l.ID]
				commits[slot] = append(commits[slot], at)
				lasts[w] = at
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return latencyStats{}, fmt.Errorf("writer: %w", err)
	}
	committed := 0
	for _, c := range commits {
		committed += len(c)
	}

	// Wait until every committed event has arrived (a poll interval or two
	// at most), then stop the consumer.
	deadline := time.Now().Add(10 * time.Second)
	for received.Load() < int64(committed) && time.Now().Before(deadline) {
		select {
		case err := <-consumerErr:
			if err == nil {
				err = errors.New("consumer stopped")
			}
			return latencyStats{}, fmt.Errorf("stream: %w", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	// Anything more than what was committed would be a repeat.
	time.Sleep(50 * time.Millisecond)
	stopConsumer()
	if err := <-consumerErr; err != nil {
		return latencyStats{}, fmt.Errorf("stream: %w", err)
	}
	if got := received.Load(); got != int64(committed) {
		return latencyStats{}, fmt.Errorf("stream delivered %d events, writers committed %d", got, committed)
	}

	stats := latencyStats{events: committed}
	lat := make([]time.Duration, 0, committed)
	for slot := range commits {
		if len(recvs[slot]) != len(commits[slot]) {
			return latencyStats{}, fmt.Errorf("lease %d: %d events delivered, %d committed", slot, len(recvs[slot]), len(commits[slot]))
		}
		for k, c := range commits[slot] {
			l := recvs[slot][k].Sub(c)
			if l < 0 {
				stats.early++
			}
			lat = append(lat, l)
		}
	}
	if committed == 0 {
		return latencyStats{}, errors.New("no event was committed")
	}
	slices.Sort(lat)
	stats.p50, stats.p99, stats.max = quantile(lat, 0.50), quantile(lat, 0.99), lat[len(lat)-1]
	last := start
	for _, t := range lasts {
		if t.After(last) {
			last = t
		}
	}
	stats.duration = last.Sub(start)
	if stats.duration > 0 {
		stats.rate = float64(committed) / stats.duration.Seconds()
	}
	stats.maxLag = slices.Max(lags)
	renews := slices.Concat(calls...)
	slices.Sort(renews)
	stats.renewP50, stats.renewP99, stats.renewMax = quantile(renews, 0.5), quantile(renews, 0.99), renews[len(renews)-1]
	return stats, nil
}

// quantile returns the q-quantile of sorted (nearest rank).
func quantile[T cmp.Ordered](sorted []T, q float64) T {
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// catchUpStats summarises the catch-up run.
type catchUpStats struct {
	events        int
	elapsed       time.Duration
	rate          float64
	beforeMiB     float64 // heap objects after a GC, before the drain
	peakGrowthMiB float64 // peak heap objects (live and not yet swept) over before
	live1MiB      float64 // peak live heap (as of the last GC) in the first half of the drain, over before
	live2MiB      float64 // same in the second half
	allocMiB      float64 // bytes allocated during the drain
	gcs           uint64
	samples       int
}

func (c catchUpStats) note() string {
	return fmt.Sprintf("%d events in %.2f s; heap before %.1f MiB, peak growth %.1f MiB; live heap growth %.1f MiB (first half) → %.1f MiB (second half); %.0f MiB allocated, %d GCs, %d heap samples.",
		c.events, c.elapsed.Seconds(), c.beforeMiB, c.peakGrowthMiB, c.live1MiB, c.live2MiB, c.allocMiB, c.gcs, c.samples)
}

// Runtime metrics sampled during the catch-up.
const (
	mHeapObjects = "/memory/classes/heap/objects:bytes"
	mHeapLive    = "/gc/heap/live:bytes"
	mHeapAllocs  = "/gc/heap/allocs:bytes"
	mGCCycles    = "/gc/cycles/total:gc-cycles"
)

func readMem(s []metrics.Sample) (objects, live, allocs, gcs uint64) {
	metrics.Read(s)
	return s[0].Value.Uint64(), s[1].Value.Uint64(), s[2].Value.Uint64(), s[3].Value.Uint64()
}

// streamCatchUp bulk-inserts n lease events into an emptied table, then
// drains them with a stream from the beginning, sampling the heap.
func streamCatchUp(ctx context.Context, env *Env, pool *pgxpool.Pool, schema string, n int) (catchUpStats, error) {
	if _, err := pool.Exec(ctx, `TRUNCATE ff_lease_event`); err != nil {
		return catchUpStats{}, fmt.Errorf("emptying ff_lease_event: %w", err)
	}
	// Rows as the outbox writes them: namespace, tag, lease id, attempt,
	// epoch and worker set. A few big statements, each its own transaction.
	const chunk = 250_000
	for lo := 1; lo <= n; lo += chunk {
		hi := min(lo+chunk-1, n)
		if _, err := pool.Exec(ctx, `
INSERT INTO ff_lease_event (execution_id, lease_id, event_type, occurred_at_ms, partition_key, namespace, instance_tag,
                            attempt_index, lease_epoch, worker_instance_id)
SELECT gen_random_uuid()::text, gen_random_uuid()::text, 'renewed', $3::bigint + g, g % 256, 'ns-' || (g % 8), 'inst-' || (g % 4),
       g % 3, g % 5, 'worker-' || (g % 16)
FROM generate_series($1::int, $2::int) g`, lo, hi, time.Now().UnixMilli()); err != nil {
			return catchUpStats{}, fmt.Errorf("inserting the backlog: %w", err)
		}
	}
	if _, err := pool.Exec(ctx, `ANALYZE ff_lease_event`); err != nil {
		return catchUpStats{}, fmt.Errorf("analyzing: %w", err)
	}

	samples := []metrics.Sample{{Name: mHeapObjects}, {Name: mHeapLive}, {Name: mHeapAllocs}, {Name: mGCCycles}}
	runtime.GC()
	before, _, allocs0, gcs0 := readMem(samples)
	live0 := before

	var consumed atomic.Int64
	var peak, live1, live2 uint64
	var nsamples int
	stopSampler := make(chan struct{})
	samplerDone := make(chan struct{})
	go func() {
		defer close(samplerDone)
		s := slices.Clone(samples)
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			objects, live, _, _ := readMem(s)
			nsamples++
			peak = max(peak, objects)
			if consumed.Load() < int64(n/2) {
				live1 = max(live1, live)
			} else {
				live2 = max(live2, live)
			}
			select {
			case <-stopSampler:
				return
			case <-tick.C:
			}
		}
	}()

	start := time.Now()
	err := drain(ctx, pool, schema, n, env, &consumed)
	elapsed := time.Since(start)
	close(stopSampler)
	<-samplerDone
	if err != nil {
		return catchUpStats{}, err
	}
	_, _, allocs1, gcs1 := readMem(samples)

	mib := func(b uint64) float64 { return float64(b) / (1 << 20) }
	growth := func(v uint64) float64 {
		if v < live0 {
			return 0
		}
		return mib(v - live0)
	}
	return catchUpStats{
		events: n, elapsed: elapsed, rate: float64(n) / elapsed.Seconds(),
		beforeMiB: mib(before), peakGrowthMiB: growth(peak),
		live1MiB: growth(live1), live2MiB: growth(live2),
		allocMiB: mib(allocs1 - allocs0), gcs: gcs1 - gcs0, samples: nsamples,
	}, nil
}

// replayStats summarises the replay run.
type replayStats struct {
	events, ticks int
	elapsed       time.Duration
	rate          float64
}

// streamReplay drains, from the beginning, the events the latency runs
// wrote: committed live by concurrent writers while streams took ticks, so
// the reader walks thousands of ticks, most with transactions that were in
// progress at the tick before.
func streamReplay(ctx context.Context, env *Env, pool *pgxpool.Pool, schema string) (replayStats, error) {
	var st replayStats
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM ff_lease_event), (SELECT count(*) FROM ff_stream_tick)`).
		Scan(&st.events, &st.ticks); err != nil {
		return st, fmt.Errorf("counting: %w", err)
	}
	env.Logger.InfoContext(ctx, "bench stream: replay of the latency runs' events", "events", st.events, "ticks", st.ticks)
	var consumed atomic.Int64
	start := time.Now()
	if err := drain(ctx, pool, schema, st.events, env, &consumed); err != nil {
		return st, err
	}
	st.elapsed = time.Since(start)
	st.rate = float64(st.events) / st.elapsed.Seconds()
	return st, nil
}

// drain reads n events from the beginning of the lease stream, checking
// that they come in strictly increasing stream order, and counting them in
// consumed.
func drain(ctx context.Context, pool *pgxpool.Pool, schema string, n int, env *Env, consumed *atomic.Int64) error {
	s, err := subscribe.Leases(ctx, pool, subscribe.Options{Schema: schema, Start: subscribe.StartBeginning, Logger: env.Logger})
	if err != nil {
		return err
	}
	defer s.Close()
	var last subscribe.Cursor
	for i := range n {
		ev, err := s.Next(ctx)
		if err != nil {
			return fmt.Errorf("after %d of %d events: %w", i, n, err)
		}
		if i > 0 && !last.Less(ev.Cursor) {
			return fmt.Errorf("event %d (%s) does not follow %s", i, ev.Cursor, last)
		}
		last = ev.Cursor
		consumed.Add(1)
	}
	return nil
}
