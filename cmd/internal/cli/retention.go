package cli

import (
	"fmt"
	"time"

	"github.com/ffriver/ffriver/internal/settings"
	"github.com/ffriver/ffriver/scanners"
)

// MaxRetention is the longest retention a flag accepts, as a stored
// setting does (ffctl config).
const MaxRetention = settings.MaxRetention

// ExecutionRetentionFlag is --execution-retention: a duration, or
// "forever" (scanners.KeepExecutions). Register it with FlagSet.Var on a
// *time.Duration converted to *ExecutionRetentionFlag.
type ExecutionRetentionFlag time.Duration

// Type implements pflag.Value.
func (r *ExecutionRetentionFlag) Type() string { return "duration" }

// String implements flag.Value.
func (r *ExecutionRetentionFlag) String() string {
	if time.Duration(*r) == scanners.KeepExecutions {
		return "forever"
	}
	return time.Duration(*r).String()
}

// Set implements flag.Value.
func (r *ExecutionRetentionFlag) Set(v string) error {
	if v == "forever" {
		*r = ExecutionRetentionFlag(scanners.KeepExecutions)
		return nil
	}
	d, err := ParseDuration(v)
	if err != nil {
		return fmt.Errorf(`%w; or "forever"`, err)
	}
	*r = ExecutionRetentionFlag(d)
	return nil
}

// CheckExecutionRetention is the range of --execution-retention: 1s up to
// MaxRetention, or "forever". 0 is an error, not a default in disguise.
func CheckExecutionRetention(d time.Duration) error {
	if d != scanners.KeepExecutions && (d < time.Second || d > MaxRetention) {
		return Usagef(`--execution-retention %s is outside the allowed range 1s..%s ("forever" keeps terminal executions)`, d, MaxRetention)
	}
	return nil
}
