package workers

import (
	"github.com/ffriver/ffriver/internal/actions"
	"github.com/riverqueue/river"
)

// River job outputs of ffriver's jobs, shown by River UI and read by ffctl.

// Outcome is what an item's action did: its job's output (Output.Outcome)
// and a label of the item metrics. An action of a plug-in reports
// Processed, NoOp, Orphaned or SkippedLocked; the edge-cancel actions have
// outcomes of their own.
type Outcome = actions.Outcome

// Outcomes of item actions.
const (
	// Processed: the transition was applied.
	Processed = actions.Processed
	// NoOp: the execution no longer needs the action (already handled,
	// state changed, not yet due).
	NoOp = actions.NoOp
	// Orphaned: the row the action was for no longer exists.
	Orphaned = actions.Orphaned
	// SkippedLocked: another transaction holds the row; the next scan
	// picks it up again if it is still due. The apply engine retries the
	// job a second later.
	SkippedLocked = actions.SkippedLocked
)

// Output is the River job output of an item job: what the action did.
type Output struct {
	Outcome Outcome `json:"outcome"`
	// Detail is the action's own report, if it has one.
	Detail any `json:"detail,omitempty"`
	// Then, when set, is a successor job inserted into the job's queue in
	// the same transaction, after the job's completion (unique while in
	// flight, up to 5 attempts): an item that works its target in
	// bounded batches continues with it (the outbox trim does).
	Then river.JobArgs `json:"-"`
}
