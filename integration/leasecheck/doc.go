// Package leasecheck checks ffriver's lease protocol by histories: many
// application clients drive random operations through the public
// executions API (plain calls, and composite transactions that hold an
// execution's row while other clients wait for it), package runner's
// Runners work the shared lanes beside them (claims in batches, background
// renewals, ends that commit together, releases at stop), the real
// ffscheduler and ffworker binaries run the scanners, faults are injected,
// and every call, a runner's too, is recorded with its real-time window
// and its Store's clock window.
// Then:
//
//  1. porcupine checks each execution's history for linearizability
//     (each incarnation's, where execution retention removed an execution
//     and the workload created its id again: outbox.go, check.go)
//     against a sequential model of the execution's state machine
//     (model.go: the specification, one rule per store behaviour), the
//     scanners' transactions taken from the outbox as operations;
//  2. the outbox is the witness: every call that committed has exactly its
//     events, every other transaction is a scanner's, each execution's
//     transactions replay in commit order as a legal run of the model that
//     ends where the row is, and commit order agrees with real time
//     (witness.go, check.go);
//  3. nothing is lost or doubled: once the scanners quiesce nothing is
//     overdue, every execution is terminal at most once, every event was
//     streamed exactly once, and each flow's groups resolved as their
//     policies say.
//
// Run runs one history; the package's test (TestLeaseHistories) runs a
// few small ones in make test and one long one on demand. On a violation
// it writes porcupine's visualization of the execution's history, named
// after the seed, under ArtifactsDir.
package leasecheck
