package pipeline

// River job outputs of the pipeline's ticks and scans (the items' is
// workers.Output), shown by River UI and read by ffctl.

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
	// Behind counts the scans inserted behind a running duplicate
	// (jobs.ScanArgs.Behind).
	Behind int `json:"scans_behind,omitempty"`
	// OutOfRange counts partitions outside the schema's partition count
	// (rows written by hand) that the scanner's Due returned; they are not
	// scanned. The built-in scanners' Due reads only the schema's
	// partitions (their Auditor counts the others).
	OutOfRange int `json:"out_of_range,omitempty"`
	// Direct: a wake tick that inserted the items come due since the
	// previous wake tick itself, instead of scans (workers.RangeScanner);
	// ItemsInserted and ItemsInFlight count them as a scan's output does.
	Direct        bool `json:"direct,omitempty"`
	ItemsInserted int  `json:"items_inserted,omitempty"`
	ItemsInFlight int  `json:"items_in_flight,omitempty"`
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
