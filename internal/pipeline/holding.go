package pipeline

import (
	"context"
	"sync"
	"time"

	"github.com/ffriver/ffriver/subscribe"
)

// ConsumerWarnInterval is how often, at most, a process repeats its
// warning about a named consumer that keeps holding outbox retention back.
// The first warning comes from the first outbox_retention tick that sees it
// holding (every minute by default).
const ConsumerWarnInterval = 5 * time.Minute

// holdingLog remembers, per consumer (stream and name), when a process last
// warned that it holds retention back.
type holdingLog struct {
	mu   sync.Mutex
	last map[[2]string]time.Time
}

// warnHolding logs a warning for each consumer of cs that holds outbox
// retention back (subscribe.ConsumerInfo.HoldsRetention): at once for one
// not seen holding by this process's previous look, then at most every
// ConsumerWarnInterval while it keeps holding.
func (p *Pipeline) warnHolding(ctx context.Context, cs []subscribe.ConsumerInfo, retention time.Duration) {
	now := time.Now()
	var warn []subscribe.ConsumerInfo
	p.holding.mu.Lock()
	prev := p.holding.last
	p.holding.last = map[[2]string]time.Time{}
	for _, c := range cs {
		if !c.HoldsRetention(retention) {
			continue
		}
		key := [2]string{c.Stream, c.Name}
		last, seen := prev[key]
		if !seen || now.Sub(last) >= ConsumerWarnInterval {
			last = now
			warn = append(warn, c)
		}
		p.holding.last[key] = last
	}
	p.holding.mu.Unlock()
	for _, c := range warn {
		p.env.Logger.WarnContext(ctx, "ffriver: a named stream consumer holds outbox retention back: the events it has not acknowledged "+
			"are kept past the retention until it reads them or its lag passes its max lag; if nobody runs it any more, "+
			"`ffctl consumer drop --stream "+c.Stream+" "+c.Name+"` releases them",
			"consumer", c.Name, "stream", c.Stream, "lag", c.Lag.Round(time.Millisecond).String(), "retention", retention.String(),
			"max_lag", c.MaxLag.String(), "attached", c.Attached, "next_warning_in", ConsumerWarnInterval.String())
	}
}
