// Package scanners is what is due: the Scanner plug-in, its registry and
// settings, the helpers a scanner author needs, and the built-in scanners,
// one file each. It holds no River worker: package workers runs scanners as
// a River pipeline (tick → scan → item) and runs each item's action.
//
// # Built-in scanners
//
// Eight, registered in this order (Builtins), each through the registry
// like any other scanner:
//
//	attempt_timeout.go         attempt_timeout: expired leases → ff.expire_attempt
//	delayed_promoter.go        delayed_promoter: due delayed executions → ff.promote_delayed
//	execution_deadline.go      execution_deadline: passed deadlines → ff.expire_deadline
//	edge_cancel_dispatcher.go  edge_cancel_dispatcher: flagged sibling-cancel groups → ff.cancel_group
//	edge_cancel_reconciler.go  edge_cancel_reconciler: stale cancel groups → ff.reconcile_group
//	outbox_retention.go        outbox_retention: old outbox events → ff.trim_outbox
//	dependency.go              dependency: flow hops left uncounted (edges of terminal upstreams) → ff.advance
//	execution_retention.go     execution_retention: terminal executions past retention → ff.remove_executions
//
// Their actions live in package executions (actions.go) and are wired to
// their item kinds in workers/items.go.
//
// # Grouped scans
//
// A tick runs Due once, each partition counted up to the batch, and
// schedules scans: one per partition with a batch or more due (or capped),
// and the partitions with less due work grouped into shared
// scans of at most a batch of items (a scan job costs a River round
// whatever it finds). Scan is therefore called once per partition of a
// scan job, always with a single partition.
//
// # Writing a scanner
//
// A scanner implements Scanner:
//
//   - Name: a lowercase identifier, unique in the registry; it appears in
//     job args, flags and logs.
//   - Defaults: its tick interval and batch size (overridable per
//     deployment).
//   - Due: one cheap query, typically
//     SELECT partition_key, count(*), min(due) … WHERE <due> GROUP BY partition_key
//     over a partial index on the due column (DueByPartition runs it). A
//     global scanner returns partition 0 when anything is due. Due counts
//     exactly the rows Scan returns, with the same predicate and filter:
//     a row Due counts that no scan returns would show as overdue work
//     forever. With req.Cap set (the tick passes its batch) it may stop
//     counting a partition past the cap and say so (Due.Capped): the
//     built-in scanners read at most Cap+1 rows per partition through an
//     index, after a one-probe gate that answers "nothing due" for the
//     whole store, so a tick's cost does not grow with the backlog.
//     Partitions outside the schema's count are never scanned; the
//     pipeline counts what Due finds there as unprocessable.
//   - Unprocessable (optional, Auditor): the rows that look due (they sit in
//     the due index) but that no scan can process, by reason, each with a
//     query listing them; ffctl status shows them and ticks log them at
//     most once per interval. It honours the filter as Due and Scan do.
//   - Scan: the candidates of one partition, at most req.Limit, ordered by a
//     stable key (due time, then id), starting after req.After; return the
//     last key as Next. ScanExecutions is that keyset scan for executions.
//     Apply the filter in SQL with parameters only (ScanRequest.FilterArgs,
//     ExecFilterSQL), never by splicing values into the query. Return one
//     river.JobArgs per item; make the args identify the item exactly (they
//     are the item's unique key while in flight).
//
// Write SQL with {S} before every table name and pass it through
// DueRequest.SQL or ScanRequest.SQL, which put in the schema. Item job kinds
// must match River's kind pattern; prefix them with something of your own
// (not "ff."). Register the scanner with its item actions as one
// workers.Plugin (ffriver.Config.Plugins) in every process of the
// deployment, exactly as the built-ins are: a process that receives a tick
// or scan for a scanner it does not know cancels the job.
package scanners
