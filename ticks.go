package ffriver

import (
	"context"
	"fmt"
	"strings"
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
	// Disabled scanners get no tick: their last ones are shown when they
	// are within the window read (two intervals of the slowest enabled
	// scanner, at least the stale threshold) or when every tick is read.
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
// the newest completed one, with their ages by the database's clock: every
// tick River keeps (its completed-job retention, an hour by default; wake
// ticks come up to 50 a second per timer scanner under load) when {FROM}
// is allTicks, those scheduled within a window when it is recentTicks.
const scannerTicksSQL = `SELECT COALESCE(t.args->>'scanner', ''),
	max(t.created_at), extract(epoch FROM now() - max(t.created_at)) * 1000,
	max(t.finalized_at) FILTER (WHERE t.state = 'completed'),
	extract(epoch FROM now() - max(t.finalized_at) FILTER (WHERE t.state = 'completed')) * 1000
	FROM {FROM} GROUP BY 1`

// allTicks is scannerTicksSQL's FROM for every tick of queue $2: through
// river_job_kind, every tick of the kind.
const allTicks = `{S}river_job t WHERE t.kind = $1 AND t.queue = $2`

// recentTicks is scannerTicksSQL's FROM for the ticks of queue $2 scheduled
// at most $3 ago (or ahead: retries), read as ranges of River's fetch index
// (river_job_prioritized_fetching_index: state, queue, priority,
// scheduled_at, id), one per job state and priority: the queue's jobs of
// that window, ticks and scans, however many ticks River keeps. A tick is
// scheduled when it is inserted (a retry later), so the newest inserted
// tick is among them when any was inserted in the window. OFFSET 0 keeps
// the lateral read a read per state and priority: pulled up into a join,
// it was planned as a bitmap read of every tick through river_job_kind.
const recentTicks = `unnest(enum_range(NULL::{S}river_job_state)) s(state) CROSS JOIN generate_series(1, 4) p(priority)
	CROSS JOIN LATERAL (SELECT j.args, j.created_at, j.finalized_at, j.state FROM {S}river_job j
	  WHERE j.state = s.state AND j.queue = $2 AND j.priority = p.priority AND j.scheduled_at >= now() - $3::interval
	    AND j.kind = $1 OFFSET 0) t`

// scannerTick is one scanner's newest tick and newest completed tick, with
// their ages by the database's clock.
type scannerTick struct {
	inserted, worked *time.Time
	insertedMs       float64
	workedMs         *float64
}

// readTicks reads each scanner's last ticks in queue of s's river_job: those
// scheduled within window when every scanner of want has one there, and a
// worked one too (a tick scheduled earlier may have been worked since,
// late), else (or with window 0) every tick River keeps. The newest of all
// is the newest of the map.
func readTicks(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, s dbutil.Schema, queue string, window time.Duration, want []string) (map[string]scannerTick, error) {
	read := func(from string, args ...any) (map[string]scannerTick, error) {
		rows, err := q.Query(ctx, s.SQL(strings.Replace(scannerTicksSQL, "{FROM}", from, 1)), args...)
		if err != nil {
			return nil, dbutil.MapErr(err, "reading the last ticks")
		}
		defer rows.Close()
		out := map[string]scannerTick{}
		for rows.Next() {
			var name string
			var l scannerTick
			if err := rows.Scan(&name, &l.inserted, &l.insertedMs, &l.worked, &l.workedMs); err != nil {
				return nil, dbutil.MapErr(err, "reading the last ticks")
			}
			out[name] = l
		}
		return out, dbutil.MapErr(rows.Err(), "reading the last ticks")
	}
	if window > 0 {
		recent, err := read(recentTicks, jobs.KindTick, queue, window)
		if err != nil {
			return nil, err
		}
		all := len(recent) > 0
		for _, name := range want {
			if l, ok := recent[name]; !ok || l.worked == nil {
				all = false
			}
		}
		if all {
			return recent, nil
		}
	}
	return read(allTicks, jobs.KindTick, queue)
}

// newest returns the newest tick of ticks.
func newest(ticks map[string]scannerTick) (scannerTick, bool) {
	var n scannerTick
	found := false
	for _, l := range ticks {
		if !found || l.inserted.After(*n.inserted) {
			n, found = l, true
		}
	}
	return n, found
}

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
	// The window: two intervals of the slowest ticking scanner, at least
	// staleAfter. When one of them has no tick there, every tick is read.
	window := staleAfter
	var ticking []string
	for _, name := range f.pipeline.ScannerNames() {
		if st, _ := f.pipeline.Settings(name); !st.Disabled {
			ticking = append(ticking, name)
			window = max(window, 2*st.Interval)
		}
	}
	byScanner, err := readTicks(ctx, f.store.Pool(), s, h.Queue, window, ticking)
	if err != nil {
		return nil, err
	}
	var newestAt *time.Time
	if n, ok := newest(byScanner); ok {
		newestAt, h.LastTick, h.Seen = n.inserted, ms(n.insertedMs), true
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
	if h.Leader != nil && newestAt != nil && !newestAt.Before(h.Leader.ElectedAt) {
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
