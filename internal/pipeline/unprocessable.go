package pipeline

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ffriver/ffriver/workers"
)

// DefaultUnprocessableReportInterval is Env.UnprocessableReportInterval
// unless set.
const DefaultUnprocessableReportInterval = 10 * time.Minute

// NoUnprocessableReport as Env.UnprocessableReportInterval turns the ticks'
// report of unprocessable rows off.
const NoUnprocessableReport time.Duration = -1

// Unprocessable returns the rows scanner s cannot process
// (Unprocessable): its Auditor's count when it has one, else the
// items its Due found in partitions outside the schema's count (due, a
// result of s.Due for req).
func (p *Pipeline) Unprocessable(ctx context.Context, q workers.Querier, s workers.Scanner, req workers.DueRequest, due []workers.Due) ([]workers.Unprocessable, error) {
	if a, ok := s.(workers.Auditor); ok {
		out, err := a.Unprocessable(ctx, q, req)
		if err != nil {
			return nil, fmt.Errorf("scanner %s: unprocessable rows: %w", s.Name(), err)
		}
		return out, nil
	}
	var n int64
	for _, d := range due {
		if !p.env.Partitions().Contains(d.Partition) {
			n += d.Count
		}
	}
	if n == 0 {
		return nil, nil
	}
	return []workers.Unprocessable{{Reason: fmt.Sprintf("partition outside 0..%d", int(p.env.Partitions())-1), Count: n}}, nil
}

// unprocessableLog rate-limits the tick's reports of unprocessable rows:
// each scanner's are counted and logged at most once per interval per
// process, never per tick.
type unprocessableLog struct {
	mu   sync.Mutex
	last map[string]time.Time
}

// reportUnprocessable counts s's unprocessable rows, on the pool (never in
// the tick's transaction), and logs them as one warning, unless it did so
// for s less than Env.UnprocessableReportInterval ago.
func (p *Pipeline) reportUnprocessable(ctx context.Context, s workers.Scanner, req workers.DueRequest, due []workers.Due) {
	every := p.env.UnprocessableReportInterval
	switch {
	case every < 0:
		return // NoUnprocessableReport
	case every == 0:
		every = DefaultUnprocessableReportInterval
	}
	now := time.Now()
	p.unprocessable.mu.Lock()
	if last, ok := p.unprocessable.last[s.Name()]; ok && now.Sub(last) < every {
		p.unprocessable.mu.Unlock()
		return
	}
	if p.unprocessable.last == nil {
		p.unprocessable.last = map[string]time.Time{}
	}
	p.unprocessable.last[s.Name()] = now
	p.unprocessable.mu.Unlock()

	sets, err := p.Unprocessable(ctx, p.env.Pool(), s, req, due)
	if err != nil {
		p.env.Logger.WarnContext(ctx, "ffriver: could not count the rows no scan can process", "scanner", s.Name(), "error", err)
		return
	}
	var total int64
	attrs := []any{"scanner", s.Name(), "next_report_in", every.String()}
	for i, u := range sets {
		total += u.Count
		attrs = append(attrs, slog.Group(fmt.Sprintf("set%d", i), "reason", u.Reason, "count", u.Count, "list", u.List))
	}
	if total == 0 {
		return
	}
	attrs = append(attrs, "unprocessable", total)
	p.env.Logger.WarnContext(ctx, "ffriver: rows that look due but no scan can process (written by hand or a foreign writer): repair or delete them; ffctl status lists them", attrs...)
}
