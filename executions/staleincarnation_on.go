//go:build ffstaleincarnation

package executions

// staleIncarnation is true under the ffstaleincarnation build tag: the
// fence compares a lease's attempt and epoch only, as earlier releases did,
// so a lease of an execution that retention removed passes the fence of the
// same id created again. Only for showing that the tests and the lease
// history checker catch that defect; never build a binary with it.
const staleIncarnation = true
