//go:build ffunboundedbatch

package executions

// unboundedBatch is true under the ffunboundedbatch build tag: the
// coalescer of earlier releases, whose batch context outlived its callers
// (cancelled only once every call was delivered or every caller had given
// up) and which finished a call whose execution another session held in a
// goroutine on that context, waiting for the lock and committing after its
// caller was told it failed. Only for showing that the tests and the lease
// history checker catch that defect; never build a binary with it.
const unboundedBatch = true
