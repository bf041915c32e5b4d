// Package actions is the contract between package executions, which applies
// the transitions of ffriver's item jobs, and package workers, which runs
// those jobs: Transitions, what a Store gives the pipeline
// (executions.Store.Pipeline), and the values its methods take and return.
//
// It is internal so that none of it is part of the application's API: an
// application creates, claims and completes executions through
// executions.Store and never calls a transition itself. Package workers
// re-exports Outcome and its values for plug-in authors, whose item actions
// report one.
package actions

import (
	"context"

	"github.com/ffriver/ffriver/ff"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Transitions are the actions of the built-in scanners' item jobs. Each
// runs in the caller's transaction (the item job's), locks the executions
// it is about, decides from what it finds under the lock, and writes the
// transition with its outbox rows; the caller commits. A ...Many form
// applies one pass over many executions (the apply engine's group
// transaction): the outcome of each, in order, each decided exactly as the
// single form decides it; it locks without waiting, so a row another
// transaction holds gets SkippedLocked.
type Transitions interface {
	// ExpireAttempt is attempt_timeout's action: if attemptIndex is still
	// the execution's current attempt, the execution is active and the
	// lease has expired, the attempt is interrupted and fenced (lease
	// cleared, epoch+1); the execution retries (after the policy's backoff)
	// while attempts remain, else becomes terminal expired. A lease
	// "expired" event is written either way.
	ExpireAttempt(ctx context.Context, tx pgx.Tx, id ff.ExecutionID, attemptIndex int32) (Outcome, error)
	// ExpireAttemptMany is ExpireAttempt for many attempts in one pass.
	ExpireAttemptMany(ctx context.Context, tx pgx.Tx, refs []AttemptRef) ([]Outcome, error)
	// PromoteDelayed is delayed_promoter's action: a runnable execution
	// whose delay has passed becomes eligible.
	PromoteDelayed(ctx context.Context, tx pgx.Tx, id ff.ExecutionID) (Outcome, error)
	// PromoteDelayedMany is PromoteDelayed for many executions in one pass.
	PromoteDelayedMany(ctx context.Context, tx pgx.Tx, ids []ff.ExecutionID) ([]Outcome, error)
	// ExpireDeadline is execution_deadline's action: a non-terminal
	// execution past its deadline becomes terminal expired.
	ExpireDeadline(ctx context.Context, tx pgx.Tx, id ff.ExecutionID) (Outcome, error)
	// ExpireDeadlineMany is ExpireDeadline for many executions in one pass.
	ExpireDeadlineMany(ctx context.Context, tx pgx.Tx, ids []ff.ExecutionID) ([]Outcome, error)
	// DispatchCancelGroup is edge_cancel_dispatcher's action for one
	// group: it cancels the group's members that are not terminal yet.
	DispatchCancelGroup(ctx context.Context, tx pgx.Tx, g GroupKey) (GroupResult, error)
	// ReconcileCancelGroup is edge_cancel_reconciler's action for one
	// pending cancel group.
	ReconcileCancelGroup(ctx context.Context, tx pgx.Tx, g GroupKey) (GroupResult, error)
	// Advance applies one hop of a flow's cascade (ff.advance).
	Advance(ctx context.Context, tx pgx.Tx, h Hop) (Outcome, error)
	// DispatchCompletion dispatches one completion event its writer did not
	// (ff.dispatch_completion, queued by earlier versions).
	DispatchCompletion(ctx context.Context, tx pgx.Tx, eventID int64) (Outcome, error)
	// RemoveExecutions is execution_retention's action on one partition.
	RemoveExecutions(ctx context.Context, tx pgx.Tx, p RemoveParams) (RemoveResult, error)
}

// Outcome is what a per-execution scanner action did; workers record it as
// River job output.
type Outcome string

// Outcomes of the scanner actions.
const (
	// Processed: the transition was applied.
	Processed Outcome = "processed"
	// NoOp: the execution no longer needs the action (already handled,
	// state changed, not yet due).
	NoOp Outcome = "no_op"
	// Orphaned: the row the action was for no longer exists.
	Orphaned Outcome = "orphaned"
	// SkippedLocked: another transaction holds the row; the next scan
	// picks it up again if it is still due.
	SkippedLocked Outcome = "skipped_locked"
)

// AttemptRef names one attempt of an execution: what an attempt_timeout item
// is about.
type AttemptRef struct {
	ID           ff.ExecutionID
	AttemptIndex int32
}

// Hop is the advance of one downstream edge group by one upstream's
// terminal outcome.
type Hop struct {
	// Upstream is the execution that reached a terminal state.
	Upstream ff.ExecutionID
	FlowID   uuid.UUID
	// Downstream is the execution whose edge group advances (same partition).
	Downstream uuid.UUID
	// Outcome of the upstream: success, failed, expired, cancelled or skipped.
	Outcome string
}

// Cascader enqueues hops inside the transaction of the terminal transition
// that caused them, so that no dispatch is ever lost. ffriver implements it
// with River jobs (one job per hop, each applied by Advance).
type Cascader interface {
	EnqueueHopsTx(ctx context.Context, tx pgx.Tx, hops []Hop) error
}

// MaxRemoveLimit is the largest batch RemoveExecutions accepts.
const MaxRemoveLimit = 100_000

// RemoveParams select what one RemoveExecutions call removes.
type RemoveParams struct {
	// Partition whose executions are removed.
	Partition int16
	// CutoffMs: executions terminal before it are past retention, and so
	// are tombstones written before it.
	CutoffMs int64
	// Filter restricts the removal to executions (and tombstones) of a
	// namespace and instance tag, as the scanners' filter does.
	Filter ff.Filter
	// Limit is the most candidate executions one call examines, and the
	// most tombstones it expires (1..MaxRemoveLimit).
	Limit int
	// After is the keyset position to read on from (RemoveResult.Next of
	// the previous call of a chain), nil for the beginning.
	After *RemoveKey
}

// RemoveKey is a position in a partition's terminal executions, in the
// order retention reads them.
type RemoveKey struct {
	TerminalAtMs int64     `json:"terminal_at_ms"`
	ID           uuid.UUID `json:"id"`
}

// RemoveResult is what one RemoveExecutions call did.
type RemoveResult struct {
	// Candidates is how many terminal executions past the cutoff it
	// examined (at most the limit); Next is the position after the last.
	Candidates int        `json:"candidates"`
	Next       *RemoveKey `json:"next,omitempty"`
	// Executions removed (with their attempts), of which FlowMembers were
	// members of the Flows removed whole.
	Executions  int64 `json:"executions"`
	FlowMembers int64 `json:"flow_members"`
	Flows       int64 `json:"flows"`
	// Kept counts candidates left in place: held by another transaction,
	// or members of a flow not removable yet (a member not terminal, or
	// terminal within the retention, or outside the filter).
	Kept int `json:"kept"`
	// TombstonesExpired counts tombstones deleted (older than the cutoff).
	TombstonesExpired int64 `json:"tombstones_expired"`
}

// Full reports whether the call filled its batch (candidates or
// tombstones), so that a next call from Next may find more.
func (r RemoveResult) Full(limit int) bool {
	return r.Candidates >= limit || r.TombstonesExpired >= int64(limit)
}

// Outcomes of the edge-cancel group actions, in addition to Processed, NoOp,
// Orphaned and SkippedLocked.
const (
	// SkippedForReconciler: the group's cancel flag is already cleared but
	// its pending row lingers; the reconciler deletes it.
	SkippedForReconciler Outcome = "skipped_for_reconciler"
	// SremmedStale: the reconciler deleted a pending row whose group is
	// gone or no longer flagged.
	SremmedStale Outcome = "sremmed_stale"
	// CompletedDrain: the reconciler found every member terminal (or none
	// listed), cleared the flag and deleted the pending row.
	CompletedDrain Outcome = "completed_drain"
)

// GroupKey names one ff_edge_group row and its ff_pending_cancel_groups row.
type GroupKey struct {
	Partition     int16
	FlowID        uuid.UUID
	DownstreamEID uuid.UUID
}

// GroupResult says what a group action did.
type GroupResult struct {
	Outcome Outcome `json:"outcome"`
	// Cancelled members (dispatcher), each with a completion "cancelled"
	// event and, if it was leased, a lease "revoked" event.
	Cancelled int `json:"cancelled,omitempty"`
	// AlreadyTerminal members the dispatcher left alone, or members the
	// reconciler found terminal.
	AlreadyTerminal int `json:"already_terminal,omitempty"`
	// Missing members (no such execution, or not a UUID).
	Missing int `json:"missing,omitempty"`
	// Running members the reconciler left to the dispatcher.
	Running int `json:"running,omitempty"`
}

// Of returns the transitions behind a Store's pipeline handle
// (executions.Store.Pipeline), which only package executions makes.
func Of(handle any) Transitions { return handle.(Transitions) }
