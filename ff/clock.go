package ff

import (
	"sync"
	"time"
)

// Clock tells the time in Unix epoch milliseconds, the unit of every *_ms
// column. Tests inject a ManualClock; production uses SystemClock.
type Clock interface {
	NowMs() int64
}

// SystemClock is the wall clock.
type SystemClock struct{}

// NowMs implements Clock.
func (SystemClock) NowMs() int64 { return time.Now().UnixMilli() }

// ManualClock is a Clock that only moves when told to. It is safe for
// concurrent use.
type ManualClock struct {
	mu  sync.Mutex
	now int64
}

// NewManualClock returns a ManualClock reading nowMs.
func NewManualClock(nowMs int64) *ManualClock { return &ManualClock{now: nowMs} }

// NowMs implements Clock.
func (c *ManualClock) NowMs() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now += d.Milliseconds()
}

// Set sets the clock to nowMs.
func (c *ManualClock) Set(nowMs int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = nowMs
}
