package subscribe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/outbox"
	"github.com/jackc/pgx/v5"
)

// Reconnect backoff bounds.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
)

// position is a place inside a batch, in (xact_id, event_id) order: the
// stream has dealt with every row of the batch at or before it.
type position struct{ xact, event int64 }

func (p position) less(q position) bool {
	return p.xact < q.xact || (p.xact == q.xact && p.event < q.event)
}

// below returns the position after every row whose transaction id is below
// x.
func below(x int64) position { return position{x - 1, math.MaxInt64} }

// reader runs one stream: it owns the connections, the batch and the SQL,
// and feeds the Stream's channel.
//
// The stream is a chain of batches: a batch (from, to) is every row whose
// writer is visible in snapshot to and was not in snapshot from. Its rows
// are those of the transactions that were still running in from and had
// finished by to (done, looked up by exact id), followed by those of the
// transactions in [from.Xmax, to.Xmax) that had finished by to (a range
// scan): no row below from.Xmax other than done's is read again, however
// old the oldest running transaction on the server.
type reader[E any] struct {
	cfg     config
	table   table[E]
	dec     decoder[E]
	connCfg *pgx.ConnConfig
	logger  *slog.Logger
	// delivered, while a session is served, is called after readPage
	// handed events to the consumer: the session works, whatever fails
	// after (see serve).
	delivered func()

	channel    string // NOTIFY channel
	ticksSQL   string // ff_stream_ticks(after, lim)
	nowSQL     string // the newest tick
	oldestSQL  string // the oldest tick
	gapSQL     string // ff_outbox_trim runs not visible in a snapshot
	heldSQL    string // rows of done's transactions
	rangeSQL   string // rows of [from.Xmax, to.Xmax) visible in to
	heldSkip   string // heldSQL with the start point's skip rule
	rangeSkip  string // rangeSQL with the start point's skip rule
	filterArgs []any

	from, to ff.Snapshot
	fromAtMs int64  // when from was taken (0: unknown)
	toAtMs   int64  // when to was taken
	ticks    []tick // ticks after from, read ahead
	// ticksFull says the last read of ticks was full: more may follow.
	ticksFull bool
	// started says the current batch is the start point's (not one read
	// from the ticks): later ticks may already wait.
	started bool
	batch   ff.Batch // the batch of the span's first tick, while inBatch
	inBatch bool
	done    []int64   // the transactions of from.Xip finished by the span's first tick
	pos     position  // every row of the batch at or before pos is dealt with
	last    ff.Cursor // cursor of the last delivered event (or the start)

	// span is the ticks of the current read, oldest first (to is the last):
	// consecutive batches read together, see beginRun. batches[k] is the
	// batch of span[k], built when first needed.
	span    []tick
	batches []ff.Batch
	// laterIDs are the transactions that finished at a later tick of the
	// run than its first, having been in progress at the tick before;
	// laterTick their tick's index in the run. heldRows are their rows,
	// read ahead in batch order, not yet delivered.
	laterIDs  []int64
	laterTick []int
	heldRows  []heldRow[E]
	// excl are the transactions of the run's range that were still in
	// progress at the tick whose span they fall in: their rows belong to
	// a later batch.
	excl []int64
	// skip, while inBatch, drops the rows a start point excludes:
	// event_id <= skipArg (a legacy cursor's first batch), or
	// occurred_at_ms < skipArg (StartSince's).
	skip    bool
	skipArg int64

	// maxSQLExcl is maxSQLExcl (tests lower it).
	maxSQLExcl int

	// origin is what the stream's cursors record: its stream and schema.
	origin ff.Origin

	// afterStored says cfg.after is a named consumer's stored position,
	// which is this stream's whatever origin it records (its schema may
	// have been renamed since).
	afterStored bool

	// startFrom is the older snapshot of the first batch.
	startFrom ff.Snapshot
	// consumer is the named consumer's state; nil for an anonymous stream.
	consumer *consumerState
	// waits are the open writers OnWait was told about.
	waits   map[waitKey]Wait
	waitsAt time.Time

	args    []any // reused argument slice
	scratch []E   // reused decode buffer

	out   chan delivery[E]
	chunk int
}

func newReader[E any](cfg config, t table[E], connCfg *pgx.ConnConfig) *reader[E] {
	logger := cfg.logger.With("stream", t.name)
	return &reader[E]{cfg: cfg, table: t, dec: t.newDecoder(logger), connCfg: connCfg, logger: logger,
		waits: map[waitKey]Wait{}, maxSQLExcl: maxSQLExcl}
}

// tick is a row of ff_stream_tick.
type tick struct {
	snap ff.Snapshot
	atMs int64
}

// tickBatch is how many ticks one read of ff_stream_ticks returns at most.
const tickBatch = 256

// session is one pair of connections: q reads, l LISTENs.
type session struct {
	q, l *pgx.Conn
}

func (s *session) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if s.q != nil {
		_ = s.q.Close(ctx)
	}
	if s.l != nil {
		_ = s.l.Close(ctx)
	}
}

// start connects, resolves the schema, validates the options against it,
// builds the SQL and works out the start position. It returns the first
// session, already listening.
func (r *reader[E]) start(ctx context.Context) (_ *session, err error) {
	s := &session{}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	if s.q, err = pgx.ConnectConfig(ctx, r.connCfg); err != nil {
		return nil, dbutil.MapErr(err, "subscribe: connecting")
	}
	schema, err := r.cfg.schema.Resolve(ctx, s.q)
	if err != nil {
		return nil, fmt.Errorf("subscribe: %w", err)
	}
	r.cfg.schema = schema
	r.channel = outbox.Channel(string(schema))
	r.origin = ff.Origin{Stream: r.table.stream, Schema: string(schema)}

	var count int
	err = s.q.QueryRow(ctx, schema.SQL("SELECT num_partitions FROM {S}ff_partition_config")).Scan(&count)
	switch {
	case dbutil.IsUndefinedTable(err) || errors.Is(err, pgx.ErrNoRows):
		return nil, fmt.Errorf("subscribe: schema %s has no ffriver tables: %w; run `ffctl migrate --schema %s` first", schema, ff.ErrNotMigrated, schema)
	case err != nil:
		return nil, dbutil.MapErr(err, "subscribe: reading the partition count")
	}
	for _, p := range r.cfg.partitions {
		if int(p) >= count {
			return nil, ff.Validationf("partitions", "%d is outside this schema's 0..%d", p, count-1)
		}
	}

	r.buildSQL()
	if r.consumer != nil {
		r.prepareConsumer()
		if err := r.loadConsumer(ctx, s.q); err != nil {
			return nil, err
		}
	}
	if err := r.initPosition(ctx, s.q); err != nil {
		return nil, err
	}
	r.startFrom = r.from
	// Preparing checks the SQL against the schema now rather than later.
	for _, q := range []string{r.ticksSQL, r.nowSQL, r.oldestSQL, r.gapSQL, r.heldSQL, r.rangeSQL, r.heldSkip, r.rangeSkip} {
		if _, err := s.q.Prepare(ctx, "", q); err != nil {
			if dbutil.IsUndefinedTable(err) {
				return nil, fmt.Errorf("subscribe: schema %s: %w (run `ffctl migrate --schema %s`): %w", schema, ff.ErrNotMigrated, schema, err)
			}
			return nil, dbutil.MapErr(err, "subscribe: preparing the stream query")
		}
	}
	if err := r.checkGap(ctx, s.q, true); err != nil {
		return nil, err
	}
	if r.consumer != nil {
		// Stored now, the position holds retention back from the start.
		r.consumer.saved = r.last
		if err := r.saveConsumer(ctx, s.q, true); err != nil {
			return nil, err
		}
	}
	if s.l, err = r.listen(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// checkGap fails with a *GapError when retention deleted events after
// the stream's position. exact says the position inside the batch is
// exact (a cursor to resume after): rows of the batch before it were
// delivered. Otherwise every row of the batch counts, except in a batch
// from the table's beginning (the older snapshot sees nothing), whose
// rows before the position were there to read: the beginning of the table
// is wherever retention left it.
func (r *reader[E]) checkGap(ctx context.Context, q *pgx.Conn, exact bool) error {
	if r.from.Xmax == 0 {
		if r.pos == (position{}) {
			return nil // the start of the table
		}
		exact = true
	}
	minEvent := int64(-1)
	if r.inBatch && r.skip && r.cfg.start == StartAfter {
		minEvent = r.skipArg // a legacy cursor saw every event_id <= skipArg
	}
	to := r.from
	if r.inBatch {
		to = r.to
	}
	orEmpty := func(x []int64) []int64 {
		if x == nil {
			return []int64{}
		}
		return x
	}
	var runs int
	g := &GapError{Stream: r.table.name, Cursor: r.last}
	err := q.QueryRow(ctx, r.gapSQL, r.table.name, r.from.Xmax, orEmpty(r.from.Xip), minEvent,
		to.Xmax, orEmpty(to.Xip), r.pos.xact, r.pos.event, exact).
		Scan(&runs, &g.Events, &g.FirstEventID, &g.LastEventID, &g.FirstAtMs, &g.LastAtMs)
	if err != nil {
		return dbutil.MapErr(err, "subscribe: reading the outbox trim records")
	}
	if runs > 0 {
		return g
	}
	return nil
}

// readTicks reads the ticks after tick id after, taking a new one when
// there is none and a transaction finished since the newest.
func (r *reader[E]) readTicks(ctx context.Context, q *pgx.Conn, query string, args ...any) ([]tick, error) {
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	var out []tick
	for rows.Next() {
		var t tick
		if err := rows.Scan(&t.snap.Tick, &t.snap.Xmin, &t.snap.Xmax, &t.snap.Xip, &t.atMs); err != nil {
			rows.Close()
			return nil, err
		}
		if len(t.snap.Xip) == 0 {
			t.snap.Xip = nil
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// now returns a tick at least as new as the call: a new one, or the newest
// when nothing finished since it was taken.
func (r *reader[E]) now(ctx context.Context, q *pgx.Conn) (tick, error) {
	ts, err := r.readTicks(ctx, q, r.nowSQL)
	if err != nil {
		return tick{}, err
	}
	if len(ts) == 0 {
		return tick{}, errors.New("no stream tick")
	}
	return ts[0], nil
}

// nextTick returns the tick after from, or ok false when there is none yet.
func (r *reader[E]) nextTick(ctx context.Context, q *pgx.Conn) (tick, bool, error) {
	for {
		if len(r.ticks) == 0 {
			ts, err := r.readTicks(ctx, q, r.ticksSQL, r.from.Tick, tickBatch)
			if err != nil {
				return tick{}, false, dbutil.MapErr(err, "subscribe: reading the stream ticks")
			}
			r.ticksFull = len(ts) == tickBatch
			if len(ts) == 0 {
				return tick{}, false, nil
			}
			r.ticks = append(r.ticks[:0], ts...)
		}
		t := r.ticks[0]
		r.ticks = r.ticks[1:]
		// A tick not newer than from (from is no tick of this table's
		// chain, say after a restore) adds nothing: skip it.
		if r.from.Before(t.snap) {
			return t, true, nil
		}
	}
}

// adoptRestoredRows gives the rows whose xact_id this server has not
// reached (the schema was restored from another server's dump) the id of a
// transaction of this server, so that streams deliver them now rather than
// when this server's ids catch up with the other's. Such rows cannot exist
// otherwise: a transaction id at or above a snapshot's xmax has not started.
func (r *reader[E]) adoptRestoredRows(ctx context.Context, q *pgx.Conn) error {
	tag, err := q.Exec(ctx, r.cfg.schema.SQL(`UPDATE {S}`+r.table.name+` SET xact_id = pg_current_xact_id()::text::bigint
WHERE xact_id >= pg_snapshot_xmax(pg_current_snapshot())::text::bigint`))
	if err != nil {
		return r.startErr(err)
	}
	if n := tag.RowsAffected(); n > 0 {
		r.logger.Warn("subscribe: the outbox holds rows of another server's transactions (a restored dump?); "+
			"they are delivered as this server's now", "rows", n)
	}
	return nil
}

// initPosition sets the first batch and last from the start point.
func (r *reader[E]) initPosition(ctx context.Context, q *pgx.Conn) error {
	if err := r.adoptRestoredRows(ctx, q); err != nil {
		return err
	}
	nt, err := r.now(ctx, q)
	if err != nil {
		return r.startErr(err)
	}
	now := nt.snap
	r.toAtMs = nt.atMs
	after := r.cfg.after
	switch {
	case r.cfg.start == StartBeginning || (r.cfg.start == StartAfter && after.IsZero()):
		// Everything visible in the oldest tick, then on along the ticks,
		// so the stream has the batches every reader that walked them
		// had. (Taking the now tick first drops the ticks of another
		// server, after a restore.)
		ts, err := r.readTicks(ctx, q, r.oldestSQL)
		if err != nil {
			return r.startErr(err)
		}
		first := nt
		if len(ts) > 0 {
			first = ts[0]
		}
		r.toAtMs = first.atMs
		r.begin(ff.Snapshot{}, first.snap, position{})
		r.last = ff.Cursor{}

	case r.cfg.start == StartAfter && !after.Legacy:
		if o, ok := after.Origin(); ok && o != r.origin && !r.afterStored {
			return &CursorOriginError{Cursor: after, TakenFrom: o, HandedTo: r.origin}
		}
		if b, ok := after.Batch(); ok {
			from, to := b.Snapshots()
			if to.Xmax > now.Xmax {
				return &ForeignCursorError{Cursor: after, CursorXact: to.Xmax, ServerXact: now.Xmax}
			}
			r.begin(from, to, position{after.Xact, after.EventID})
		} else {
			// A v1 cursor: every row before (Xact, EventID) in
			// (xact_id, event_id) order was seen, none after it. The
			// horizon-based stream that wrote it had only read below a
			// horizon above Xact, so Xact had finished.
			if after.Xact >= now.Xmax {
				return &ForeignCursorError{Cursor: after, CursorXact: after.Xact, ServerXact: now.Xmax}
			}
			point := ff.Snapshot{Xmin: after.Xact, Xmax: after.Xact}
			r.begin(point, now, position{after.Xact, after.EventID})
		}
		r.last = after

	case r.cfg.start == StartSince:
		// The events in the table now that occurred at or after since:
		// the first batch, up to now, keeps those; later batches keep
		// everything. Rows below both xmin(now) and the lowest xact_id of
		// such an event are all dropped: the batch starts there.
		var minX *int64
		err := q.QueryRow(ctx, r.cfg.schema.SQL(`SELECT min(xact_id) FROM {S}`+r.table.name+` WHERE occurred_at_ms >= $1`),
			r.cfg.sinceMs).Scan(&minX)
		if err != nil {
			return r.startErr(err)
		}
		startX := now.Xmin
		if minX != nil {
			startX = min(startX, *minX)
		}
		r.begin(ff.Snapshot{Xmin: startX, Xmax: startX}, now, position{})
		r.skip, r.skipArg = true, r.cfg.sinceMs
		r.last = r.batch.Cursor(0, 0)

	case r.cfg.start == StartAfter:
		// A legacy cursor says "every event_id <= E was seen", in id order.
		// The legacy consumer can only have seen rows committed before now,
		// so the first batch, up to now, skips the rows with event_id <= E,
		// and later batches skip nothing: rows with event_id <= E that
		// commit after now are delivered (upstream's id cursor loses them).
		// Rows below both xmin(now) and the lowest xact_id of a row with
		// event_id > E are all skipped: the batch starts there.
		e := after.EventID
		var minX *int64
		err := q.QueryRow(ctx, r.cfg.schema.SQL(`SELECT min(xact_id) FROM {S}`+r.table.name+` WHERE event_id > $1`), e).Scan(&minX)
		if err != nil {
			return r.startErr(err)
		}
		startX := now.Xmin
		if minX != nil {
			startX = min(startX, *minX)
		}
		r.begin(ff.Snapshot{Xmin: startX, Xmax: startX}, now, position{})
		r.skip, r.skipArg = true, e
		r.last = after

	default: // StartNow
		// The transactions not visible now are the ones that commit
		// "after now": the stream starts at the boundary after now.
		r.from, r.fromAtMs = now, nt.atMs
		r.last = r.newBatch(now, now).Cursor(0, 0)
	}
	return nil
}

// begin starts the batch (from, to) at pos.
func (r *reader[E]) begin(from, to ff.Snapshot, pos position) {
	r.beginRun(from, []tick{{snap: to, atMs: r.toAtMs}}, pos)
	r.started = true
}

// beginRun starts reading the batches of the ticks run, which follow from,
// at pos. Consecutive batches are read together when none but the first
// has transactions that were in progress at the tick before and finished
// by its own (those are looked up by exact id, first): then the rows of
// the run's batches are the first batch's held transactions followed by
// the range [from.Xmax, last.Xmax) less excl, and (xact_id, event_id)
// order over that range is the order of the batches, each batch's rows
// lying in its own span [previous Xmax, Xmax). Each row still carries the
// cursor of its own batch, so a reader that walked the ticks one by one
// and one that read them together deliver the same events in the same
// order with the same cursors.
func (r *reader[E]) beginRun(from ff.Snapshot, run []tick, pos position) {
	r.from, r.span, r.pos, r.inBatch = from, run, pos, true
	r.to, r.toAtMs = run[len(run)-1].snap, run[len(run)-1].atMs
	r.batches = append(r.batches[:0], make([]ff.Batch, len(run))...)
	r.batch = r.batchOf(0)
	r.dec.setBatch(r.batch)
	r.done = r.done[:0]
	for _, x := range from.Xip {
		if run[0].snap.Visible(x) {
			r.done = append(r.done, x)
		}
	}
	r.excl = r.excl[:0]
	lo := from.Xmax
	for _, t := range run {
		for _, x := range t.snap.Xip {
			if x >= lo {
				r.excl = append(r.excl, x)
			}
		}
		lo = t.snap.Xmax
	}
	// excl is ascending: each tick's span lies above the one before.
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

// newBatch returns the batch (from, to) of this stream: its cursors record
// the stream's origin.
func (r *reader[E]) newBatch(from, to ff.Snapshot) ff.Batch {
	return ff.NewBatch(from, to).WithOrigin(r.origin)
}

// batchOf returns the batch of the run's k-th tick.
func (r *reader[E]) batchOf(k int) ff.Batch {
	if r.batches[k] == (ff.Batch{}) {
		prev := r.from
		if k > 0 {
			prev = r.span[k-1].snap
		}
		r.batches[k] = r.newBatch(prev, r.span[k].snap)
	}
	return r.batches[k]
}

// tickOf returns the index in the run of the batch of a row of transaction
// x: the first tick whose span holds x (x below from.Xmax: the first).
func (r *reader[E]) tickOf(x int64) int {
	lo, hi := 0, len(r.span)-1
	for lo < hi {
		mid := (lo + hi) / 2
		if x < r.span[mid].snap.Xmax {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// abandonRun drops the run just begun, before any of it was delivered:
// the next read begins it again from from (its ticks are the caller's to
// put back).
func (r *reader[E]) abandonRun() {
	r.inBatch, r.pos = false, position{}
	clear(r.heldRows)
	r.heldRows = r.heldRows[:0]
}

// finish ends the current run: the next one starts at its newest snapshot.
func (r *reader[E]) finish() {
	r.from, r.fromAtMs, r.inBatch, r.pos = r.to, r.toAtMs, false, position{}
	r.skip = false
}

func (r *reader[E]) startErr(err error) error {
	if dbutil.IsUndefinedTable(err) {
		return fmt.Errorf("subscribe: schema %s: %w (run `ffctl migrate --schema %s`): %w", r.cfg.schema, ff.ErrNotMigrated, r.cfg.schema, err)
	}
	return dbutil.MapErr(err, "subscribe: reading the start position")
}

// buildSQL writes the snapshot and row queries: only the predicates the
// options need, so each row query is an index scan on (xact_id, event_id).
func (r *reader[E]) buildSQL() {
	schema := r.cfg.schema
	const tickCols = "tick_id, snap_xmin, snap_xmax, snap_xip, at_ms"
	r.ticksSQL = schema.SQL("SELECT " + tickCols + " FROM {S}ff_stream_ticks($1, $2)")
	// A run is lost when it may hold a row after the position: a row of a
	// transaction not visible in the batch's newer snapshot ($5, $6), or
	// one not visible in the older ($2, $3) that is, with $9, after the
	// position ($7, $8) inside the batch.
	r.gapSQL = schema.SQL(`SELECT count(*), coalesce(sum(events), 0)::bigint,
	coalesce(min(min_event_id), 0), coalesce(max(max_event_id), 0), coalesce(min(min_at_ms), 0), coalesce(max(max_at_ms), 0)
FROM {S}ff_outbox_trim
WHERE stream = $1 AND max_event_id > $4
  AND (max_xact >= $5 OR EXISTS (SELECT 1 FROM unnest($6::int8[]) i WHERE i BETWEEN min_xact AND max_xact)
       OR ((max_xact >= $2 OR EXISTS (SELECT 1 FROM unnest($3::int8[]) i WHERE i BETWEEN min_xact AND max_xact))
           AND (NOT $9::bool OR (max_xact, max_event_id) > ($7::int8, $8::int8))))`)
	r.oldestSQL = schema.SQL("SELECT " + tickCols + " FROM {S}ff_stream_tick ORDER BY tick_id LIMIT 1")
	r.nowSQL = schema.SQL(`WITH t AS (SELECT * FROM {S}ff_stream_ticks((SELECT coalesce(max(tick_id), 0) FROM {S}ff_stream_tick), 1))
SELECT ` + tickCols + ` FROM t
UNION ALL (SELECT ` + tickCols + ` FROM {S}ff_stream_tick WHERE NOT EXISTS (SELECT 1 FROM t) ORDER BY tick_id DESC LIMIT 1)`)

	var filters strings.Builder
	r.filterArgs = nil
	n := 0
	param := func() string {
		n++
		return "$" + strconv.Itoa(n)
	}
	// Parameters $1..$5 belong to the head of each query; filters follow.
	n = 5
	if len(r.cfg.partitions) > 0 {
		filters.WriteString(" AND partition_key = ANY(" + param() + "::int4[])")
		r.filterArgs = append(r.filterArgs, r.cfg.partitions)
	}
	if r.cfg.filter.Namespace != "" {
		filters.WriteString(" AND namespace = " + param())
		r.filterArgs = append(r.filterArgs, r.cfg.filter.Namespace)
	}
	if r.cfg.filter.InstanceTag != nil {
		// As upstream: only the tag's value is compared, against the
		// instance_tag column (the value of "cairn.instance_id").
		filters.WriteString(" AND instance_tag = " + param())
		r.filterArgs = append(r.filterArgs, r.cfg.filter.InstanceTag.Value)
	}
	skip := " AND event_id > " + param()
	if r.cfg.start == StartSince {
		skip = " AND occurred_at_ms >= " + strings.TrimPrefix(skip, " AND event_id > ")
	}
	head := "SELECT xact_id, event_id, " + r.table.columns + " FROM " + schema.SQL("{S}"+r.table.name)
	const tail = " ORDER BY xact_id, event_id LIMIT $5"
	// $1 ids, $2 unused bound (kept typed), $3/$4 position, $5 limit.
	held := head + " WHERE xact_id = ANY($1::int8[]) AND xact_id < $2::int8 AND (xact_id, event_id) > ($3, $4)" + filters.String()
	rng := head + " WHERE (xact_id, event_id) > ($3, $4) AND xact_id < $2::int8 AND xact_id <> ALL($1::int8[])" + filters.String()
	r.heldSQL, r.heldSkip = held+tail, held+skip+tail
	r.rangeSQL, r.rangeSkip = rng+tail, rng+skip+tail
}

// listen opens the LISTEN connection.
func (r *reader[E]) listen(ctx context.Context) (*pgx.Conn, error) {
	l, err := pgx.ConnectConfig(ctx, r.connCfg)
	if err != nil {
		return nil, dbutil.MapErr(err, "subscribe: connecting the listener")
	}
	if _, err := l.Exec(ctx, "LISTEN "+pgx.Identifier{r.channel}.Sanitize()); err != nil {
		_ = l.Close(ctx)
		return nil, dbutil.MapErr(err, "subscribe: LISTEN")
	}
	return l, nil
}

// connect opens a new session after a lost connection.
func (r *reader[E]) connect(ctx context.Context) (*session, error) {
	q, err := pgx.ConnectConfig(ctx, r.connCfg)
	if err != nil {
		return nil, dbutil.MapErr(err, "subscribe: reconnecting")
	}
	if r.consumer != nil {
		if err := r.attach(ctx, q); err != nil {
			_ = q.Close(ctx)
			return nil, err
		}
	}
	l, err := r.listen(ctx)
	if err != nil {
		_ = q.Close(ctx)
		return nil, err
	}
	return &session{q: q, l: l}, nil
}

// run serves sessions until ctx ends or an error that reconnecting cannot
// fix; it returns the terminal error. sess is the first session.
func (r *reader[E]) run(ctx context.Context, sess *session) error {
	backoff := minBackoff
	outage := false
	for {
		var err error
		retry := true
		if sess == nil {
			// A named consumer whose name is still held (by the server
			// session of the connection just lost, until the server
			// notices) keeps trying like any failed reconnect.
			sess, err = r.connect(ctx)
		}
		if sess != nil {
			err = r.serve(ctx, sess, func() {
				if outage {
					r.logger.Info("subscribe: reconnected", "cursor", r.last.String())
				}
				outage, backoff = false, minBackoff
			})
			retry = dbutil.IsTransient(err) || sess.q.IsClosed() || sess.l.IsClosed()
			if ctx.Err() != nil || !retry {
				r.saveFinal(sess.q)
			}
			sess.close()
			sess = nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("subscribe: stream stopped: %w", context.Cause(ctx))
		}
		if !retry {
			r.logger.Error("subscribe: stream failed", "error", err)
			return err
		}
		if !outage {
			outage = true
			r.logger.Warn("subscribe: connection lost; reconnecting", "error", err, "cursor", r.last.String())
			if !r.send(ctx, delivery[E]{err: &DisconnectedError{Cursor: r.last, Err: err}}) {
				return fmt.Errorf("subscribe: stream stopped: %w", context.Cause(ctx))
			}
		} else {
			r.logger.Warn("subscribe: reconnect failed", "error", err, "retry_in", backoff)
		}
		// Full jitter within [backoff/2, backoff].
		wait := backoff/2 + time.Duration(rand.Int64N(int64(backoff/2)+1))
		select {
		case <-ctx.Done():
			return fmt.Errorf("subscribe: stream stopped: %w", context.Cause(ctx))
		case <-time.After(wait):
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

// serve reads and delivers until an error. A notification on the LISTEN
// connection or the poll interval triggers a read; a full page triggers the
// next one at once. healthy is called after the first successful read.
func (r *reader[E]) serve(ctx context.Context, s *session, healthy func()) error {
	lctx, lcancel := context.WithCancel(ctx)
	lerr := make(chan error, 1)
	wake := make(chan struct{}, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			if _, err := s.l.WaitForNotification(lctx); err != nil {
				lerr <- err
				return
			}
			select {
			case wake <- struct{}{}:
			default:
			}
		}
	})
	defer func() {
		lcancel()
		wg.Wait()
	}()
	listenErr := func(err error) error { return dbutil.MapErr(err, "subscribe: LISTEN connection") }

	timer := time.NewTimer(r.cfg.pollInterval)
	defer timer.Stop()
	// The session is healthy (the outage, if any, is over) after its
	// first complete read, or as soon as it delivered events: a consumer
	// that saw events after a disconnect must see the next loss as a new
	// outage, with a DisconnectedError of its own, even when it hits the
	// rest of that first read.
	first := true
	onHealthy := func() {
		if first {
			first = false
			healthy()
		}
	}
	r.delivered = onHealthy
	defer func() { r.delivered = nil }()
	for {
		more, err := r.readPage(ctx, s.q)
		if err != nil {
			return err
		}
		if err := r.saveConsumer(ctx, s.q, false); err != nil {
			return err
		}
		onHealthy()
		if more {
			select {
			case err := <-lerr:
				return listenErr(err)
			default:
			}
			continue
		}
		if err := r.checkWaits(ctx, s.q); err != nil {
			return err
		}
		timer.Reset(r.cfg.pollInterval)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-lerr:
			return listenErr(err)
		case <-wake:
		case <-timer.C:
		}
	}
}

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
	last ff.Cursor
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
	// batch, are read at once (a stream catching up); otherwise the
	// stream waits for a wake-up or its poll.
	more := len(r.ticks) > 0 || r.ticksFull || r.started
	r.started = false
	return more, nil
}

// decodeError is a row of the outbox that did not decode.
type decodeError struct{ err error }

func (e *decodeError) Error() string { return e.err.Error() }
func (e *decodeError) Unwrap() error { return e.err }

// readRows runs a page query (heldSQL, rangeSQL or a skip variant) with
// r.args and passes its rows to each, planned with
// dbutil.PlannerSettings in the same round trip (dbutil.ScopedRead).
// Each partition of the outbox is read in (xact_id, event_id) order
// through its index and merged (a Merge Append), at most a page. With
// stale statistics of the newest partition, the one being written, the
// planner took each partition to hold a row or none after the position
// and preferred reading them all and sorting: every row of the batch's
// range for each page (160,000 rows, 46 ms, for a page of 5,000, against
// 1.4 ms merged; a catch-up on a partitioned outbox of 5,000,000 events
// read 125,000 events/s).
func (r *reader[E]) readRows(ctx context.Context, q *pgx.Conn, query string, each func(pgx.Rows) error) error {
	err := dbutil.ScopedRead(ctx, q, dbutil.PlannerSettings, query, r.args, each)
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
	cur ff.Cursor
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
func (r *reader[E]) slotHeld(k int, taken *int, last *ff.Cursor) {
	for *taken < len(r.heldRows) && r.heldRows[*taken].k <= k {
		r.scratch = append(r.scratch, r.heldRows[*taken].ev)
		*last = r.heldRows[*taken].cur
		*taken++
	}
}

// send hands d to the consumer, blocking while the buffer is full; false
// when ctx ended first.
func (r *reader[E]) send(ctx context.Context, d delivery[E]) bool {
	select {
	case r.out <- d:
		return true
	case <-ctx.Done():
		return false
	}
}
