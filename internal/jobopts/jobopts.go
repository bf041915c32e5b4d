// Package jobopts holds the River insert and retry policy of ffriver's jobs
// (package jobs): their uniqueness, attempt limits and backoff.
package jobopts

import (
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// InFlight are the job states in which a unique ffriver job blocks a
// duplicate: everything but the finalized states. Leaving "completed" out
// matters: River's default would block a new job for an item until the
// completed one is cleaned up (24 h), so an execution that comes due again
// would wait a day.
func InFlight() []rivertype.JobState {
	return []rivertype.JobState{
		rivertype.JobStateAvailable,
		rivertype.JobStatePending,
		rivertype.JobStateRetryable,
		rivertype.JobStateRunning,
		rivertype.JobStateScheduled,
	}
}

// UniqueInFlight is the unique option of every ffriver job: one job per kind
// and arguments while it is in flight.
func UniqueInFlight() river.UniqueOpts {
	return river.UniqueOpts{ByArgs: true, ByState: InFlight()}
}

// UniqueTick is the unique option of ticks: one per scanner (and filter)
// while in flight within each second. The period matters when a process dies
// while running a tick: that tick stays "running" until River's rescuer
// gives up on it (the scheduler's --rescue-after plus up to 30 s), and with
// plain in-flight uniqueness every later tick of the scanner would be
// skipped as its duplicate meanwhile, stalling the scanner. With the period
// a stuck tick blocks only ticks of its own second. Two ticks of one
// scanner running at once are harmless: scans and items stay unique.
func UniqueTick() river.UniqueOpts {
	return river.UniqueOpts{ByArgs: true, ByPeriod: time.Second, ByState: InFlight()}
}

// Attempt limits. Ticks are not retried (the next tick comes one interval
// later); scans and items retry a few times with a short backoff, and an item
// that still fails is discarded: the next scan re-creates it if the
// execution is still due, so nothing is lost and a permanent error costs a
// handful of attempts per scan interval instead of River's 25.
const (
	TickMaxAttempts = 1
	ScanMaxAttempts = 3
	ItemMaxAttempts = 5
)

// RetryDelay is the backoff of ffriver's jobs after the attempt-th failed
// attempt: 2^attempt seconds, at most one minute.
func RetryDelay(attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	if attempt > 6 {
		return time.Minute
	}
	return time.Duration(1<<attempt) * time.Second
}

// QueueFetchCooldown is the FetchCooldown of ffriver's two queues,
// documented (and read by applications) as ffriver.QueueFetchCooldown.
const QueueFetchCooldown = 5 * time.Millisecond
