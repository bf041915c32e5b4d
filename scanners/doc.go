// Package scanners is ffriver's background machinery: pluggable scanners
// run as a River pipeline of three job levels.
//
//	ff.tick {scanner}            periodic (River leader only), queue ff_scan
//	  └ Scanner.Due: one query for the partitions with due work; one
//	    ff.scan per partition, inserted unique while in flight
//	ff.scan {scanner, partition} queue ff_scan
//	  └ Scanner.Scan: at most a batch of due items (filter in SQL); one
//	    item job each, unique while in flight; a full batch re-enqueues the
//	    scan after its last candidate, so a backlog drains without waiting
//	    for the next tick
//	item job (ff.expire_attempt, …) queue ff_apply
//	  └ one transaction: lock and recheck, transition, outbox rows,
//	    river.JobCompleteTx, commit; then the outbox waker is poked
//
// Every level inserts the next and completes its own River job in one
// transaction, so a process killed anywhere leaves nothing half-done and
// River retries the job. Each action rechecks its row under a lock, so a
// duplicate job, a rescued job or a second scheduler changes nothing the
// second time: the action reports no_op, orphaned or skipped_locked as its
// River job output (visible in River UI) instead of failing.
//
// Ticks and scans carry the scheduling process's batch size, scanner
// params and filter, so a scan does the same wherever it runs. Each filter
// has its own pair of queues (jobs.ScanQueue, jobs.ApplyQueue); a process
// works only the queues of its own filter.
//
// Attempts: a tick is not retried (the next one comes an interval later);
// scans retry 3 times and items 5 times with a short backoff
// (jobs.RetryDelay), then River discards them; the next scan re-creates an
// item that is still due. Validation errors (a malformed id, a partition
// outside the schema) cancel the job at once.
//
// # Built-in scanners
//
// attempt_timeout, delayed_promoter, execution_deadline,
// edge_cancel_dispatcher, edge_cancel_reconciler and outbox_retention (see
// Builtins). They are registered through Registry.Register like any other.
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
//     SELECT partition_key, count(*) … WHERE <due> GROUP BY partition_key
//     over a partial index on the due column. A global scanner returns
//     partition 0 when anything is due.
//   - Scan: the candidates of one partition, at most req.Limit, ordered by a
//     stable key (due time, then id), starting after req.After; return the
//     last key as Next. Apply the filter in SQL with parameters only
//     (ScanRequest.FilterArgs), never by splicing values into the query.
//     Return one river.JobArgs per item; make the args identify the item
//     exactly (they are the item's unique key while in flight).
//   - AddWorkers: register the item job's worker, usually
//     river.AddWorkerSafely(workers, NewItemWorker(env, action)). The action
//     runs in the transaction that completes the job: lock the row (FOR
//     UPDATE or FOR NO KEY UPDATE, SKIP LOCKED if another transaction may
//     hold it for long), recheck that the item is still due, write, and
//     return an Output whose Outcome says what happened. Return an error
//     only for real failures; a vanished or changed row is an outcome.
//
// Write SQL with {S} before every table name and pass it through Env.SQL,
// which puts in the schema. Item job kinds must match River's kind pattern;
// prefix them with something of your own (not "ff."). Register the scanner
// in every process of the deployment (ffriver.Config.Extra), exactly as the
// built-ins are: a process that receives a tick or scan for a scanner it
// does not know cancels the job.
package scanners
