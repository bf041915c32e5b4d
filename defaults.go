package ffriver

import (
	"runtime"

	"github.com/ffriver/ffriver/internal/apply"
)

// The concurrency defaults come from the machine, not from constants tuned on
// two cores. The rule, for a process whose Go runtime may run P threads at
// once (runtime.GOMAXPROCS, which is the cores the process is given:
// runtime.NumCPU, or the container's CPU quota):
//
//   - group lanes (Config.GroupLanes: group transactions of one kind at
//     once): P/2, at least 4 and at most 32 (4 on 2 to 8 cores, 8 on 16);
//     where New is given a pool, at most (MaxConns − 4)/2, so that two
//     kinds' lanes fit beside River's own connections, but never below 2;
//   - apply workers (ffworker --concurrency, ClientOptions.ApplyWorkers in
//     the binaries): lanes × 4 groups (the group size is 64), so that
//     every lane has a full group in its transaction and the next ones
//     fetched and waiting (1,024 on 2 cores, 2,048 on 16);
//   - pool connections (PoolConns): one per apply worker up to
//     max(16, 2 × lanes) (the grouped kinds hold one a lane, two kinds may
//     drain at once; other items wait for one), one per scan worker, and 4
//     for River's fetches, completions and notifier: 22 on 2 to 16 cores,
//     38 on 32, so four ffworkers and a scheduler stay within Postgres'
//     default max_connections of 100 up to 16 cores.
//
// The scan workers are not scaled: ticks and partition scans are cheap reads
// that never limited a drain. Every value is overridden by its Config field
// or flag (Config.GroupLanes, ffworker --group-lanes and --concurrency,
// pool_max_conns in the database URL). ffctl bench tune sweeps around them;
// the rule is where its sweeps put the best setting (docs/performance.md,
// 27 November 2026): on the quiet 2-core machine 4 lanes and 512 to 1,024
// workers (1,024: 0.94 of the best; 2 lanes and 128, the previous 2-core
// defaults, 0.80–0.87), on 16 cores 8 lanes and 2,048 workers (1,024:
// 0.81). Apply workers are River worker slots, most of them holding a
// fetched item that waits for its lane, not a connection.
const (
	minGroupLanes = 4
	maxGroupLanes = 32
	// minPoolLanes is the least lanes a small pool is given.
	minPoolLanes = 2
	// workersPerLane is the apply workers per group lane: four groups, one
	// in the lane's transaction and the next ones fetched and waiting.
	workersPerLane = 4 * apply.DefaultGroupSize
	// riverConns are the pool connections River's own work needs:
	// producers' fetches, the batch completer, the notifier's LISTEN.
	riverConns = 4
	// minItemConns are the item connections a pool gets whatever the lanes.
	minItemConns = 16
)

// DefaultGroupLanes is the group lanes a process uses when
// Config.GroupLanes is 0 and no pool bounds them: runtime.GOMAXPROCS/2,
// at least 4 and at most 32 (see the rule above).
func DefaultGroupLanes() int { return groupLanes(runtime.GOMAXPROCS(0), 0) }

// DefaultApplyWorkers is the apply workers the binaries run unless told
// otherwise: DefaultGroupLanes × 4 × apply.DefaultGroupSize, so that
// every lane has a full group in its transaction and the next ones waiting
// (1,024 on 2 cores, 2,048 on 16).
func DefaultApplyWorkers() int { return DefaultGroupLanes() * workersPerLane }

// groupLanes is the rule for procs threads and, where maxConns > 0, a pool
// of that many connections.
func groupLanes(procs int, maxConns int32) int {
	lanes := min(max(procs/2, minGroupLanes), maxGroupLanes)
	if maxConns > 0 {
		lanes = min(lanes, max(int(maxConns-riverConns)/2, minPoolLanes))
	}
	return lanes
}

// PoolConns is the least MaxConns of the pool of a River client that works
// ffriver's queues with scanWorkers and applyWorkers workers and the default
// group lanes (DefaultGroupLanes): a connection per scan worker, one per
// apply worker up to max(16, 2 × lanes) (the apply engine groups items
// beyond that), and 4 for River's producers, leader election and
// maintenance. An application that embeds ffriver adds what its own queues
// use; ffworker sizes its pool with it.
func PoolConns(scanWorkers, applyWorkers int) int32 {
	return PoolConnsWithLanes(scanWorkers, applyWorkers, DefaultGroupLanes())
}

// PoolConnsWithLanes is PoolConns for a Service whose Config.GroupLanes is
// groupLanes (0: the default).
func PoolConnsWithLanes(scanWorkers, applyWorkers, groupLanes int) int32 {
	if groupLanes <= 0 {
		groupLanes = DefaultGroupLanes()
	}
	return int32(min(applyWorkers, max(minItemConns, 2*groupLanes)) + scanWorkers + riverConns)
}
