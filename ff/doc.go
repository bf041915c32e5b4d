// Package ff is the leaf package of ffriver: execution identities, partition
// math, scanner and stream filters, the typed errors callers branch on, and
// an injectable clock.
//
// Nothing in ff talks to a database; every other ffriver package depends on it.
package ff
