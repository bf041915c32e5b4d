//go:build ffupstreamunfenced

package executions

// upstreamUnfenced is true under the ffupstreamunfenced build tag: an
// expiry's and a reclaim's write to the attempt check its epoch only, and a
// reclaim leaves the old attempt's epoch, as earlier releases did, so an
// upstream renew committed meanwhile is expired on the expiry it replaced
// and an upstream handle of a reclaimed attempt passes upstream's fence.
// Only for showing that the tests and the lease history checker's
// upstream writer catch those defects; never build a binary with it.
const upstreamUnfenced = true
