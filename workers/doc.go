// Package workers is River's side of ffriver: the pipeline that runs the
// scanners (package scanners) as River jobs of three levels, the workers of
// each level, the flow cascade, and River job outputs.
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
//	item job (ff.expire_attempt, …) apply.go    queue ff_apply
//	  └ Apply: one transaction: lock and recheck, transition, outbox rows
//	    (the action, items.go → package executions), river.JobCompleteTx,
//	    commit; then the outbox waker is poked
//	ff.advance {hop}                cascader.go one hop of a flow's cascade,
//	                                inserted by the terminal transition itself
//
// Files: pipeline.go (workers, periodic jobs, queues, backlog), plugin.go
// (Plugin, Item: a scanner and its item kinds as one value), items.go (each
// built-in item kind wired to its executions action), apply.go (the one
// per-item execution path every item kind goes through), outputs.go (River
// job outputs), inflight.go (the in-flight check mirroring River's unique
// key), cascader.go (the insert-only River client of executions.Store).
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
// # The apply engine
//
// Today each item is its own transaction that also completes its River job
// (JobCompleteTx). DESIGN §2 moves to group apply: several items of one
// kind share one transaction, a failing item rolls back and retries alone,
// and River's batch completer completes the jobs after the commit; the
// transition and its outbox rows still commit together. That engine
// replaces Apply; every item kind reaches it through the same Action
// signature.
package workers
