// Package pipeline is River's side of ffriver, the runtime of the plug-in
// API of package workers: the pipeline that runs plug-ins (workers.Plugin)
// as River jobs of three levels, the workers of ticks and scans, the wake
// loop, ff.rescue, the flow cascade, River job tags and outputs, and the
// OpenTelemetry instruments. Item jobs run through the apply engine of
// package workers (engine.go), which it registers through package apply.
// It is internal: the root package ffriver (Service) and the binaries
// use it; a plug-in imports only package workers.
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
//	item job (ff.expire_attempt, …) workers/engine.go queue ff_apply
//	  └ the kind's engine: one transaction (shared by up to a group of
//	    concurrent jobs of a grouped kind): lock and recheck, transition,
//	    outbox rows (the kind's action; the built-ins' call executions'
//	    transitions through Store.Pipeline), commit;
//	    the outbox waker is poked; River's batch completer completes the
//	    job after Work returns
//	ff.advance {hop}                cascader.go one hop of a flow's cascade,
//	                                inserted by the terminal transition itself
//
// Files: pipeline.go (workers, periodic jobs, queues, backlog), env.go
// (what the workers run with), registry.go (the scanners by name, their
// params), tick.go, scan.go, wake.go (the wake loop), rescue.go
// (ff.rescue), items.go (ff.advance, the item every pipeline registers),
// outputs.go (River job outputs of ticks and scans), inflight.go (the
// in-flight check mirroring River's unique key), tags.go (River job tags),
// metrics.go (instruments, item spans), unprocessable.go and holding.go
// (rate-limited warnings), cascader.go (the insert-only River client of
// executions.Store). In package workers: engine.go (the apply engine: the
// one execution path every item kind goes through, group apply) and
// apply.go (the item worker).
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
// workers/engine.go: items of grouped kinds (the built-in expire, promote and
// deadline) share transactions, a failing item rolls back to its savepoint
// and is retried alone, and River's batch completer completes the jobs
// after the commit; the transition and its outbox rows still commit
// together. Group size and lanes are explained there
// (apply.DefaultGroupSize, apply.DefaultGroupLanes).
//
// # Grouped scans
//
// A tick runs Due once, each partition counted up to the batch, and
// schedules scans: one per partition with a batch or more due (or capped),
// and the partitions with less due work grouped into shared
// scans of at most a batch of items (a scan job costs a River round
// whatever it finds). Scan is therefore called once per partition of a
// scan job, always with a single partition.
package pipeline
