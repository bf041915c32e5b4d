package subscribe

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/jackc/pgx/v5"
)

// Named consumers: see the package documentation.

// ErrConsumerBusy is returned when a stream subscribes with the name of a
// consumer another stream is attached to.
var ErrConsumerBusy = errors.New("subscribe: consumer already attached to another stream")

// Defaults of named consumers.
const (
	// DefaultConsumerMaxLag is how old a named consumer's position may grow
	// before retention stops waiting for it.
	DefaultConsumerMaxLag = 7 * 24 * time.Hour
	// ConsumerSaveInterval is the least time between two stores of a named
	// consumer's position.
	ConsumerSaveInterval = 100 * time.Millisecond
	// MaxConsumerName is the longest consumer name, in bytes.
	MaxConsumerName = 63
)

// idleSaveInterval is the least time between two stores of a consumer's
// position when it only moved from one batch end to a later one, with no
// event acknowledged in between.
const idleSaveInterval = time.Second

// ackState is what the consumer has acknowledged, shared by the Stream
// (which writes it in Next and Close) and the reader (which stores it).
type ackState struct {
	mu     sync.Mutex
	cursor Cursor // the last acknowledged event
	count  int64  // events acknowledged
}

func (a *ackState) set(c Cursor, count int64) {
	a.mu.Lock()
	a.cursor, a.count = c, count
	a.mu.Unlock()
}

func (a *ackState) get() (Cursor, int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cursor, a.count
}

// consumerState is the reader's side of a named consumer.
type consumerState struct {
	name    string
	maxLag  time.Duration
	ack     *ackState
	lockSQL string
	saveSQL string
	sent    int64  // events handed to the Stream
	saved   Cursor // the position last stored
	savedAt time.Time
	// savedCount is how many events were acknowledged when it was.
	savedCount int64
	// ends are the ends of the batches the reader finished and the
	// consumer has not acknowledged entirely, oldest first: once it has
	// acknowledged sent events, it is past the batch.
	ends []batchEnd
	// past is the newest batch end the consumer is past.
	past    Cursor
	pastAck int64
}

// batchEnd is the end of a finished batch: the boundary cursor after it,
// and how many events had been sent by then.
type batchEnd struct {
	cursor Cursor
	sent   int64
}

// finished records the end of the batch the reader just finished.
func (c *consumerState) finished(boundary Cursor) {
	if n := len(c.ends); n > 0 && c.ends[n-1].sent == c.sent {
		c.ends[n-1].cursor = boundary
		return
	}
	c.ends = append(c.ends, batchEnd{cursor: boundary, sent: c.sent})
}

// CheckConsumerName checks a consumer name (Options.Consumer): valid UTF-8,
// printable, no spaces, at most MaxConsumerName bytes.
func CheckConsumerName(name string) error {
	if err := ff.CheckText("consumer", name, false, MaxConsumerName); err != nil {
		return err
	}
	for _, r := range name {
		if r < 0x21 || r == 0x7f {
			return ff.Validationf("consumer", "%s: use printable characters without spaces", ff.Excerpt(name))
		}
	}
	return nil
}

// prepareConsumer builds the consumer's SQL.
func (r *reader[E]) prepareConsumer() {
	c := r.consumer
	schema := r.cfg.schema
	// The lock key names the schema, stream and consumer.
	c.lockSQL = "SELECT pg_try_advisory_lock(hashtextextended($1, 0))"
	c.saveSQL = schema.SQL(`INSERT INTO {S}ff_stream_consumer AS c
	(stream, name, cursor, snap_xmin, snap_xmax, snap_xip, position_at_ms, max_lag_ms)
VALUES ($1, $2, $3, $4, $5, $6,
	coalesce((SELECT at_ms FROM {S}ff_stream_tick WHERE tick_id = $7), (extract(epoch FROM clock_timestamp()) * 1000)::bigint), $8)
ON CONFLICT (stream, name) DO UPDATE SET cursor = excluded.cursor,
	snap_xmin = excluded.snap_xmin, snap_xmax = excluded.snap_xmax, snap_xip = excluded.snap_xip,
	position_at_ms = coalesce((SELECT at_ms FROM {S}ff_stream_tick WHERE tick_id = $7),
	                          CASE WHEN c.snap_xmax = excluded.snap_xmax AND c.snap_xip = excluded.snap_xip
	                               THEN c.position_at_ms ELSE excluded.position_at_ms END),
	max_lag_ms = excluded.max_lag_ms,
	updated_at_ms = (extract(epoch FROM clock_timestamp()) * 1000)::bigint`)
}

func (r *reader[E]) lockKey() string {
	return consumerLockKey(string(r.cfg.schema), r.table.name, r.consumer.name)
}

// consumerLockKey is the text whose hash (hashtextextended(key, 0)) is the
// advisory lock a stream attached to the named consumer holds: the
// resolved schema, the outbox table and the name. DropConsumer takes the
// same lock; Consumers recomputes it in SQL for every consumer row.
func consumerLockKey(schema, table, name string) string {
	return schema + "." + table + "." + name
}

// attachWait is how long attach tries again for a consumer's lock held by
// another session: a stream closed a moment ago holds it until the server
// has ended its session, which happens after Close returns when closing cut
// its connection off.
const attachWait = 2 * time.Second

// attach takes the consumer's lock on q, the reading connection, trying
// again for up to attachWait while another session holds it.
func (r *reader[E]) attach(ctx context.Context, q *pgx.Conn) error {
	var ok bool
	deadline := time.Now().Add(attachWait)
	for {
		if err := q.QueryRow(ctx, r.consumer.lockSQL, r.lockKey()).Scan(&ok); err != nil {
			return dbutil.MapErr(err, "subscribe: attaching consumer "+r.consumer.name)
		}
		if ok || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return dbutil.MapErr(ctx.Err(), "subscribe: attaching consumer "+r.consumer.name)
		case <-time.After(50 * time.Millisecond):
		}
	}
	if !ok {
		return fmt.Errorf("%w: consumer %q of %s in schema %s is in use by another stream (another ffctl tail --consumer, "+
			"or a process that has not noticed its connection died yet): stop that one, or choose another name",
			ErrConsumerBusy, r.consumer.name, r.table.name, r.cfg.schema)
	}
	return nil
}

// loadConsumer attaches the consumer and, when it has a stored position,
// makes the stream start after it.
func (r *reader[E]) loadConsumer(ctx context.Context, q *pgx.Conn) error {
	if err := r.attach(ctx, q); err != nil {
		return err
	}
	var raw []byte
	err := q.QueryRow(ctx, r.cfg.schema.SQL(`SELECT cursor FROM {S}ff_stream_consumer WHERE stream = $1 AND name = $2`),
		r.table.name, r.consumer.name).Scan(&raw)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil // a new consumer: Start says where it begins
	case err != nil:
		return r.startErr(err)
	}
	c, err := DecodeCursor(raw)
	if err != nil {
		return fmt.Errorf("subscribe: consumer %q: stored position: %w", r.consumer.name, err)
	}
	r.cfg.start, r.cfg.after, r.cfg.sinceMs, r.afterStored = StartAfter, c, 0, true
	r.logger.Info("subscribe: consumer resumes after its stored position", "consumer", r.consumer.name, "cursor", c.String())
	return nil
}

// ackedPosition returns the consumer's acknowledged position: the end of
// the newest batch it acknowledged entirely, or its last acknowledged
// event when that is further on.
func (r *reader[E]) ackedPosition() Cursor {
	c := r.consumer
	cur, count := c.ack.get()
	k := 0
	for k < len(c.ends) && c.ends[k].sent <= count {
		c.past, c.pastAck = c.ends[k].cursor, c.ends[k].sent
		k++
	}
	c.ends = c.ends[:copy(c.ends, c.ends[k:])]
	switch {
	case count > c.pastAck:
		return cur
	case c.past != (Cursor{}):
		return c.past
	default:
		return c.saved
	}
}

// saveConsumer stores the acknowledged position when it moved, at most
// every ConsumerSaveInterval unless force.
func (r *reader[E]) saveConsumer(ctx context.Context, q *pgx.Conn, force bool) error {
	c := r.consumer
	if c == nil {
		return nil
	}
	_, count := c.ack.get() // before the position: never more than it covers
	pos := r.ackedPosition()
	if pos == c.saved && !c.savedAt.IsZero() {
		return nil
	}
	if !force {
		since := time.Since(c.savedAt)
		// A caught-up consumer's position moves with every tick; storing
		// that once a second is enough (its lag stays under a second).
		if since < ConsumerSaveInterval || (since < idleSaveInterval && count == c.savedCount) {
			return nil
		}
	}
	var from snapshot
	if b, ok := pos.batchOf(); ok {
		from, _ = b.Snapshots()
	} else if pos == r.cfg.after && r.cfg.start == StartAfter {
		// The start cursor of an older form: the reader's first batch
		// begins at the snapshot it stands for.
		from = r.startFrom
	}
	xip := from.Xip
	if xip == nil {
		xip = []int64{}
	}
	var raw []byte
	if !pos.IsZero() {
		raw = pos.Bytes()
	} else {
		raw = []byte{}
	}
	if _, err := q.Exec(ctx, c.saveSQL, r.table.name, c.name, raw, from.Xmin, from.Xmax, xip, from.Tick,
		c.maxLag.Milliseconds()); err != nil {
		return dbutil.MapErr(err, "subscribe: storing consumer "+c.name+"'s position")
	}
	c.saved, c.savedAt, c.savedCount = pos, time.Now(), count
	return nil
}

// saveFinal stores the position when the stream stops, on q when it is
// still usable, else on a connection of its own.
func (r *reader[E]) saveFinal(q *pgx.Conn) {
	if r.consumer == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if q == nil || q.IsClosed() {
		var err error
		if q, err = pgx.ConnectConfig(ctx, r.connCfg); err != nil {
			r.logger.Warn("subscribe: could not store the consumer's last position", "consumer", r.consumer.name, "error", err)
			return
		}
		defer func() { _ = q.Close(ctx) }()
	}
	if err := r.saveConsumer(ctx, q, true); err != nil {
		r.logger.Warn("subscribe: could not store the consumer's last position", "consumer", r.consumer.name, "error", err)
	}
}
