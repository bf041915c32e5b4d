//go:build ffstalelock

package executions

// staleLock is true under the ffstalelock build tag: Store.lock uses the
// one-statement lock of earlier releases, which fences against the attempt
// row as it was before a lock wait. Only for showing that the hand-over
// tests and the lease history checker catch that defect; never build a
// binary with it.
const staleLock = true
