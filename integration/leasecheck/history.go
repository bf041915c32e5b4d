package leasecheck

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/ffriver/ffriver/ff"
)

// OffsetClock is an application process's clock: the system clock shifted
// by Offset. Each process of a run has its own, so the Stores of one run
// disagree about the time by up to the run's skew.
type OffsetClock struct{ Offset time.Duration }

// NowMs implements ff.Clock.
func (c OffsetClock) NowMs() int64 { return time.Now().Add(c.Offset).UnixMilli() }

var _ ff.Clock = OffsetClock{}

// Timeline is a run's monotonic time axis, the one porcupine's call and
// return times are on, and its mapping from the system clock.
type Timeline struct {
	start time.Time
	// scannerAhead bounds how far a binary's clock may be ahead of the
	// system clock (Faults.BinaryClockSkew / 2): a scanner transaction's
	// reading is that much late at most.
	scannerAhead time.Duration
}

// NewTimeline starts a timeline now.
func NewTimeline() Timeline { return Timeline{start: time.Now()} }

// WithScannerSkew returns the timeline for binaries whose clocks are up to
// ahead of the system clock.
func (tl Timeline) WithScannerSkew(ahead time.Duration) Timeline {
	tl.scannerAhead = ahead
	return tl
}

// ScannerNowMs is the latest a scanner's clock may read now: the system
// clock, plus how far a binary's may be ahead (WithScannerSkew).
func (tl Timeline) ScannerNowMs() int64 {
	return time.Now().Add(tl.scannerAhead).UnixMilli()
}

// FromScannerMs places a scanner's clock reading (ms) on the timeline: a
// lower bound of when it was taken, however far ahead its binary's clock
// ran (WithScannerSkew).
func (tl Timeline) FromScannerMs(ms int64) int64 {
	return tl.FromWallMs(ms) - int64(tl.scannerAhead)
}

// Now returns the monotonic time since the start, in ns.
func (tl Timeline) Now() int64 { return int64(time.Since(tl.start)) }

// wallSlackNs absorbs the difference between the monotonic and the system
// clock over a run (adjtime slews them apart by microseconds).
const wallSlackNs = int64(5 * time.Millisecond)

// FromWallMs places a system-clock reading (ms) on the timeline, early by
// the slack and the reading's truncation: a lower bound of when it was
// taken.
func (tl Timeline) FromWallMs(ms int64) int64 {
	return ms*int64(time.Millisecond) - tl.start.UnixNano() - wallSlackNs - int64(time.Millisecond)
}

// Call is one recorded operation of an application client: a plain call
// (one step) or a composite transaction (several ...Tx steps, then COMMIT).
type Call struct {
	// ID numbers the calls of a run in the order they were recorded.
	ID     int
	Client int
	// Process is the application process (Store) that ran it.
	Process int
	// Exec is the execution; "" for a claim on a shared lane whose outcome
	// is unknown (Lane names the lane).
	Exec  string
	Lane  string
	Steps []Step
	// Results of the steps that ran (nil for a plain call whose outcome is
	// unknown, until the outbox resolves it).
	Results []Result
	// Unknown: the outcome is unknown (an unknown error of a plain call,
	// or of a composite's COMMIT).
	Unknown bool
	// RolledBack: a composite whose steps all succeeded, rolled back on
	// purpose by its client instead of committed: it must leave nothing.
	RolledBack bool
	// Resolved: an unknown call whose transaction the outbox holds.
	Resolved bool
	// CallNs and ReturnNs on the run's timeline (ReturnNs is Unbounded
	// for an unknown outcome).
	CallNs, ReturnNs int64
	// Clock is the Store's clock before and after (Hi Unbounded for an
	// unknown outcome).
	Clock Window
	// WallHi is the latest a scanner's clock could read on return
	// (Timeline.ScannerNowMs).
	WallHi int64
	// Err is the error text, for reports.
	Err string
	// Tx is the call's transaction in the outbox, once matched.
	Tx *Tx
	// Runner: a package runner's call (runners.go).
	Runner bool
	// Maybe are the results the call had if one of the transactions that
	// other calls of unknown outcome fit too was its (see Output.Maybe).
	Maybe [][]Result
}

// failed reports whether a step failed or the client rolled the
// transaction back.
func (c *Call) failed() bool {
	if c.RolledBack {
		return true
	}
	for _, r := range c.Results {
		if r.Err != OK {
			return true
		}
	}
	return false
}

// writes reports whether the call, had it committed, wrote events: a call
// of only empty claims (or a Create) writes none.
func (c *Call) writes() bool {
	for i, st := range c.Steps {
		switch st.Kind {
		case OpCreate:
			continue
		case OpClaim:
			if i < len(c.Results) && c.Results[i].Empty {
				continue
			}
		}
		return true
	}
	return false
}

func (c *Call) input() Input {
	return Input{Exec: c.Exec, Client: c.Client, Steps: c.Steps, Clock: c.Clock, WallHi: c.WallHi}
}

func (c *Call) output() Output {
	return Output{Results: c.Results, Unknown: c.Unknown, Resolved: c.Resolved, Maybe: c.Maybe, RolledBack: c.RolledBack}
}

// operation is the call as porcupine sees it.
func (c *Call) operation() porcupine.Operation {
	return porcupine.Operation{ClientId: c.Client, Input: c.input(), Call: c.CallNs, Output: c.output(), Return: c.ReturnNs,
		Metadata: fmt.Sprintf("call %d, process %d: %s", c.ID, c.Process, c.Err)}
}

// String renders the call with its windows and outcome.
func (c *Call) String() string {
	ret := "∞"
	if c.ReturnNs != Unbounded {
		ret = fmt.Sprint(time.Duration(c.ReturnNs).Round(time.Microsecond))
	}
	s := fmt.Sprintf("call %d client %d (process %d) [%s, %s] clock %s: %s", c.ID, c.Client, c.Process,
		time.Duration(c.CallNs).Round(time.Microsecond), ret, c.Clock, Describe(c.input(), c.output()))
	if c.Err != "" {
		s += " (" + c.Err + ")"
	}
	return s
}

// Recorder collects a run's calls. It is safe for concurrent use.
type Recorder struct {
	mu    sync.Mutex
	calls []*Call
}

// Add records c and numbers it.
func (r *Recorder) Add(c *Call) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c.ID = len(r.calls) + 1
	r.calls = append(r.calls, c)
}

// Calls returns the calls recorded so far.
func (r *Recorder) Calls() []*Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*Call(nil), r.calls...)
}

// Classify maps an error of the executions API to its class. An error that
// is none of the typed lease errors (a lost connection, a timeout, a
// failed COMMIT) leaves the outcome unknown.
func Classify(err error) ErrClass {
	switch {
	case err == nil:
		return OK
	case errors.Is(err, ff.ErrStaleLease):
		return ErrStale
	case errors.Is(err, ff.ErrLeaseExpired):
		return ErrExpired
	case errors.Is(err, ff.ErrNotActive):
		return ErrNotActive
	case errors.Is(err, ff.ErrLeaseHeld):
		return ErrHeld
	case errors.Is(err, ff.ErrNotFound):
		return ErrNotFound
	}
	return ErrOther
}
