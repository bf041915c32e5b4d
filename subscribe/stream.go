package subscribe

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"sync"
	"sync/atomic"

	"github.com/ffriver/ffriver/ff"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrClosed is returned by Next after Close.
var ErrClosed = errors.New("subscribe: stream closed")

// DisconnectedError reports that a stream lost its connection to Postgres.
// It is not terminal: the stream reconnects with backoff and carries on from
// where it was, without losing or repeating events. A stream yields it once
// per outage, however many reconnect attempts the outage takes.
type DisconnectedError struct {
	// Cursor is the cursor of the last event delivered before the outage
	// (or, when none was, the cursor the stream started from; for a stream
	// started from now, a cursor just before every event not yet committed
	// at subscribe time). A new subscription started after it loses nothing
	// and repeats no delivered event.
	Cursor Cursor
	// Err is the connection error.
	Err error
}

// Error implements error.
func (e *DisconnectedError) Error() string {
	return fmt.Sprintf("subscribe: connection lost after cursor %s, reconnecting: %v", e.Cursor, e.Err)
}

// Unwrap returns the connection error.
func (e *DisconnectedError) Unwrap() error { return e.Err }

// Stream is one subscription to an outbox table, delivering events of type
// E (LeaseEvent or CompletionEvent) in commit-safe order. Create it with
// Leases or Completions; consume it with Next or All; release it with Close.
//
// A Stream has one consumer: Next and All must not be called concurrently.
// Close may be called from any goroutine.
type Stream[E any] struct {
	out    chan delivery[E]
	cancel context.CancelFunc
	done   chan struct{}
	closed atomic.Bool
	once   sync.Once
	// err is the terminal error; the reader sets it before closing out.
	err error

	cur  []E
	next int
	term error

	// ack, for a named consumer, receives what Next acknowledged: every
	// event returned before the current call.
	ack      *ackState
	cursorOf func(E) Cursor
	returned int64
	lastRet  Cursor

	// observe, with Options.MeterProvider, records each returned event.
	observe func(E)

	// start is the position the stream started after (StartCursor).
	start Cursor
}

// delivery is what the reader hands the consumer: a chunk of events, or an
// error.
type delivery[E any] struct {
	events []E
	err    error
}

// Leases subscribes to the lease history (ff_lease_event).
//
// Everything is validated before it returns: options, cursor, filter,
// partitions against the schema's partition count, and the schema itself. A
// bad input is an ff.ErrValidation error; a schema without ffriver's tables
// is ff.ErrNotMigrated; an unreachable server is ff.ErrUnavailable.
//
// The stream opens two connections of its own from pool's connection config
// (pool's connections are not used), named Options.ApplicationName. It runs
// until Close is called or ctx is cancelled.
func Leases(ctx context.Context, pool *pgxpool.Pool, opts Options) (*Stream[LeaseEvent], error) {
	return open(ctx, pool, opts, leaseTable)
}

// Completions subscribes to completion events (ff_completion_event); see
// Leases for what is checked and how the stream runs.
func Completions(ctx context.Context, pool *pgxpool.Pool, opts Options) (*Stream[CompletionEvent], error) {
	return open(ctx, pool, opts, completionTable)
}

func open[E any](ctx context.Context, pool *pgxpool.Pool, opts Options, t table[E]) (*Stream[E], error) {
	cfg, err := opts.validate()
	if err != nil {
		return nil, err
	}
	var observe func(E)
	if cfg.meters != nil {
		if observe, err = newObserver(cfg.meters, t); err != nil {
			return nil, err
		}
	}
	if pool == nil {
		return nil, ff.Validationf("pool", "nil pool")
	}
	connCfg := pool.Config().ConnConfig // a copy
	connCfg.RuntimeParams["application_name"] = cfg.appName

	r := newReader(cfg, t, connCfg)
	if cfg.consumer != "" {
		r.consumer = &consumerState{name: cfg.consumer, maxLag: cfg.maxLag, ack: &ackState{}}
	}
	sess, err := r.start(ctx)
	if err != nil {
		return nil, err
	}

	chunk := min(cfg.pageSize, max(cfg.bufferSize, 1))
	s := &Stream[E]{
		out:   make(chan delivery[E], max(1, cfg.bufferSize/chunk)),
		done:  make(chan struct{}),
		start: r.last,
	}
	if s.start.IsZero() {
		// From the table's beginning: the position before the first
		// batch's first event, which resumes exactly as the beginning
		// does and, unlike the zero Cursor, can be stored and handed back
		// as a cursor.
		s.start = r.batch.Cursor(0, 0)
	}
	r.out, r.chunk = s.out, chunk
	if r.consumer != nil {
		s.ack, s.cursorOf = r.consumer.ack, t.cursor
	}
	s.observe = observe
	runCtx, cancel := context.WithCancel(ctx)
	s.cancel = cancel
	go func() {
		defer close(s.done)
		defer close(s.out)
		s.err = r.run(runCtx, sess)
	}()
	return s, nil
}

// StartCursor returns the position the stream started after, as worked out
// when it subscribed: a new subscription with StartAfter and this cursor
// delivers the events this stream delivers. For StartNow it is the boundary
// of the subscribe-time snapshot (the events of every transaction not
// committed then follow it), for StartBeginning (or a zero cursor) the
// position before the first batch's first event (never the zero Cursor, so
// it can be stored as any other), for StartAfter the cursor given, and for a
// named consumer its stored position. A consumer that must not lose events
// between a stream and a later one, even when the first delivers none,
// stores this cursor as soon as the stream opens and replaces it with each
// event's. (For StartSince and a legacy cursor, the first batch also skips
// rows by time or event id, which the cursor does not carry: resuming after
// it may deliver those rows too.)
func (s *Stream[E]) StartCursor() Cursor { return s.start }

// Next returns the next event, waiting for one as long as ctx allows.
//
// A *DisconnectedError is not terminal: call Next again and the stream
// carries on once it has reconnected. After Close, Next returns ErrClosed;
// after a terminal failure (the stream's context was cancelled, or an error
// that reconnecting cannot fix, such as a dropped table) it returns that
// error on every call. A cancelled ctx returns ctx's error and leaves the
// stream usable.
func (s *Stream[E]) Next(ctx context.Context) (E, error) {
	var zero E
	if s.closed.Load() {
		return zero, ErrClosed
	}
	if s.ack != nil && s.returned > 0 {
		s.ack.set(s.lastRet, s.returned)
	}
	if s.next < len(s.cur) {
		ev := s.cur[s.next]
		s.next++
		s.countReturned(ev)
		if s.observe != nil {
			s.observe(ev)
		}
		return ev, nil
	}
	if s.term != nil {
		return zero, s.term
	}
	select {
	case d, ok := <-s.out:
		if !ok {
			s.term = s.err
			if s.term == nil || s.closed.Load() {
				s.term = ErrClosed
			}
			return zero, s.term
		}
		if d.err != nil {
			return zero, d.err
		}
		s.cur, s.next = d.events, 1
		s.countReturned(d.events[0])
		if s.observe != nil {
			s.observe(d.events[0])
		}
		return d.events[0], nil
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// returned_ counts ev as returned, for a named consumer's acknowledgements.
func (s *Stream[E]) countReturned(ev E) {
	if s.ack != nil {
		s.returned++
		s.lastRet = s.cursorOf(ev)
	}
}

// All returns an iterator over the stream's events for a range loop. It
// yields each event with a nil error, and each *DisconnectedError with a zero
// event (the loop may continue: the stream reconnects). Any other error is
// yielded once and ends the iteration, as does breaking out of the loop.
// ctx bounds the iteration, not the stream.
func (s *Stream[E]) All(ctx context.Context) iter.Seq2[E, error] {
	return func(yield func(E, error) bool) {
		for {
			ev, err := s.Next(ctx)
			if err != nil {
				var disc *DisconnectedError
				if !yield(ev, err) || !errors.As(err, &disc) {
					return
				}
				continue
			}
			if !yield(ev, nil) {
				return
			}
		}
	}
}

// Close stops the stream's goroutines and closes its connections; it
// returns once they are closed. It is safe to call more than once and from
// any goroutine, but for a named consumer it must be called by the
// consumer's goroutine (or after it stopped calling Next): it acknowledges
// every event Next returned and stores the consumer's position.
func (s *Stream[E]) Close() {
	s.once.Do(func() {
		if s.ack != nil && s.returned > 0 {
			s.ack.set(s.lastRet, s.returned)
		}
		s.closed.Store(true)
		s.cancel()
		<-s.done
	})
}
