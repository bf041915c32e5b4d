package subscribe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
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

// reader runs one stream: it owns the connections, the batch and the SQL,
// and feeds the Stream's channel. This file has its state, connections and
// serve loop; page.go reads and delivers a page (readPage); position.go
// keeps where the stream is: the ticks, the start point, the batches of a
// run and the gap check.
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

	from, to snapshot
	fromAtMs int64  // when from was taken (0: unknown)
	toAtMs   int64  // when to was taken
	ticks    []tick // ticks after from, read ahead
	// ticksFull says the last read of ticks was full: more may follow.
	ticksFull bool
	// catchUpTo, after a reconnect, is the newest tick then: the stream
	// reads on at once until it is past it (the wake-ups of the outage
	// were lost).
	catchUpTo int64
	// started says the current batch is the start point's (not one read
	// from the ticks): later ticks may already wait.
	started bool
	batch   batch // the batch of the span's first tick, while inBatch
	inBatch bool
	done    []int64  // the transactions of from.Xip finished by the span's first tick
	pos     position // every row of the batch at or before pos is dealt with
	last    Cursor   // cursor of the last delivered event (or the start)

	// span is the ticks of the current read, oldest first (to is the last):
	// consecutive batches read together, see beginRun. batches[k] is the
	// batch of span[k], built when first needed.
	span    []tick
	batches []batch
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
	origin Origin

	// afterStored says cfg.after is a named consumer's stored position,
	// which is this stream's whatever origin it records (its schema may
	// have been renamed since).
	afterStored bool

	// startFrom is the older snapshot of the first batch.
	startFrom snapshot
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

// newReader returns the reader of stream t with the validated options cfg,
// connecting with connCfg. start connects it.
func newReader[E any](cfg config, t table[E], connCfg *pgx.ConnConfig) *reader[E] {
	logger := cfg.logger.With("stream", t.name)
	return &reader[E]{cfg: cfg, table: t, dec: t.newDecoder(logger), connCfg: connCfg, logger: logger,
		waits: map[waitKey]Wait{}, maxSQLExcl: maxSQLExcl}
}

// session is one pair of connections: q reads, l LISTENs.
type session struct {
	q, l *pgx.Conn
}

// close closes both connections, giving them up to 2 s to say goodbye.
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
	r.origin = Origin{Stream: r.table.stream, Schema: string(schema)}

	var count int
	err = s.q.QueryRow(ctx, schema.SQL("SELECT num_partitions FROM {S}ff_partition_config")).Scan(&count)
	switch {
	case dbutil.IsUndefinedTable(err) || errors.Is(err, pgx.ErrNoRows):
		return nil, fmt.Errorf("subscribe: %w", schema.NoTables(ctx, s.q))
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
	// The server may be another one now (a promoted standby, through a
	// multi-host URL): the stream reads on only from a position it holds.
	if err := r.checkResume(ctx, q); err != nil {
		_ = q.Close(ctx)
		return nil, err
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
			// A position this server does not hold stays so.
			retry = !errors.Is(err, ff.ErrPositionAhead)
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
