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

// TickOutput is the River job output of a tick.
type TickOutput struct {
	DuePartitions int `json:"due_partitions"`
	// DueItems are the due items found, each partition's counted up to
	// the batch: with DueAtLeast set, at least that many (a partition had
	// more than a batch due).
	DueItems   int64 `json:"due_items"`
	DueAtLeast bool  `json:"due_items_at_least,omitempty"`
	Inserted   int   `json:"scans_inserted"`
	Duplicates int   `json:"scans_in_flight"`
	// OutOfRange counts partitions outside the schema's partition count
	// (rows written by hand) that the scanner's Due returned; they are not
	// scanned. The built-in scanners' Due reads only the schema's
	// partitions (their Auditor counts the others).
	OutOfRange int `json:"out_of_range,omitempty"`
}

// ScanOutput is the River job output of a scan.
type ScanOutput struct {
	Candidates int  `json:"candidates"`
	Inserted   int  `json:"items_inserted"`
	Duplicates int  `json:"items_in_flight"`
	Continued  bool `json:"continued"`
	// Sweeps counts the partitions this scan read from the beginning
	// instead of from their scan cursor (Settings.Sweep).
	Sweeps int `json:"sweeps,omitempty"`
	// CatchUps counts the partitions this scan swept early, from the
	// beginning, because their oldest due item was overdue
	// (jobs.ScanArgs.CatchUp); CaughtUp counts the candidates those
	// sweeps found.
	CatchUps int `json:"catch_ups,omitempty"`
	CaughtUp int `json:"caught_up,omitempty"`
}
