package pipeline

// The insert options of the pipeline's jobs, for the external tests that
// insert jobs as the pipeline does.
var (
	ItemInsertOpts = itemInsertOpts
	ScanInsertOpts = scanInsertOpts
)

// Unexported names the external tests check against.
var (
	RescueGrace    = rescueGrace
	RescueInterval = rescueInterval
	ScanTags       = scanTags
)
