//go:build !ffupstreamunfenced

package executions

// upstreamUnfenced is false: attempt_timeout and Reclaim check the expiry
// they read and bump the closed attempt's epoch (see
// Store.queueCloseExpiredAttempt). The ffupstreamunfenced build tag sets
// it, to run the tests and the lease history checker against the writes of
// earlier releases.
const upstreamUnfenced = false
