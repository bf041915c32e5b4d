// Package scanners holds ffriver's built-in plug-ins: what is due and what
// to do about it, each a scanner with its item kinds, written against
// package workers' plug-in API and registered exactly as a plug-in of your
// own is (Builtins), plus their retention settings. Their transitions are
// ffriver's own, in package executions.
//
// Eight, registered in this order, each through the pipeline's registry
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
// items.go wires each item kind to its transition, which lives in package
// executions (reached through executions.Store.Pipeline; the outbox's trim
// and time partitions are the library's internal outbox retention).
// due.go and helpers.go are the bounded due reads and keyset scans the
// built-ins share, audit.go their audits of rows no scan can process.
package scanners
