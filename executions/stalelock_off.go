//go:build !ffstalelock

package executions

// staleLock is false: executions are locked first and read after the lock
// is held (Store.lock). The ffstalelock build tag sets it, to run the tests
// and the lease history checker against the one-statement lock of earlier
// releases.
const staleLock = false
