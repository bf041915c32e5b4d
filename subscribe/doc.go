// Package subscribe streams ffriver's outboxes: the lease history
// (ff_lease_event, Leases) and completions (ff_completion_event,
// Completions). Both streams run on the same machinery.
//
// # Commit-safe order
//
// An outbox row's event_id is taken from a sequence at INSERT, not at COMMIT,
// so a reader that keeps "event_id > last" loses rows: transaction A takes id
// 10, B takes 11, B commits, the reader moves to 11, A commits, 10 is never
// read. Upstream FlowFabric has this bug.
//
// Instead every row records the id of its writing transaction (xact_id,
// filled by a column default with pg_current_xact_id()). A stream reads
// only rows whose xact_id is below the horizon, pg_snapshot_xmin of a
// snapshot (ff_xact_horizon()): every transaction below it has finished, so
// its rows are all visible or never will be. Rows are read in (xact_id,
// event_id) order with keyset pagination, (xact_id, event_id) > (x, e). A
// transaction that commits later has an xid at or above the horizon of every
// read that happened before it committed, so it always sorts after the
// reader's position: no row is ever skipped, and every reader sees the same
// order. The horizon is read in its own statement before the page query,
// never inside it: ff_xact_horizon() is VOLATILE, so inside the page query
// it would take a newer snapshot than the scan's, and could pass a
// transaction whose rows the scan cannot see yet.
//
// The order is a total order that is stable across reads and subscriptions,
// but it is neither event_id order nor exactly commit order: it is the order
// in which writers obtained their transaction ids (roughly, of their first
// writes), and within a transaction, event_id order.
//
// The cost: a transaction that holds an xid stays below the horizon until it
// ends, so a long-open writing transaction anywhere on the server (any
// database, any table, including an idle-in-transaction session or a
// prepared transaction) holds delivery back until it commits or aborts.
// Nothing is lost meanwhile; events are delayed, then delivered in order.
// Read-only transactions, which have no xid, do not hold the horizon.
//
// # Cursors and start points
//
// Each event carries an ff.Cursor, (xact_id, event_id). A subscription
// started after a cursor (StartAfter) delivers exactly the events that follow
// it. StartBeginning reads the whole table. StartNow (the default) delivers
// exactly the transactions that had not committed when the subscribe call
// took its snapshot: it starts at that snapshot's xmin and skips the rows
// the snapshot already saw, so a transaction that was open while the stream
// subscribed is delivered when it commits (tailing from MAX(event_id), as
// upstream does, would lose it).
//
// A legacy cursor (the upstream 9-byte form, ff.Cursor.Legacy, an event_id
// E only) resumes at the first event whose event_id is greater than E, then
// continues in commit-safe order. Commit-safe order interleaves event ids,
// so this is worked out from one snapshot S at subscribe time. The legacy
// consumer can only have seen rows committed before S; the stream skips
// exactly the rows with event_id <= E that S sees, and delivers everything
// else: every row with event_id > E, and rows with event_id <= E that were
// not yet committed at S (upstream's id cursor would have lost those). It
// starts just before the lowest position such a row can have (the lowest
// xact_id of a visible row with event_id > E, or xmin(S) for rows not yet
// visible), and drops the skip rule once past xmax(S). Resuming from the
// legacy cursor itself is exact. One caveat: the events delivered while the
// stream is still below xmax(S) carry ordinary cursors, and a new
// subscription after one of those does not know E, so it would deliver
// again the rows with event_id <= E that commit-safe order places after it
// (only those repeats; never fewer events).
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
