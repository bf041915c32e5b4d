// Package subscribe streams ffriver's outboxes: the lease history
// (ff_lease_event, Leases) and completions (ff_completion_event,
// Completions). Both streams run on the same machinery.
//
// # Order: batches between snapshots
//
// An outbox row's event_id is taken from a sequence at INSERT, not at COMMIT,
// so a reader that keeps "event_id > last" loses rows: transaction A takes id
// 10, B takes 11, B commits, the reader moves to 11, A commits, 10 is never
// read. Upstream FlowFabric has this bug.
//
// Instead every row records the id of its writing transaction (xact_id,
// filled by a column default with pg_current_xact_id()), and streams deliver
// by pairs of snapshots, as PgQ (Skype's queue) does. A tick is a snapshot
// of the server (pg_current_snapshot(): xmin, xmax and the transactions in
// progress) recorded in ff_stream_tick; ticks are taken one after another,
// each containing the one before. A batch is the span between two
// consecutive ticks: every row whose writer is visible in the newer tick
// and was not visible in the older one. Every committed transaction becomes
// visible in exactly one span, so every row is delivered exactly once, and
// the stream follows commit order at the grain of the ticks: a batch's
// transactions all committed after the previous batch's. Inside a batch,
// rows come in (xact_id, event_id) order.
//
// A transaction still open delays only its own rows: they arrive in the
// batch of the first tick that sees it finished. Nothing else waits for
// it, whether it is an idle session in another database, a long migration,
// or a long writer of this very outbox. (The design this replaces read only
// below the oldest transaction still running anywhere on the server, so any
// of these stalled every stream.)
//
// A batch is read in two parts, as PgQ does, so that an old open
// transaction never widens a scan: first the rows of the transactions that
// were in progress at the older tick and finished by the newer (looked up by
// exact xact_id), then the range [xmax of the older tick, xmax of the
// newer), less the transactions still in progress at the newer. Both are
// index scans on (xact_id, event_id), paged by keyset.
//
// Readers take ticks themselves: a reader that finds no tick after its own
// calls ff_stream_ticks, which takes one under a table lock unless nothing
// finished since the newest. Every reader of a schema walks the same ticks,
// so every reader delivers the same batches in the same order, and a stream
// from the beginning starts with everything the oldest tick sees, then walks
// the ticks. A cursor carries its batch's two snapshots itself, so resuming
// never depends on a tick still existing: ticks are pruned after an hour
// (the newest of each WAL timeline is kept, see Failover). (A reader
// resuming from a cursor whose ticks were pruned delivers the same events;
// only its batch boundaries may differ from another reader's.) Each tick
// takes a transaction id. A tick commits without waiting for the WAL
// flush, except where the server has synchronous standbys: there it commits
// as durably as the events it covers (see Failover).
//
// # Cursors and start points
//
// Each event carries a Cursor: its batch (the two snapshots) and its
// (xact_id, event_id) inside the batch. A subscription started after a
// cursor (StartAfter) re-derives the batch from the cursor's snapshots and
// delivers exactly the events that follow: the rest of the batch, then the
// batches of the following ticks. Cursors are exact across out-of-order
// commits, long writers, restarts and reconnects. StartBeginning reads the
// whole table. StartNow (the default) takes a tick at subscribe time and
// delivers exactly the transactions that had not finished in it.
//
// A cursor names transaction ids, which are per server. A cursor whose
// snapshots are ahead of this server (it comes from another server, or the
// schema was restored from a dump elsewhere) fails at subscribe time with a
// *ForeignCursorError (ErrForeignCursor); resume from the start or from a
// time instead. A cursor from another server whose ids happen to be behind
// this one's is told apart only when its tick is not in this server's
// ff_stream_tick (see Failover), which a restored dump may hold.
//
// A cursor records the stream it was taken from, leases or completions, and
// the schema's name (Cursor.Origin). Handed to the other stream, or to a
// stream of another schema, it fails at subscribe time with a
// *CursorOriginError (ErrCursorOrigin) saying where it was taken from: its
// position would mean nothing there. Cursors written before cursors
// recorded their origin (prefix 04) record none and are accepted by every
// stream, as before; so is a named consumer's stored position. A schema
// renamed since the cursor was taken refuses it too: resume from a time.
//
// Cursors of the previous ffriver format (17 bytes, (xact_id, event_id)
// only, written by streams that read below the oldest running transaction)
// still work as starting points: the stream delivers every row after the
// position in (xact_id, event_id) order that is visible now, then the later
// batches.
//
// A legacy cursor (the upstream 9-byte form, Cursor.Legacy, an event_id
// E only) resumes at the first event whose event_id is greater than E. One
// whose E the outbox's event id sequence has not handed out yet is refused
// at subscribe time with a *ForeignCursorError: no stream of this server
// produced it. The
// legacy consumer can only have seen rows committed before the subscribe
// call, so the stream's first batch, up to a tick taken then, skips the rows
// with event_id <= E, and later batches skip nothing: rows with event_id <=
// E that commit later are delivered (upstream's id cursor would have lost
// those). One caveat: the events of that first batch carry ordinary cursors,
// and a new subscription after one of those no longer knows E, so it would
// deliver again the rows with event_id <= E that sort after it in that batch
// (only those repeats; never fewer events).
//
// A stream catching up does not pay a query per tick: it reads a run of
// consecutive ticks together when none but the first has transactions that
// were in progress at the tick before and finished by its own. The run's
// rows are then the first batch's finished transactions (by exact id) and
// one range, [xmax of the older snapshot, xmax of the run's last tick),
// less the transactions each tick saw in progress within its own span; in
// (xact_id, event_id) order that range is the order of the batches, since
// each batch's rows lie in its own span. Each row still carries its own
// batch's cursor: a stream that reads ticks in runs and one that walked them
// one by one deliver the same events in the same order with the same
// cursors.
//
// # Gaps
//
// Outbox retention (the outbox_retention scanner's trim) records what it deletes
// in ff_outbox_trim: per trimming transaction, runs of the deleted rows'
// transaction ids that span no transaction still running then, with the
// count and the ranges of event ids and times. A stream checks them when it
// subscribes and at the end of each run of batches: a run holding a
// transaction the stream's position has not seen means events were
// deleted before the stream read them, and the stream fails with a
// *GapError (ErrGap) saying how many (at most) and which. It is terminal:
// the stream never carries on past the hole. A stream from the beginning
// has no gap by definition (its beginning is wherever retention left it).
// The check is conservative: a consumer whose position is inside a batch
// that retention trimmed after it read part of it gets the error too.
//
// # Failover
//
// A promoted physical standby keeps the primary's transaction ids, so a
// stream reconnecting to it (a multi-host URL with
// target_session_attrs=read-write follows the promotion) carries on from
// its position, and cursors and named consumers' positions stay good. With
// synchronous replication that is exact: there a tick commits as durably as
// the events it covers, so every tick a stream has read, and every event,
// is on the standby. With asynchronous replication the standby may lack the
// last commits, and hands their transaction ids out again to other
// transactions: a position taken after the last commit it received would
// skip those transactions' events in silence. (So may a server that lost
// its last ticks in a crash: without synchronous standbys a tick commits
// without waiting for the WAL flush.)
//
// Each tick's id records the WAL timeline it was taken on (a promotion
// starts a new timeline), and pruning keeps the newest tick of every
// timeline. A position is in this server's history when its tick is here,
// or a later tick of its timeline is. Otherwise, at subscribe time (a
// cursor, a named consumer's stored position) and whenever a running
// stream reconnects, the stream fails with a *PositionAheadError
// (ff.ErrPositionAhead) that says so and names Resume, the newest position
// of that timeline the server holds: resuming there delivers again the
// events after it that survived. A named consumer resumes from the position
// stored on the new primary, with the same proviso. A running stream that
// had read past its last delivered event into lost ticks (batches without
// events for it) reads again after that event, losing and repeating
// nothing. Positions taken before ticks recorded their timeline (migration
// 0018) are checked against the server's transaction ids only, as cursors
// from another server are.
//
// # Named consumers
//
// A named consumer (Options.Consumer) keeps its position in the database,
// in ff_stream_consumer, one row per stream and name. An event is
// acknowledged when the consumer asks for the next one (Next, or the next
// turn of an All loop), and when it closes the stream: Close acknowledges
// every event Next returned. The stream stores the acknowledged position
// (the end of the newest batch acknowledged entirely, or the last
// acknowledged event) at most every ConsumerSaveInterval (every second
// while it only moves over batches without events) and once more at
// Close; a consumer that crashes gets again, on its next subscription, the
// events after its last stored position: exactly once across Close, at
// least once across a crash. A new subscription with the name resumes
// after the stored position, whatever Start says.
//
// While a consumer's position is younger than its maximum lag
// (Options.ConsumerMaxLag), outbox retention keeps every event it has not
// acknowledged (every row not visible in the position's older snapshot).
// Past that, retention deletes as usual, and the consumer's next
// subscription, or its running stream, fails with a *GapError.
//
// A name is attached to at most one stream at a time (a session advisory
// lock on the stream's reading connection): a second subscription with the
// same name fails with ErrConsumerBusy, after trying for up to 2 s (a stream
// closed a moment ago holds the lock until the server has ended its
// session, which can be just after Close returned). A stream that lost its connection
// takes the lock again when it reconnects, and keeps retrying while the
// name is still held (the server may not have noticed the lost session
// yet).
//
// # Saying why a stream waits
//
// A transaction that wrote to the outbox and stays open holds back its own
// events, nothing else. Options.OnWait hears about each such writer once it
// has been open for WaitNoticeAfter, naming the session (pid, application,
// database, state, age; or a prepared transaction's gid), and again when it
// ends. OpenWriters is the same lookup for other tools (ffctl status).
//
// # Filters and partitions
//
// Options.Partitions restricts a stream to a set of partitions (all by
// default; partition 0 is not special). Options.Filter compares the row's
// namespace exactly and the row's instance_tag column with the filter's tag
// VALUE only (the column holds the value of the execution's
// "cairn.instance_id" tag; the key is not compared, as upstream). A NULL
// column never matches a set dimension. Filters run in SQL; the stream's
// position still advances past the rows they drop, so a filtered stream
// reads each row at most once.
//
// # Delivery and faults
//
// Each stream has two connections of its own: one LISTENs on
// outbox.Channel(schema), which outbox.Waker notifies after commits, and
// one reads. A notification or the poll interval triggers a read; a full
// page triggers the next read at once. The dedicated LISTEN connection keeps
// reading notifications even while the reader waits on a slow consumer, so
// the server's notification queue never backs up behind a stream.
//
// Memory is bounded: the reader decodes at most a page ahead, and blocks
// when Options.BufferSize events wait for the consumer. Nothing is dropped.
//
// When a connection drops (the server restarts, a backend is terminated),
// the stream yields one *DisconnectedError carrying the cursor of the last
// delivered event, reconnects with backoff, and carries on from its position:
// no event is lost or repeated. Close, or cancelling the context given to
// Leases or Completions, stops the stream and closes both connections.
package subscribe
