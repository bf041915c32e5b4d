package ffriver

import (
	"context"
	"fmt"
	"time"

	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/internal/pipeline"
	"github.com/ffriver/ffriver/jobs"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
)

// TickHealth is what Ticks reads of the ticks: River's leader, each
// scanner's last tick, and, when none has come for StaleAfter, why.
type TickHealth struct {
	// RiverSchema holds the river_job and river_leader read; Queue is the
	// pipeline's scan queue, where its ticks go.
	RiverSchema string `json:"river_schema"`
	Queue       string `json:"queue"`
	// StaleAfter is the threshold the ticks are judged against.
	StaleAfter time.Duration `json:"stale_after_ns"`
	// Leader is River's leader, nil when no client holds the leadership.
	Leader *RiverLeader `json:"leader,omitempty"`
	// LastTick is how long ago the newest tick of Queue was inserted, when
	// Seen (River deletes completed ticks after its completed-job
	// retention).
	LastTick time.Duration `json:"last_tick_age_ns,omitempty"`
	Seen     bool          `json:"seen"`
	// Scanners are the pipeline's scanners, in its order, with their last
	// ticks.
	Scanners []ScannerTicks `json:"scanners"`
	// Stale is set when no tick was inserted for StaleAfter (or none is in
	// river_job): CheckTicks's error, naming River's leader when it has led
	// for StaleAfter without inserting one.
	Stale *TicksStaleError `json:"-"`
	// Ticking is Stale == nil.
	Ticking bool `json:"ticking"`
	// Summary says the above in one line: who inserts the ticks, or why
	// none comes.
	Summary string `json:"summary"`
}

// ScannerTicks is one scanner's last tick.
type ScannerTicks struct {
	Scanner  string        `json:"scanner"`
	Interval time.Duration `json:"interval_ns"`
	// Disabled scanners get no tick.
	Disabled bool `json:"disabled,omitempty"`
	// Inserted is when its newest tick was inserted, InsertedAge how long
	// ago by the database's clock; nil when river_job has none.
	Inserted    *time.Time    `json:"last_tick,omitempty"`
	InsertedAge time.Duration `json:"last_tick_age_ns,omitempty"`
	// Worked is when its newest completed tick completed (its scans were
	// enqueued), WorkedAge how long ago; nil when none has.
	Worked    *time.Time    `json:"last_worked,omitempty"`
	WorkedAge time.Duration `json:"last_worked_age_ns,omitempty"`
}

// scannerTicksSQL reads, per scanner, the newest tick of a scan queue and
// the newest completed one, with their ages by the database's clock.
const scannerTicksSQL = `SELECT COALESCE(args->>'scanner', ''),
	max(created_at), extract(epoch FROM now() - max(created_at)) * 1000,
	max(finalized_at) FILTER (WHERE state = 'completed'),
	extract(epoch FROM now() - max(finalized_at) FILTER (WHERE state = 'completed')) * 1000
	FROM {S}river_job WHERE kind = $1 AND queue = $2 GROUP BY 1`

// Ticks reads, in two statements, River's leader in the Service's River
// (RiverSchema) and whether it inserts this pipeline's ticks, each
// scanner's last tick, and whether ticks have stopped: none inserted for
// staleAfter (DefaultTickStaleAfter when 0), or none at all in river_job.
// It is CheckTicks's judgment for one look from outside (ffctl status):
// no tick is stale at once, not staleAfter after the Service was made,
// and ticks inserted into another River are not looked for.
func (f *Service) Ticks(ctx context.Context, staleAfter time.Duration) (*TickHealth, error) {
	if staleAfter <= 0 {
		staleAfter = DefaultTickStaleAfter
	}
	h := &TickHealth{RiverSchema: f.RiverSchema(), Queue: f.pipeline.ScanQueue(), StaleAfter: staleAfter}
	s, err := dbutil.ParseSchema(h.RiverSchema)
	if err != nil {
		return nil, err
	}
	// The leader first: a tick inserted after an election read here is
	// then seen below.
	if h.Leader, err = riverLeader(ctx, f.store.Pool(), h.RiverSchema); err != nil {
		return nil, err
	}
	type last struct {
		inserted, worked *time.Time
		insertedMs       float64
		workedMs         *float64
	}
	byScanner := map[string]last{}
	var newest *time.Time
	rows, err := f.store.Pool().Query(ctx, s.SQL(scannerTicksSQL), jobs.KindTick, h.Queue)
	if err != nil {
		return nil, dbutil.MapErr(err, "reading the last ticks")
	}
	for rows.Next() {
		var name string
		var l last
		if err := rows.Scan(&name, &l.inserted, &l.insertedMs, &l.worked, &l.workedMs); err != nil {
			rows.Close()
			return nil, dbutil.MapErr(err, "reading the last ticks")
		}
		byScanner[name] = l
		if newest == nil || l.inserted.After(*newest) {
			newest, h.LastTick, h.Seen = l.inserted, ms(l.insertedMs), true
		}
	}
	if err := rows.Err(); err != nil {
		return nil, dbutil.MapErr(err, "reading the last ticks")
	}
	for _, name := range f.pipeline.ScannerNames() {
		st, _ := f.pipeline.Settings(name)
		sc := ScannerTicks{Scanner: name, Interval: st.Interval, Disabled: st.Disabled}
		if l, ok := byScanner[name]; ok {
			sc.Inserted, sc.InsertedAge = l.inserted, ms(l.insertedMs)
			if l.worked != nil && l.workedMs != nil {
				sc.Worked, sc.WorkedAge = l.worked, ms(*l.workedMs)
			}
		}
		h.Scanners = append(h.Scanners, sc)
	}
	if h.Leader != nil && newest != nil && !newest.Before(h.Leader.ElectedAt) {
		h.Leader.InsertsTicks = true
	}
	if !ticksFresh(h.LastTick, h.Seen, time.Time{}, staleAfter) {
		h.Stale = &TicksStaleError{Queue: h.Queue, RiverSchema: h.RiverSchema, StaleAfter: staleAfter, LastTick: h.LastTick, Seen: h.Seen}
		h.Stale.blame(h.Leader)
	}
	h.Ticking = h.Stale == nil
	h.Summary = h.summary()
	return h, nil
}

// ms converts milliseconds (as the database computes ages) to a Duration.
func ms(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

// summary says in one line who inserts the ticks, or why none comes.
func (h *TickHealth) summary() string {
	l := h.Leader
	if h.Stale == nil {
		last := "ticks: the last inserted " + h.LastTick.Round(time.Millisecond).String() + " ago"
		switch {
		case l == nil:
			return last + "; River has no leader now (the next election picks one)"
		case l.InsertsTicks:
			return fmt.Sprintf("%s, by River's leader %q", last, l.ID)
		default:
			return fmt.Sprintf("%s, before River's leader %q was elected %s ago: it has inserted none since", last, l.ID,
				l.For.Round(time.Second))
		}
	}
	head := "no ticks for " + h.LastTick.Round(time.Second).String()
	if !h.Seen {
		head = fmt.Sprintf("no ticks in %s.river_job (queue %s)", h.RiverSchema, h.Queue)
	}
	var who string
	switch {
	case h.Stale.Leader != "":
		who = fmt.Sprintf("River's leader %q (leading for %s) does not run ffriver's periodic jobs", h.Stale.Leader,
			h.Stale.LeaderFor.Round(time.Second))
	case l != nil:
		who = fmt.Sprintf("River's leader %q was elected %s ago and has inserted none yet", l.ID, l.For.Round(time.Second))
	default:
		who = "no scheduler leads (River has no leader)"
	}
	return head + ": " + who + ", so nothing is being scanned; run ffscheduler, or give ffriver's periodic jobs (Configure) " +
		"to every leader-eligible River client, the old ones of a rolling deploy included"
}

// WakeOptions tune the wake loop (Service.Wake).
type WakeOptions struct {
	// Disabled: no wake loop; scanners run at their periodic ticks only.
	Disabled bool
	// Poll is how often the next due times are re-read
	// (250 ms when 0): a due time written closer to now
	// than that is acted on up to Poll late.
	Poll time.Duration
	// Spacing is the least time between two wake ticks of one scanner
	// (20 ms when 0).
	Spacing time.Duration
}

// Wake runs the wake loop beside client, a leader-eligible River client
// carrying ffriver's periodic jobs, until ctx is done: while client leads,
// a scanner that can tell when its next item comes due (attempt_timeout,
// delayed_promoter, execution_deadline: workers.NextDueScanner) gets a
// tick at that moment rather than at its next periodic tick, so a lease
// expiry, a delay or a deadline is ticked within tens of milliseconds of
// coming due (then scanned, applied and committed: a few hundred
// milliseconds on a small machine) instead of up to an interval late.
// Processes of role Scheduler run it, and Attach runs it beside an
// application's own client: call Wake yourself only for a client you
// do not Attach. The periodic ticks stay: a lost wake-up delays by at
// most one interval.
func (f *Service) Wake(ctx context.Context, client *river.Client[pgx.Tx], o WakeOptions) error {
	if o.Disabled {
		return nil
	}
	return f.pipeline.Wake(ctx, client, pipeline.WakeOptions{ClientID: client.ID(), RiverSchema: f.RiverSchema(), Poll: o.Poll, Spacing: o.Spacing})
}
