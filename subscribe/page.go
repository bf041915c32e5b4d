package subscribe

import (
	"context"
	"errors"
	"slices"

	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/jackc/pgx/v5"
)

// readPage reads one page of the current batch, or starts the next batch
// when the current one is done, and delivers its events. It reports whether
// more may follow at once (a full page, or the end of the batch's first
// part).
//
// It begins the next run of batches when none is being read (nextRun),
// picks the part of the batch the page reads (planPage), reads and
// decodes the page's rows (scanPage), hands its events to the consumer
// (deliverPage) and moves the position past the page (endPage).
func (r *reader[E]) readPage(ctx context.Context, q *pgx.Conn) (bool, error) {
	if !r.inBatch {
		ok, err := r.nextRun(ctx, q)
		if err != nil || !ok {
			return false, err // !ok: no transaction finished since from
		}
	}
	p := r.planPage()
	if err := r.scanPage(ctx, q, &p); err != nil {
		return false, err
	}
	if !r.deliverPage(ctx, &p) {
		return false, ctx.Err()
	}
	return r.endPage(ctx, q, &p)
}

// nextRun begins the run of batches after from: the next tick and the
// ticks already known that can be read with it (gatherRun), the rows of
// the run's later transactions read first (holdLater). It returns false
// when no transaction finished since from.
func (r *reader[E]) nextRun(ctx context.Context, q *pgx.Conn) (bool, error) {
	t, ok, err := r.nextTick(ctx, q)
	if err != nil || !ok {
		return false, err
	}
	run, cut := r.gatherRun(t)
	r.beginRun(r.from, run, position{})
	if len(r.laterIDs) > 0 {
		if err := r.holdLater(ctx, q, run, cut); err != nil {
			return false, err
		}
	}
	return true, nil
}

// gatherRun returns the run that starts at tick t: t, then the ticks
// already read that follow it, each containing the one before, at most
// tickBatch in all. It records the run's later transactions in laterIDs
// (their tick's index in laterTick): those in progress at one tick of the
// run and finished by the next, whose rows are read first and held in
// memory to be slotted in before their batch's range rows. cut is the
// index of the first tick with such transactions (0: none), where the run
// stops when there are more than a page of their rows.
func (r *reader[E]) gatherRun(t tick) (run []tick, cut int) {
	run = append(r.span[:0], t)
	later := r.laterIDs[:0]
	r.laterTick = r.laterTick[:0]
	for len(r.ticks) > 0 && len(run) < tickBatch {
		next, prev := r.ticks[0], run[len(run)-1].snap
		if !prev.Before(next.snap) {
			break
		}
		for _, x := range prev.Xip {
			if next.snap.Visible(x) {
				later = append(later, x)
				r.laterTick = append(r.laterTick, len(run))
			}
		}
		if cut == 0 && len(later) > 0 {
			cut = len(run)
		}
		run = append(run, next)
		r.ticks = r.ticks[1:]
	}
	r.laterIDs = later
	return run, cut
}

// holdLater reads the rows of the later transactions of run, the run just
// begun, into heldRows (loadHeld). When there are more than a page of
// them, the run stops before its tick cut, whose ticks are read again
// after it.
func (r *reader[E]) holdLater(ctx context.Context, q *pgx.Conn, run []tick, cut int) error {
	ok, err := r.loadHeld(ctx, q)
	if err != nil {
		// The run's held rows are not all in memory: reading its range
		// now would skip them. Start the run again on the next read
		// (after a reconnect).
		r.ticks = append(slices.Clone(run), r.ticks...)
		r.abandonRun()
		return err
	}
	if !ok {
		r.ticks = append(slices.Clone(run[cut:]), r.ticks...)
		r.beginRun(r.from, run[:cut], position{})
	}
	return nil
}

// page is one read of readPage: the part of the batch it reads, and what
// it found.
type page struct {
	// held says the page reads the rows of done's transactions (all below
	// from.Xmax); else it reads the range [from.Xmax, to.Xmax).
	held bool
	// rangeStart is the position before the range's first row.
	rangeStart position
	query      string // heldSQL, rangeSQL or a skip variant
	// pos is where the page starts, then the position of the last row
	// read, filtered or not.
	pos position
	n   int // rows read, filtered or not
	// last is the cursor of the page's last event.
	last Cursor
	// taken counts the held rows this page slots in. They leave heldRows
	// only once the page is delivered: a page that fails (a lost
	// connection) is read again from pos, and slots them in again.
	taken int
}

// planPage picks what the next page reads: first the rows of done's
// transactions, then the range [from.Xmax, to.Xmax), each with the start
// point's skip rule while it applies. It sets r.args for the page's query.
func (r *reader[E]) planPage() page {
	p := page{rangeStart: below(r.from.Xmax), pos: r.pos}
	p.held = len(r.done) > 0 && r.pos.less(p.rangeStart)
	skip := r.skip
	var ids []int64
	switch {
	case p.held && skip:
		p.query, ids = r.heldSkip, r.done
	case p.held:
		p.query, ids = r.heldSQL, r.done
	case skip:
		p.query, ids = r.rangeSkip, r.sqlExcl()
	default:
		p.query, ids = r.rangeSQL, r.sqlExcl()
	}
	if !p.held && p.pos.less(p.rangeStart) {
		p.pos = p.rangeStart
	}
	if ids == nil {
		ids = []int64{}
	}
	r.args = append(r.args[:0], ids, r.to.Xmax, p.pos.xact, p.pos.event, r.cfg.pageSize)
	r.args = append(r.args, r.filterArgs...)
	if skip {
		r.args = append(r.args, r.skipArg)
	}
	return p
}

// scanPage reads the page's rows and decodes their events into r.scratch.
// A range row of a transaction the run excludes is passed over (it belongs
// to a later batch); in a run of several batches each row carries its own
// batch's cursor, and the held rows of each batch are slotted in before
// its range rows (slotHeld), the rest after the range's last page.
func (r *reader[E]) scanPage(ctx context.Context, q *pgx.Conn, p *page) error {
	dest := r.dec.dest()
	r.scratch = r.scratch[:0]
	err := r.readRows(ctx, q, p.query, func(rows pgx.Rows) error {
		for rows.Next() {
			if err := rows.Scan(dest...); err != nil {
				return &decodeError{err}
			}
			p.n++
			p.pos.xact, p.pos.event = r.dec.position()
			if !p.held && r.excluded(p.pos.xact) {
				continue // it belongs to a later batch
			}
			b := r.batch
			if len(r.span) > 1 {
				k := r.tickOf(p.pos.xact)
				if !p.held {
					r.slotHeld(k, &p.taken, &p.last)
				}
				b = r.batchOf(k)
				r.dec.setBatch(b)
			}
			if ev, ok := r.dec.event(); ok {
				r.scratch = append(r.scratch, ev)
				p.last = b.Cursor(p.pos.xact, p.pos.event)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if !p.held && p.n < r.cfg.pageSize {
		r.slotHeld(len(r.span), &p.taken, &p.last) // the range is done: the rest
	}
	return nil
}

// deliverPage hands the page's events to the consumer, at most r.chunk at
// a time, blocking while its buffer is full, then drops the held rows the
// page slotted in from heldRows. It returns false when ctx ended first.
func (r *reader[E]) deliverPage(ctx context.Context, p *page) bool {
	if len(r.scratch) > 0 {
		events := slices.Clone(r.scratch)
		clear(r.scratch)
		for len(events) > 0 {
			k := min(len(events), r.chunk)
			if !r.send(ctx, delivery[E]{events: events[:k:k]}) {
				return false
			}
			if r.consumer != nil {
				r.consumer.sent += int64(k)
			}
			events = events[k:]
		}
		r.last = p.last
		if r.delivered != nil {
			r.delivered()
		}
	}
	if p.taken > 0 {
		clear(r.heldRows[:p.taken])
		r.heldRows = r.heldRows[:copy(r.heldRows, r.heldRows[p.taken:])]
	}
	return true
}

// endPage moves the position past the page and reports whether more may
// follow at once: after a full page, and after the last page of done's
// transactions (on to the range). After the range's last page the run is
// done (endRun).
func (r *reader[E]) endPage(ctx context.Context, q *pgx.Conn, p *page) (bool, error) {
	r.pos = p.pos
	switch {
	case p.n == r.cfg.pageSize:
		return true, nil
	case p.held:
		// The page scanned every row of done's transactions after pos,
		// filtered or not: on to the range.
		r.pos = p.rangeStart
		return true, nil
	default:
		return r.endRun(ctx, q)
	}
}

// endRun ends the run whose last page was just read: the next read starts
// the next one. Retention may have deleted some of the run's rows before
// they were read (checkGap). It reports whether the next run may be read
// at once.
func (r *reader[E]) endRun(ctx context.Context, q *pgx.Conn) (bool, error) {
	if err := r.checkGap(ctx, q, false); err != nil {
		return false, err
	}
	r.finish()
	if r.consumer != nil {
		r.consumer.finished(r.newBatch(r.from, r.from).Cursor(0, 0))
	}
	// Ticks already taken, or not looked for yet after the start point's
	// batch or since a reconnect, are read at once (a stream catching
	// up); otherwise the stream waits for a wake-up or its poll.
	more := len(r.ticks) > 0 || r.ticksFull || r.started || (r.catchUpTo > 0 && r.from.Tick <= r.catchUpTo)
	r.started = false
	return more, nil
}

// maxSQLExcl is the most exclusions the range query takes as a parameter.
// Postgres compares each row with every element of a parameter array (it
// hashes only constant arrays), so a long run's exclusions are applied by
// the reader instead: their rows are few, since only the transactions
// that committed between the tick and the query have visible rows.
const maxSQLExcl = 32

// sqlExcl returns the exclusions the range query applies itself.
func (r *reader[E]) sqlExcl() []int64 {
	if len(r.excl) > r.maxSQLExcl {
		return []int64{}
	}
	return r.excl
}

// excluded reports whether x is one of the run's exclusions.
func (r *reader[E]) excluded(x int64) bool {
	_, found := slices.BinarySearch(r.excl, x)
	return found
}

// decodeError is a row of the outbox that did not decode.
type decodeError struct{ err error }

// Error is the decoding error's message.
func (e *decodeError) Error() string { return e.err.Error() }

// Unwrap returns the decoding error.
func (e *decodeError) Unwrap() error { return e.err }

// pageSettings are the settings of a page query: dbutil.OrderedSettings,
// and the statement's generic plan, planned once per connection. The
// stream's statements are prepared (pgx caches them per connection), but
// Postgres planned each page anew: its estimate of the generic plan (a
// tenth of the rows under a LIMIT of unknown size) was far costlier than
// a plan for the page's own values, so it never chose it. Planning a page
// over a partitioned outbox opens every partition: 1.07 ms of planning
// against 1.38 ms of execution for a page of 5,000 over 32 day
// partitions, at p50 of 35 pages each (EXPLAIN ANALYZE on a store of
// 2,000,000 executions and 10,000,000 events); with the generic plan,
// 0.02 ms of planning and the same execution, the same Merge Append of
// the partitions' index reads (the settings leave it no other plan that
// reads in order).
//
// They leave parallel workers on (dbutil.OrderedSettings, not
// PlannerSettings): with dbutil.NoParallel the catch-up of 200,000 events on a store of
// 2,000,000 executions and 10,000,000 events read 0.53 of the empty
// store's rate, without it 0.87 (ffctl bench scale, the same session,
// the 2-core VM); at full size 0.64 with it, 0.97 in the morning's run
// before it.
const pageSettings = dbutil.OrderedSettings + `, set_config('plan_cache_mode', 'force_generic_plan', true)`

// readRows runs a page query (heldSQL, rangeSQL or a skip variant) with
// r.args and passes its rows to each, with pageSettings in the same round
// trip (dbutil.ScopedRead). Each partition of the outbox is read in
// (xact_id, event_id) order through its index and merged (a Merge
// Append), at most a page. With stale statistics of the newest
// partition, the one being written, the planner took each partition to
// hold a row or none after the position and preferred reading them all
// and sorting: every row of the batch's range for each page (160,000
// rows, 46 ms, for a page of 5,000, against 1.4 ms merged; a catch-up on
// a partitioned outbox of 5,000,000 events read 125,000 events/s).
func (r *reader[E]) readRows(ctx context.Context, q *pgx.Conn, query string, each func(pgx.Rows) error) error {
	err := dbutil.ScopedRead(ctx, q, pageSettings, query, r.args, each)
	if de := (*decodeError)(nil); errors.As(err, &de) {
		return dbutil.MapErr(de.err, "subscribe: decoding "+r.table.name)
	}
	return dbutil.MapErr(err, "subscribe: reading "+r.table.name)
}

// heldRow is a decoded row of a transaction that finished at a later tick
// of the run, waiting for its place.
type heldRow[E any] struct {
	k   int
	ev  E
	cur Cursor
}

// loadHeld reads the rows of laterIDs into heldRows, in batch order; ok is
// false (and nothing is kept) when there are more than a page of them.
func (r *reader[E]) loadHeld(ctx context.Context, q *pgx.Conn) (ok bool, err error) {
	query := r.heldSQL
	r.args = append(r.args[:0], r.laterIDs, r.to.Xmax, int64(0), int64(0), r.cfg.pageSize+1)
	r.args = append(r.args, r.filterArgs...)
	if r.skip {
		query = r.heldSkip
		r.args = append(r.args, r.skipArg)
	}
	tickOf := make(map[int64]int, len(r.laterIDs))
	for i, x := range r.laterIDs {
		tickOf[x] = r.laterTick[i]
	}
	r.heldRows = r.heldRows[:0]
	dest := r.dec.dest()
	ok = true
	err = r.readRows(ctx, q, query, func(rows pgx.Rows) error {
		n := 0
		for rows.Next() {
			if n++; n > r.cfg.pageSize {
				clear(r.heldRows)
				r.heldRows = r.heldRows[:0]
				ok = false
				return nil
			}
			if err := rows.Scan(dest...); err != nil {
				return &decodeError{err}
			}
			x, e := r.dec.position()
			k := tickOf[x]
			b := r.batchOf(k)
			r.dec.setBatch(b)
			if ev, ok := r.dec.event(); ok {
				r.heldRows = append(r.heldRows, heldRow[E]{k: k, ev: ev, cur: b.Cursor(x, e)})
			}
		}
		return nil
	})
	if err != nil || !ok {
		return false, err
	}
	slices.SortStableFunc(r.heldRows, func(a, b heldRow[E]) int { return a.k - b.k })
	return true, nil
}

// slotHeld adds the held rows of the run's ticks up to k, after the first
// *taken (already in the page), to the page being delivered: within a
// batch they precede the range rows. The caller drops them from heldRows
// once the page is delivered.
func (r *reader[E]) slotHeld(k int, taken *int, last *Cursor) {
	for *taken < len(r.heldRows) && r.heldRows[*taken].k <= k {
		r.scratch = append(r.scratch, r.heldRows[*taken].ev)
		*last = r.heldRows[*taken].cur
		*taken++
	}
}
