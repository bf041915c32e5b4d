// Package workers is ffriver's plug-in API: the Scanner contract (what is
// due), the item kinds that act on what a scanner finds (ItemOf,
// GroupItemOf), both registered as one Plugin (ffriver.Config.Plugins),
// and the helpers a scanner author needs (DueByPartition, ScanExecutions).
// The built-in plug-ins are in package scanners, written against this API
// like any other. The runtime that runs plug-ins as River jobs (ticks,
// scans, the wake loop, metrics) is internal to ffriver; this package
// keeps the apply engine every item job runs through (engine.go, apply.go).
//
// A plug-in's work runs as River jobs of three levels: a periodic tick (on
// River's leader) calls Scanner.Due for the partitions with due work and
// inserts scans; a scan calls Scanner.Scan for each of its partitions and
// inserts one item job per args it returns, unique while in flight; an
// item job runs its kind's action (ItemOf) in one transaction with its
// outbox rows. A job re-run after a crash, a duplicate or a second
// scheduler changes nothing the second time: each action rechecks its row
// under a lock and reports NoOp, Orphaned or SkippedLocked (Outcome) as
// its River job output instead of failing.
//
// # Writing a plug-in
//
// A scanner implements Scanner:
//
//   - Name: a lowercase identifier, unique in the registry; it appears in
//     job args, flags and logs.
//   - Defaults: its tick interval and batch size (overridable per
//     deployment).
//   - Due: one cheap query, typically
//     SELECT partition_key, count(*), min(due) … WHERE <due> GROUP BY partition_key
//     over a partial index on the due column (DueByPartition runs it;
//     CollectDue reads its rows when Due runs the query another way). A
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
//     A Scan that is one statement can also return it (BatchScanner,
//     ExecutionsScanQuery): a scan job of several partitions then sends
//     every partition's statement in one round trip. A scanner that embeds
//     a built-in one and overrides Scan must override ScanQuery too (and
//     DueRangeQuery: a timer scanner, NextDueScanner, can also select
//     the items due in a range of due times over every partition,
//     RangeScanner, which its wake ticks insert without a scan job).
//     Apply the filter in SQL with parameters only (ScanRequest.FilterArgs,
//     ExecFilterSQL; Due counts with DueRequest.FilterArgs), never by
//     splicing values into the query. Return one
//     river.JobArgs per item; make the args identify the item exactly (they
//     are the item's unique key while in flight).
//
// Write SQL with {S} before every table name and pass it through
// DueRequest.SQL or ScanRequest.SQL, which put in the schema. Item job kinds
// must match River's kind pattern; prefix them with something of your own
// (not "ff."). Write each item's action (ItemOf, GroupItemOf: lock,
// recheck, transition, outbox rows, in the transaction that completes the
// job) and register the scanner with its item kinds as one Plugin
// (ffriver.Config.Plugins) in every process of the deployment, exactly as
// the built-ins of package scanners are: a process that receives a tick or
// scan for a scanner it does not know cancels the job. This package is the
// one a plug-in imports, besides ff for execution ids and outbox when its
// transition writes events.
package workers
