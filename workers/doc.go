// Package workers is River's side of ffriver and its plug-in API: the
// Scanner contract (what is due) and the item kinds that act on what a
// scanner finds (Plugin, ItemOf), the pipeline that runs plug-ins as River
// jobs of three levels, the workers of each level, the flow cascade, and
// River job outputs. The built-in plug-ins are in package scanners, written
// against this API like any other.
//
//	ff.tick {scanner}               tick.go     periodic (River leader only), queue ff_scan
//	  └ Scanner.Due: one query for the partitions with due work; scans
//	    inserted unique while in flight: one per partition with a batch or
//	    more due, the others grouped into shared scans
//	ff.scan {scanner, partitions}   scan.go     queue ff_scan
//	  └ Scanner.Scan: at most a batch of due items per partition (filter in
//	    SQL); items already in flight skipped (inflight.go); one item job
//	    each, unique while in flight; a partition that filled the batch
//	    re-enqueues its scan after its last candidate
//	item job (ff.expire_attempt, …) engine.go   queue ff_apply
//	  └ the kind's engine: one transaction (shared by up to a group of
//	    concurrent jobs of a grouped kind): lock and recheck, transition,
//	    outbox rows (the kind's action; the built-ins' call executions'
//	    transitions through Store.Pipeline), commit;
//	    the outbox waker is poked; River's batch completer completes the
//	    job after Work returns
//	ff.advance {hop}                cascader.go one hop of a flow's cascade,
//	                                inserted by the terminal transition itself
//
// Files: scanner.go (the Scanner contract, its requests and the helpers a
// scanner author needs), pipeline.go (workers, periodic jobs, queues,
// backlog), plugin.go (Plugin, Item: a scanner and its item kinds as one
// value), items.go (ff.advance, the item every pipeline registers),
// apply.go (the item worker), engine.go (the apply engine: the one execution path every item
// kind goes through, group apply), outputs.go (River
// job outputs), inflight.go (the in-flight check mirroring River's unique
// key), cascader.go (the insert-only River client of executions.Store).
//
// Ticks and scans insert the next level and complete their own River job
// in one transaction; an item commits its transition and outbox rows, and
// River completes its job afterwards (a job re-run after a crash between
// the two finds its row already changed: no_op). A process killed anywhere
// leaves nothing half-done and River retries the job. Each action rechecks its row under a lock, so a
// duplicate job, a rescued job or a second scheduler changes nothing the
// second time: the action reports no_op, orphaned or skipped_locked as its
// River job output (visible in River UI) instead of failing.
//
// Ticks and scans carry the scheduling process's batch size, scanner
// params and filter, so a scan does the same wherever it runs. Each filter
// has its own pair of queues (Pipeline.ScanQueue, Pipeline.ApplyQueue); a process
// works only the queues of its own filter.
//
// Attempts: a tick is not retried (the next one comes an interval later);
// scans retry 3 times and items 5 times with a short backoff
// (2 s, doubling to at most a minute), then River discards them; the next scan re-creates an
// item that is still due. Validation errors (a malformed id, a partition
// outside the schema) cancel the job at once.
//
// # The apply engine
//
// engine.go: items of grouped kinds (the built-in expire, promote and
// deadline) share transactions, a failing item rolls back to its savepoint
// and is retried alone, and River's batch completer completes the jobs
// after the commit; the transition and its outbox rows still commit
// together. Group size and lanes are explained there (DefaultGroupSize,
// DefaultGroupLanes).
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
