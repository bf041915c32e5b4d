package subscribe

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/ffriver/ffriver/outbox"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The streams, by the names Options, cursors (Origin), ffctl tail and ffctl
// consumer use.
const (
	StreamLeases      = "leases"
	StreamCompletions = "completions"
)

// Streams returns the streams' names in the order reports list them:
// leases, then completions.
func Streams() []string { return []string{StreamLeases, StreamCompletions} }

// StreamTables returns the streams' outbox tables, in the order of
// Streams.
func StreamTables() []string { return []string{outbox.LeaseTable, outbox.CompletionTable} }

// StreamTable returns the outbox table of the stream called name
// (StreamLeases or StreamCompletions), the stream column of
// ff_stream_consumer.
func StreamTable(name string) (string, error) {
	if i := slices.Index(Streams(), name); i >= 0 {
		return StreamTables()[i], nil
	}
	return "", ff.Validationf("stream", "%s: want %q or %q", ff.Excerpt(name), StreamLeases, StreamCompletions)
}

// streamOfTable returns the name of the stream whose outbox is table, or
// table itself when it is neither.
func streamOfTable(table string) string {
	if i := slices.Index(StreamTables(), table); i >= 0 {
		return Streams()[i]
	}
	return table
}

// ConsumerInfo describes one named consumer (Options.Consumer): where its
// acknowledged position is, and whether a stream is attached to it now.
type ConsumerInfo struct {
	// Stream is StreamLeases or StreamCompletions.
	Stream string `json:"stream"`
	Name   string `json:"name"`
	// Lag is how old the acknowledged position is: every event committed
	// since was not acknowledged.
	Lag time.Duration `json:"lag_ns"`
	// MaxLag is how old the position may grow before retention stops
	// keeping events for it (Options.ConsumerMaxLag).
	MaxLag time.Duration `json:"max_lag_ns"`
	// UpdatedAt is when the position was last stored.
	UpdatedAt time.Time `json:"updated_at"`
	// Attached says a stream holds the consumer now.
	Attached bool `json:"attached"`
}

// HoldsRetention says whether the consumer keeps events that a retention
// of retention would delete: its position is older than retention, and
// not yet older than its maximum lag.
func (c ConsumerInfo) HoldsRetention(retention time.Duration) bool {
	return c.Lag > retention && c.Lag <= c.MaxLag
}

// Consumers lists the named consumers of the schema's streams (schema ""
// is the connection's search_path), by stream and name.
func Consumers(ctx context.Context, q Querier, schema string) ([]ConsumerInfo, error) {
	s, err := dbutil.ParseSchema(schema)
	if err != nil {
		return nil, err
	}
	rows, err := q.Query(ctx, s.SQL(`SELECT c.stream, c.name,
		(extract(epoch FROM clock_timestamp()) * 1000)::bigint - c.position_at_ms, c.max_lag_ms, c.updated_at_ms,
		EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted
		        AND l.classid::bigint = ((k.key >> 32) & 4294967295) AND l.objid::bigint = (k.key & 4294967295) AND l.objsubid = 1)
		FROM {S}ff_stream_consumer c,
		LATERAL (SELECT hashtextextended(COALESCE(NULLIF($1, ''), current_schema()) || '.' || c.stream || '.' || c.name, 0) AS key) k
		ORDER BY c.stream, c.name`), string(s))
	if err != nil {
		return nil, dbutil.MapErr(err, "reading the stream consumers")
	}
	var out []ConsumerInfo
	for rows.Next() {
		var c ConsumerInfo
		var table string
		var lagMs, maxMs, updMs int64
		if err := rows.Scan(&table, &c.Name, &lagMs, &maxMs, &updMs, &c.Attached); err != nil {
			rows.Close()
			return nil, dbutil.MapErr(err, "reading the stream consumers")
		}
		c.Stream = streamOfTable(table)
		c.Lag, c.MaxLag = time.Duration(max(lagMs, 0))*time.Millisecond, time.Duration(maxMs)*time.Millisecond
		c.UpdatedAt = time.UnixMilli(updMs)
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, dbutil.MapErr(err, "reading the stream consumers")
	}
	return out, nil
}

// DropConsumer removes the named consumer of stream (StreamLeases or
// StreamCompletions): its stored position is deleted, so retention no
// longer keeps events for it from its next trim on, and a stream that
// later subscribes with the name starts afresh (Options.Start). It fails
// with ff.ErrNotFound when there is no such consumer and with
// ErrConsumerBusy while a stream is attached to it (stop that consumer
// first: a running stream would store its position again).
func DropConsumer(ctx context.Context, pool *pgxpool.Pool, schema, stream, name string) error {
	table, err := StreamTable(stream)
	if err != nil {
		return err
	}
	if err := CheckConsumerName(name); err != nil {
		return err
	}
	if name == "" {
		return ff.Validationf("consumer", "is required")
	}
	s, err := dbutil.ParseSchema(schema)
	if err != nil {
		return err
	}
	if s, err = s.Resolve(ctx, pool); err != nil {
		return err
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// The attached stream holds a session advisory lock on the same
		// key (consumerLockKey); holding it for this transaction keeps a
		// stream from attaching until the row is gone.
		var free bool
		if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0))`,
			consumerLockKey(string(s), table, name)).Scan(&free); err != nil {
			return dbutil.MapErr(err, "dropping consumer "+name)
		}
		if !free {
			return fmt.Errorf("consumer %q of the %s stream: %w", name, stream, ErrConsumerBusy)
		}
		tag, err := tx.Exec(ctx, s.SQL(`DELETE FROM {S}ff_stream_consumer WHERE stream = $1 AND name = $2`), table, name)
		if err != nil {
			return dbutil.MapErr(err, "dropping consumer "+name)
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("consumer %q of the %s stream: %w", name, stream, ff.ErrNotFound)
		}
		return nil
	})
}
