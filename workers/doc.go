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
//	item job (ff.expire_attempt, …) engine.go   queue ff_apply
//	  └ the kind's engine: one transaction (shared by up to a group of
//	    concurrent jobs of a grouped kind): lock and recheck, transition,
//	    outbox rows (the action, items.go → package executions), commit;
//	    the outbox waker is poked; River's batch completer completes the
//	    job after Work returns
//	ff.advance {hop}                cascader.go one hop of a flow's cascade,
//	                                inserted by the terminal transition itself
//
// Files: pipeline.go (workers, periodic jobs, queues, backlog), plugin.go
// (Plugin, Item: a scanner and its item kinds as one value), items.go (each
// built-in item kind wired to its executions action), apply.go (the item
// worker), engine.go (the apply engine: the one execution path every item
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
// engine.go: items of grouped kinds (the built-in expire, promote and
// deadline) share transactions, a failing item rolls back to its savepoint
// and is retried alone, and River's batch completer completes the jobs
// after the commit; the transition and its outbox rows still commit
// together. Group size and lanes are explained there (DefaultGroupSize,
// DefaultGroupLanes).
package workers
