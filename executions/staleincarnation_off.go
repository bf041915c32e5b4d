//go:build !ffstaleincarnation

package executions

// staleIncarnation is false: the fence compares the lease id too (see
// Store.fence). The ffstaleincarnation build tag sets it, to run the tests
// and the lease history checker against the fence of earlier releases.
const staleIncarnation = false
