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

// position is a place in commit-safe order, (xact_id, event_id): the stream
// has dealt with every row at or before it.
type position struct{ xact, event int64 }

func (p position) less(q position) bool {
	return p.xact < q.xact || (p.xact == q.xact && p.event < q.event)
}

// below returns the position after every row whose transaction is below
// horizon h.
func below(h int64) position { return position{h - 1, math.MaxInt64} }

// skipRule drops rows the start point says were already seen. It only ever
// concerns rows whose xact_id is below until; once the stream is past that,
// the rule is dropped.
type skipRule struct {
	until int64
	pred  string // SQL; its parameters are numbered after the filter's
	args  []any
}

// reader runs one stream: it owns the connections, the position and the
// SQL, and feeds the Stream's channel.
type reader[E any] struct {
	cfg     config
	table   table[E]
	dec     decoder[E]
	connCfg *pgx.ConnConfig
	logger  *slog.Logger

	channel    string // NOTIFY channel
	horizonSQL string
	pageSQL    string
	skipSQL    string // pageSQL with the skip rule's predicate
	filterArgs []any

	pos  position  // every row at or before pos has been dealt with
	h    int64     // the newest horizon read; sound to reuse forever
	skip *skipRule // nil once past it
	last ff.Cursor // cursor of the last delivered event (or the start)

	args    []any // reused argument slice
	scratch []E   // reused decode buffer

	out   chan delivery[E]
	chunk int
}

func newReader[E any](cfg config, t table[E], connCfg *pgx.ConnConfig) *reader[E] {
	logger := cfg.logger.With("stream", t.name)
	return &reader[E]{cfg: cfg, table: t, dec: t.newDecoder(logger), connCfg: connCfg, logger: logger}
}

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

	var count int
	err = s.q.QueryRow(ctx, schema.SQL("SELECT num_partitions FROM {S}ff_partition_config")).Scan(&count)
	switch {
	case dbutil.IsUndefinedTable(err) || errors.Is(err, pgx.ErrNoRows):
		return nil, fmt.Errorf("subscribe: schema %s has no ffriver tables: %w", schema, ff.ErrNotMigrated)
	case err != nil:
		return nil, dbutil.MapErr(err, "subscribe: reading the partition count")
	}
	for _, p := range r.cfg.partitions {
		if int(p) >= count {
			return nil, ff.Validationf("partitions", "%d is outside this schema's 0..%d", p, count-1)
		}
	}

	if err := r.initPosition(ctx, s.q); err != nil {
		return nil, err
	}
	r.buildSQL()
	// Preparing checks the SQL against the schema now rather than later.
	for _, q := range []string{r.horizonSQL, r.pageSQL, r.skipSQL} {
		if q == "" {
			continue
		}
		if _, err := s.q.Prepare(ctx, "", q); err != nil {
			if dbutil.IsUndefinedTable(err) {
				return nil, fmt.Errorf("subscribe: schema %s: %w: %w", schema, ff.ErrNotMigrated, err)
			}
			return nil, dbutil.MapErr(err, "subscribe: preparing the stream query")
		}
	}
	if s.l, err = r.listen(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// initPosition sets pos, h, skip and last from the start point.
func (r *reader[E]) initPosition(ctx context.Context, q *pgx.Conn) error {
	schema := r.cfg.schema
	switch {
	case r.cfg.start == StartBeginning:
		r.pos, r.last = position{}, ff.Cursor{}

	case r.cfg.start == StartAfter && !r.cfg.after.Legacy:
		c := r.cfg.after
		r.pos, r.last = position{c.Xact, c.EventID}, c

	case r.cfg.start == StartAfter:
		// A legacy cursor says "every event_id <= E was seen", in id order.
		// The legacy consumer can only have seen rows committed before this
		// subscribe call, so: skip exactly the rows with event_id <= E that
		// the snapshot S of one statement sees. Every row with event_id > E
		// sits at or after (min(minX, xmin(S)), 0), where minX is the lowest
		// xact_id of such rows visible in S, and rows not visible in S
		// belong to transactions with xids >= xmin(S). Start just before
		// that. Rows visible in S have xids below xmax(S), so past xmax(S)
		// the rule is dropped.
		e := r.cfg.after.EventID
		var xmin, xmax int64
		var snap string
		var minX *int64
		err := q.QueryRow(ctx, schema.SQL(`
SELECT pg_snapshot_xmin(s)::text::bigint, pg_snapshot_xmax(s)::text::bigint, s::text,
       (SELECT min(xact_id) FROM {S}`+r.table.name+` WHERE event_id > $1)
FROM pg_current_snapshot() AS s`), e).Scan(&xmin, &xmax, &snap, &minX)
		if err != nil {
			return r.startErr(err)
		}
		startX := xmin
		if minX != nil {
			startX = min(startX, *minX)
		}
		r.pos, r.last = below(startX), r.cfg.after
		r.skip = &skipRule{until: xmax, args: []any{e, snap},
			pred: "NOT (event_id <= $%d AND pg_visible_in_snapshot(xact_id::text::xid8, $%d::text::pg_snapshot))"}

	default: // StartNow
		// The transactions not visible in the subscribe snapshot S are the
		// ones that commit "after now". All of them have xids >= xmin(S);
		// rows of xids in [xmin, xmax) that S sees committed before it and
		// are skipped.
		var xmin, xmax int64
		var snap string
		err := q.QueryRow(ctx, `
SELECT pg_snapshot_xmin(s)::text::bigint, pg_snapshot_xmax(s)::text::bigint, s::text
FROM pg_current_snapshot() AS s`).Scan(&xmin, &xmax, &snap)
		if err != nil {
			return r.startErr(err)
		}
		r.pos, r.h = below(xmin), xmin
		r.last = ff.Cursor{Xact: xmin - 1, EventID: math.MaxInt64}
		if xmax > xmin {
			r.skip = &skipRule{until: xmax,
				pred: "NOT pg_visible_in_snapshot(xact_id::text::xid8, $%d::text::pg_snapshot)", args: []any{snap}}
		}
	}
	return nil
}

func (r *reader[E]) startErr(err error) error {
	if dbutil.IsUndefinedTable(err) {
		return fmt.Errorf("subscribe: schema %s: %w: %w", r.cfg.schema, ff.ErrNotMigrated, err)
	}
	return dbutil.MapErr(err, "subscribe: reading the start position")
}

// buildSQL writes the page queries: only the predicates the options need,
// so each is a plain index range scan on (xact_id, event_id).
func (r *reader[E]) buildSQL() {
	schema := r.cfg.schema
	r.horizonSQL = schema.SQL("SELECT {S}ff_xact_horizon()")

	var b strings.Builder
	b.WriteString("SELECT xact_id, event_id, ")
	b.WriteString(r.table.columns)
	b.WriteString(" FROM ")
	b.WriteString(schema.SQL("{S}" + r.table.name))
	b.WriteString(" WHERE xact_id < $1 AND (xact_id, event_id) > ($2, $3)")
	n := 4 // $4 is the limit
	r.filterArgs = nil
	param := func() string {
		n++
		return "$" + strconv.Itoa(n)
	}
	if len(r.cfg.partitions) > 0 {
		b.WriteString(" AND partition_key = ANY(" + param() + "::int4[])")
		r.filterArgs = append(r.filterArgs, r.cfg.partitions)
	}
	if r.cfg.filter.Namespace != "" {
		b.WriteString(" AND namespace = " + param())
		r.filterArgs = append(r.filterArgs, r.cfg.filter.Namespace)
	}
	if r.cfg.filter.InstanceTag != nil {
		// As upstream: only the tag's value is compared, against the
		// instance_tag column (the value of "cairn.instance_id").
		b.WriteString(" AND instance_tag = " + param())
		r.filterArgs = append(r.filterArgs, r.cfg.filter.InstanceTag.Value)
	}
	where := b.String()
	const tail = " ORDER BY xact_id, event_id LIMIT $4"
	r.pageSQL = where + tail
	r.skipSQL = ""
	if r.skip != nil {
		nums := make([]any, len(r.skip.args))
		for i := range nums {
			n++
			nums[i] = n
		}
		r.skipSQL = where + " AND " + fmt.Sprintf(r.skip.pred, nums...) + tail
	}
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
	first := true
	for {
		more, err := r.readPage(ctx, s.q)
		if err != nil {
			return err
		}
		if first {
			first = false
			healthy()
		}
		if more {
			select {
			case err := <-lerr:
				return listenErr(err)
			default:
			}
			continue
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

// readPage reads one page at or below the horizon and delivers its events.
// It reports whether the page was full (more may follow at once).
func (r *reader[E]) readPage(ctx context.Context, q *pgx.Conn) (bool, error) {
	if !r.pos.less(below(r.h)) {
		// Everything below the known horizon is done: read a newer one.
		// A horizon read in an earlier statement than the page query is
		// sound: its transactions had all finished before the page
		// query's snapshot was taken. (Reading it inside the page query
		// through the VOLATILE ff_xact_horizon() would not be: that takes
		// a newer snapshot than the scan's.)
		var h int64
		if err := q.QueryRow(ctx, r.horizonSQL).Scan(&h); err != nil {
			return false, dbutil.MapErr(err, "subscribe: reading the horizon")
		}
		r.h = max(r.h, h)
		if !r.pos.less(below(r.h)) {
			return false, nil
		}
	}

	query := r.pageSQL
	r.args = append(r.args[:0], r.h, r.pos.xact, r.pos.event, r.cfg.pageSize)
	r.args = append(r.args, r.filterArgs...)
	if r.skip != nil {
		query = r.skipSQL
		r.args = append(r.args, r.skip.args...)
	}
	rows, err := q.Query(ctx, query, r.args...)
	if err != nil {
		return false, dbutil.MapErr(err, "subscribe: reading "+r.table.name)
	}
	dest := r.dec.dest()
	n := 0
	pos := r.pos
	var last ff.Cursor
	r.scratch = r.scratch[:0]
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			rows.Close()
			return false, dbutil.MapErr(err, "subscribe: decoding "+r.table.name)
		}
		n++
		pos.xact, pos.event = r.dec.position()
		if ev, ok := r.dec.event(); ok {
			r.scratch = append(r.scratch, ev)
			last = ff.Cursor{Xact: pos.xact, EventID: pos.event}
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return false, dbutil.MapErr(err, "subscribe: reading "+r.table.name)
	}
	full := n == r.cfg.pageSize
	if !full {
		// The page scanned every row below the horizon after pos, filtered
		// or not: none is left to read there.
		if b := below(r.h); pos.less(b) {
			pos = b
		}
	}

	if len(r.scratch) > 0 {
		events := slices.Clone(r.scratch)
		clear(r.scratch)
		for len(events) > 0 {
			k := min(len(events), r.chunk)
			if !r.send(ctx, delivery[E]{events: events[:k:k]}) {
				return false, ctx.Err()
			}
			events = events[k:]
		}
		r.last = last
	}
	r.pos = pos
	if r.skip != nil && r.pos.xact >= r.skip.until {
		r.skip = nil
	}
	return full, nil
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
