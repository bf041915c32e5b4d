//go:build !ffunboundedbatch

package executions

// unboundedBatch is false: a batch is bounded by its callers, and a call
// whose execution another session holds waits in the queue, not on a
// connection (see coalesce.go). The ffunboundedbatch build tag sets it, to
// run the tests and the lease history checker against the coalescer of
// earlier releases.
const unboundedBatch = false
