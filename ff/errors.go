package ff

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors that callers branch on with errors.Is. Operations wrap them
// with detail naming the execution and the reason.
var (
	// ErrNotFound: the execution (or flow, or event) does not exist.
	ErrNotFound = errors.New("not found")
	// ErrStaleLease: the caller's lease epoch or attempt is no longer the
	// current one (the lease was expired, revoked, reclaimed or cancelled).
	ErrStaleLease = errors.New("stale lease")
	// ErrLeaseExpired: the lease is still the current one but its expiry has
	// passed; the caller may no longer act on it.
	ErrLeaseExpired = errors.New("lease expired")
	// ErrNotActive: the execution is not in the phase the operation needs
	// (for example complete on a runnable execution, or cancel of a terminal one).
	ErrNotActive = errors.New("execution not active")
	// ErrLeaseHeld: the operation needs an execution whose lease has
	// expired (Reclaim), but its lease is still live.
	ErrLeaseHeld = errors.New("lease still held")
	// ErrValidation: the input is malformed; a *ValidationError carries which
	// field and why.
	ErrValidation = errors.New("invalid input")
	// ErrUnavailable: the database could not be reached or answered with a
	// transient error; the operation may be retried.
	ErrUnavailable = errors.New("unavailable")
	// ErrNotMigrated: the schema lacks ffriver's tables or has a different
	// partition count than the caller expects (a *PartitionMismatchError).
	ErrNotMigrated = errors.New("schema not migrated")
	// ErrOutcomeUnknown: the call gave up (its context ended, or its
	// connection was lost) after its writes may have reached COMMIT, so they
	// may or may not have committed. It wraps the cause (context.Canceled,
	// context.DeadlineExceeded, a connection error). Read the execution to
	// learn which: its state under the lease's attempt and epoch says
	// whether the transition landed.
	ErrOutcomeUnknown = errors.New("outcome unknown")
	// ErrPositionAhead: a stream position (a cursor, or a named consumer's
	// position) is beyond this server's history. The database failed over
	// to a standby that lacks commits the stream had read (asynchronous
	// replication), or the position comes from another server: transaction
	// ids after it belong to other transactions here. Resuming after it
	// would skip or mis-order events in silence, so streams refuse it; resume
	// from a position this server holds (subscribe.PositionAheadError names
	// one), accepting that events after it may be delivered again.
	ErrPositionAhead = errors.New("stream position beyond this server's history")
)

// OutcomeUnknown wraps cause, the reason a call stopped waiting, as an
// ErrOutcomeUnknown saying what the call was doing; both match with
// errors.Is.
func OutcomeUnknown(doing string, cause error) error {
	return fmt.Errorf("%s: %w (its writes may or may not have committed): %w", doing, ErrOutcomeUnknown, cause)
}

// PartitionMismatchError says that a schema was migrated with Migrated
// partitions while the caller gave Given, a non-zero count that must equal
// the schema's (the count is fixed at the first migration). It matches
// ErrNotMigrated with errors.Is, so callers that branch on that keep
// working.
type PartitionMismatchError struct {
	Schema, Database string
	Migrated, Given  int
	// Option, when set, names where Given came from (a binary's
	// "--partitions"), for the message to say what to change.
	Option string
}

// Error implements error.
func (e *PartitionMismatchError) Error() string {
	given := fmt.Sprintf("this process was given %d", e.Given)
	fix := fmt.Sprintf("give 0 (take the schema's count) or %d", e.Migrated)
	if e.Option != "" {
		given += " (" + e.Option + ")"
		fix = fmt.Sprintf("drop %s or pass %d", e.Option, e.Migrated)
	}
	return fmt.Sprintf("partition count mismatch: schema %q in database %q was migrated with %d partitions, %s: "+
		"the count is fixed at the first migration; %s", e.Schema, e.Database, e.Migrated, given, fix)
}

// Is makes errors.Is(err, ErrNotMigrated) true.
func (e *PartitionMismatchError) Is(target error) bool { return target == ErrNotMigrated }

// ValidationError names the input that was rejected and why. It matches
// ErrValidation with errors.Is.
type ValidationError struct {
	Field  string
	Reason string
}

// Error implements error.
func (e *ValidationError) Error() string {
	if e.Field == "" {
		return "invalid input: " + e.Reason
	}
	return "invalid " + e.Field + ": " + e.Reason
}

// Is makes errors.Is(err, ErrValidation) true.
func (e *ValidationError) Is(target error) bool { return target == ErrValidation }

// Validationf returns a *ValidationError for field with a formatted reason.
func Validationf(field, format string, args ...any) error {
	return &ValidationError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// RemovedError says that an execution was removed by execution retention
// (the execution_retention scanner): it was terminal (PublicState) since
// TerminalAtMs and was deleted, with its attempts, at RemovedAtMs (Unix
// ms). Readers of a removed execution get it instead of a plain not-found
// for as long as its tombstone is kept (one more retention period after the
// removal). It matches ErrNotFound with errors.Is, so callers that only
// branch on not-found keep working.
type RemovedError struct {
	ID           ExecutionID
	PublicState  string
	TerminalAtMs int64
	RemovedAtMs  int64
}

// Error implements error.
func (e *RemovedError) Error() string {
	return fmt.Sprintf("execution %s was removed by retention at %s (%s since %s)", e.ID,
		time.UnixMilli(e.RemovedAtMs).UTC().Format(time.RFC3339), e.PublicState,
		time.UnixMilli(e.TerminalAtMs).UTC().Format(time.RFC3339))
}

// Is makes errors.Is(err, ErrNotFound) true.
func (e *RemovedError) Is(target error) bool { return target == ErrNotFound }
