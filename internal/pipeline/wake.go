package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/jobs"
	"github.com/ffriver/ffriver/workers"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// TickInserter inserts a tick: a River client (*river.Client[pgx.Tx]) is
// one, and inserts with an insert notification, so that a scan worker
// fetches the tick at once.
type TickInserter interface {
	Insert(ctx context.Context, args river.JobArgs, opts *river.InsertOpts) (*rivertype.JobInsertResult, error)
}

// Defaults of WakeOptions.
const (
	// DefaultWakePoll is how often the wake loop re-reads the next due
	// times: a due time written closer to now than this (a delay of 100
	// ms) is acted on up to this late; one written further ahead, at its
	// time. Each read is one read-only transaction. At 100 ms the idle
	// pipeline (ffctl bench idle) used 3.1-3.3 % of a core on the 2-core
	// machine, over its 3 % budget; at 250 ms, 2.6-2.8 %.
	DefaultWakePoll = 250 * time.Millisecond
	// DefaultWakeSpacing is the least time between two wake ticks of one
	// scanner: under a steady stream of due items (1,000 expiries/s) a
	// scanner gets a tick this often, not one per item. An item coming
	// due waits up to this for its tick: at 50 ms the lag's p99 at
	// 1,000/s on 2 quiet cores was 201–209 ms, at 20 ms 109–137 ms
	// (ffctl bench lag --wake-spacing).
	DefaultWakeSpacing = 20 * time.Millisecond
)

// TagWake is on the ticks the wake loop inserts (besides the scanner's
// tick tags); their metadata's WakeDueKey is the due time they were
// inserted for.
const TagWake = "wake"

// WakeDueKey is the key, in a wake tick's River metadata, of the due time
// (Unix ms, by the pipeline's clock) the tick was inserted for;
// WakeAfterKey's is the time up to which every due item had already had a
// tick (the loop's horizon): the tick counts only what came due after it
// (DueRequest.AfterMs), so that items still queued from earlier ticks do
// not send every partition to a scan on every wake tick.
const (
	WakeDueKey   = "ff_wake_due_ms"
	WakeAfterKey = "ff_wake_after_ms"
)

// wakeAfter returns the WakeAfterKey of a tick's metadata, 0 when there is
// none (a periodic tick) or it cannot be read.
func wakeAfter(metadata []byte) int64 {
	if len(metadata) == 0 {
		return 0
	}
	var m struct {
		After int64 `json:"ff_wake_after_ms"`
	}
	if err := json.Unmarshal(metadata, &m); err != nil {
		return 0
	}
	return max(m.After, 0)
}

// WakeOptions configure Pipeline.Wake.
type WakeOptions struct {
	// ClientID is the River client the loop runs beside: it inserts ticks
	// only while river_leader names that client (the periodic ticks'
	// leader), and otherwise reads ten times slower.
	ClientID string
	// RiverSchema holds river_leader ("" = the search_path's).
	RiverSchema string
	// Poll is how often the next due times are re-read (default
	// DefaultWakePoll).
	Poll time.Duration
	// Spacing is the least time between two wake ticks of one scanner
	// (default DefaultWakeSpacing).
	Spacing time.Duration
}

// notLeadingPoll is how many times Poll a client that does not lead waits
// between two reads.
const notLeadingPoll = 10

// wakeScanner is one scanner of the wake loop with what the loop knows of
// it.
type wakeScanner struct {
	s    workers.NextDueScanner
	args river.JobArgs
	// horizon: every item due at or before it has had a tick inserted
	// after it came due (a wake tick, or the periodic tick that runs when
	// the client starts leading).
	horizon int64
	// next is the earliest due time after horizon the last read found
	// (0: none).
	next     int64
	lastTick time.Time
}

// Wake runs the wake loop until ctx is done: on the elected leader (the
// client o.ClientID), it inserts a scanner's tick (a TagWake tick: the
// periodic tick's args with Wake set, unique while in flight within its
// second, counting only what came due after the loop's last tick of the
// scanner, WakeAfterKey) as soon as the scanner's next item comes due,
// instead of leaving it to the next periodic tick. It reads when the
// next items come due (NextDueScanner, one read-only transaction for
// every scanner and the leadership) every Poll, and at each due time it
// knows of.
//
// Nothing is carried only by the loop: the periodic ticks still run, and a
// wake-up that is lost (a tick job deleted or cancelled, a process that
// dies, a read that fails, a due time written after the loop's horizon
// passed it) delays an item by at most one periodic interval. Each due time
// gets at most one wake tick, once it is inserted (a tick swallowed as a
// duplicate of one in flight is retried after Spacing); the loop ticks a
// scanner at most every Spacing.
func (p *Pipeline) Wake(ctx context.Context, ins TickInserter, o WakeOptions) error {
	if o.Poll <= 0 {
		o.Poll = DefaultWakePoll
	}
	if o.Spacing <= 0 {
		o.Spacing = DefaultWakeSpacing
	}
	rs, err := dbutil.ParseSchema(o.RiverSchema)
	if err != nil {
		return err
	}
	var ws []*wakeScanner
	for _, s := range p.reg.Scanners() {
		nd, ok := s.(workers.NextDueScanner)
		if !ok || p.settings[s.Name()].Disabled {
			continue
		}
		args, err := p.TickArgs(s.Name())
		if err != nil {
			return err
		}
		ta := args.(jobs.TickArgs)
		ta.Wake = true
		ws = append(ws, &wakeScanner{s: nd, args: ta})
	}
	if len(ws) == 0 {
		<-ctx.Done()
		return nil
	}
	leaderSQL := rs.SQL(`SELECT EXISTS (SELECT 1 FROM {S}river_leader WHERE leader_id = $1 AND expires_at > now())`)
	timer := time.NewTimer(0)
	defer timer.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C:
		}
		leader, err := p.readNextDue(ctx, leaderSQL, o.ClientID, ws)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if !failing {
				p.env.Logger.WarnContext(ctx, "ffriver: the wake loop cannot read the next due times; the periodic ticks carry on", "error", err)
			}
			failing = true
			timer.Reset(o.Poll)
			continue
		}
		failing = false
		now := p.env.NowMs()
		if !leader {
			// The periodic tick that runs when this client starts leading
			// covers what comes due until then.
			for _, w := range ws {
				w.horizon, w.next = now, 0
			}
			timer.Reset(notLeadingPoll * o.Poll)
			continue
		}
		wait := o.Poll
		for _, w := range ws {
			if w.next == 0 {
				continue
			}
			if w.next > now {
				wait = min(wait, time.Duration(w.next-now)*time.Millisecond)
				continue
			}
			if since := time.Since(w.lastTick); since < o.Spacing {
				wait = min(wait, o.Spacing-since)
				continue
			}
			inserted, err := p.insertWakeTick(ctx, ins, w)
			w.lastTick = time.Now()
			// The next read comes after Spacing at the latest: this
			// scanner's next due time is read anew past the horizon.
			wait = min(wait, o.Spacing)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				p.env.Logger.WarnContext(ctx, "ffriver: the wake loop could not insert a tick; the periodic ticks carry on",
					"scanner", w.s.Name(), "error", err)
				continue
			}
			if inserted {
				w.horizon, w.next = now, 0
			}
		}
		timer.Reset(max(wait, time.Millisecond))
	}
}

// readNextDue reads, in one round trip and one read-only transaction,
// whether clientID leads River and each scanner's next due time after its
// horizon, with dbutil.PlannerSettings: each next due time is the first
// row of its due index past the horizon whose execution is in the state
// the scanner acts on, read in the index's order. Planned without them on
// a store of 10,000,000 executions, the attempt_timeout one was a parallel
// bitmap scan of every lease expiring later (33,461), each joined to its
// execution and sorted: 155-254 ms and 100,000 buffers a read, a read every
// Poll and at each due time (59 during an expire drain of 20,000 leases,
// 15 s of the server's time).
func (p *Pipeline) readNextDue(ctx context.Context, leaderSQL, clientID string, ws []*wakeScanner) (bool, error) {
	var leader bool
	err := dbutil.ScopedBatch(ctx, p.env.Pool(), dbutil.PlannerSettings, func(b *pgx.Batch) {
		b.Queue(leaderSQL, clientID)
		for _, w := range ws {
			sql, args := w.s.NextDueSQL(workers.DueRequest{Store: p.env.Store, NowMs: p.env.NowMs(), Filter: p.filter}, w.horizon)
			b.Queue(sql, args...)
		}
	}, func(res pgx.BatchResults) error {
		if err := res.QueryRow().Scan(&leader); err != nil {
			return dbutil.MapErr(err, "reading River's leader")
		}
		for _, w := range ws {
			var next *int64
			if err := res.QueryRow().Scan(&next); err != nil {
				return dbutil.MapErr(err, fmt.Sprintf("scanner %s: next due time", w.s.Name()))
			}
			w.next = 0
			if next != nil {
				w.next = *next
			}
		}
		return nil
	})
	return leader, err
}

// insertWakeTick inserts w's tick for its next due time; inserted is false
// when River skipped it as the duplicate of a tick in flight.
func (p *Pipeline) insertWakeTick(ctx context.Context, ins TickInserter, w *wakeScanner) (inserted bool, err error) {
	meta, err := json.Marshal(map[string]int64{WakeDueKey: w.next, WakeAfterKey: w.horizon})
	if err != nil {
		return false, err
	}
	opts := withTags(p.TickInsertOpts(), append(TickTags(w.s.Name(), p.filter), TagWake))
	opts.Metadata = meta
	res, err := ins.Insert(ctx, w.args, opts)
	if err != nil {
		return false, fmt.Errorf("inserting a wake tick: %w", err)
	}
	return !res.UniqueSkippedAsDuplicate, nil
}
