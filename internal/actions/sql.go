package actions

import (
	"fmt"

	"github.com/ffriver/ffriver/ff"
)

// SQL that executions' transitions and the scanners that find their work
// must agree on: what retention removes, and the outcome a terminal
// upstream counts as.

// RetentionSQL is the predicate of an execution past retention on the
// ff_exec_core row aliased alias, with the cutoff and the filter
// (namespace, tag key, tag value; each NULL: any) as the numbered
// parameters given: terminal (lifecycle_phase 'terminal', or a legacy
// 'cancelled'), terminal_at_ms before the cutoff, and inside the filter. A
// terminal row without terminal_at_ms (written by hand) never is: its age
// is unknown.
func RetentionSQL(alias string, cutoff, namespace, tagKey, tagValue int) string {
	return fmt.Sprintf(`%[1]s.lifecycle_phase IN ('terminal', 'cancelled') AND %[1]s.terminal_at_ms < $%[2]d::bigint
  AND ($%[3]d::text IS NULL OR %[1]s.raw_fields->>'namespace' = $%[3]d::text)
  AND ($%[4]d::text IS NULL OR %[1]s.raw_fields->'tags'->>$%[4]d::text = $%[5]d::text)`, alias, cutoff, namespace, tagKey, tagValue)
}

// FlowBlockedSQL is true when the flow flowExpr (in partition partExpr)
// has a member that is not past retention (RetentionSQL with the same
// parameters): such a flow is kept whole.
func FlowBlockedSQL(partExpr, flowExpr string, cutoff, namespace, tagKey, tagValue int) string {
	return `EXISTS (SELECT 1 FROM {S}ff_exec_core m WHERE m.partition_key = ` + partExpr + ` AND m.flow_id = ` + flowExpr +
		` AND (` + RetentionSQL("m", cutoff, namespace, tagKey, tagValue) + `) IS NOT TRUE)`
}

// TombstoneFilterSQL is the filter predicate on the ff_exec_removed row
// aliased r, with the namespace, tag key and tag value parameters given.
func TombstoneFilterSQL(namespace, tagKey, tagValue int) string {
	return fmt.Sprintf(`($%[1]d::text IS NULL OR r.namespace = $%[1]d::text)
  AND ($%[2]d::text IS NULL OR r.tags->>$%[2]d::text = $%[3]d::text)`, namespace, tagKey, tagValue)
}

// FilterParams returns f as the namespace, tag key and tag value
// parameters of RetentionSQL and TombstoneFilterSQL (each nil when unset).
func FilterParams(f ff.Filter) (namespace, tagKey, tagValue *string) {
	if f.Namespace != "" {
		ns := f.Namespace
		namespace = &ns
	}
	if f.InstanceTag != nil {
		k, v := f.InstanceTag.Key, f.InstanceTag.Value
		tagKey, tagValue = &k, &v
	}
	return
}

// OutcomeOf maps a terminal public_state to its completion outcome
// (completed: success; cancelled, expired, skipped: themselves; anything
// else: failed), the outcome of a terminal execution ffriver wrote. Rows
// written by others may carry another public_state on a terminal row (upstream
// FlowFabric's handle-based complete and fail leave its "running"): read
// those with TerminalOutcomeSQL.
func OutcomeOf(public string) string {
	switch public {
	case ff.PublicCompleted:
		return ff.OutcomeSuccess
	case ff.PublicCancelled:
		return ff.OutcomeCancelled
	case ff.PublicExpired:
		return ff.OutcomeExpired
	case ff.PublicSkipped:
		return ff.OutcomeSkipped
	default:
		return ff.OutcomeFailed
	}
}

// TerminalOutcomes is the SQL list of the completion outcomes of terminal transitions.
const TerminalOutcomes = `('success', 'failed', 'expired', 'cancelled', 'skipped')`

// TerminalOutcomeSQL is a SQL expression (with {S} for the schema) for the
// completion outcome of the terminal execution aliased c: its public_state
// when that names an outcome, else the outcome of its newest terminal
// completion event (upstream FlowFabric's handle-based complete and fail
// leave public_state as the claim wrote it, "running", and write the
// outcome only in the event they insert in the same transaction). NULL when
// neither says: such an upstream is never counted, and the dependency
// scanner reports its hops as unprocessable.
func TerminalOutcomeSQL(c string) string {
	return `CASE ` + c + `.public_state WHEN 'completed' THEN 'success' WHEN 'failed' THEN 'failed'
  WHEN 'cancelled' THEN 'cancelled' WHEN 'expired' THEN 'expired' WHEN 'skipped' THEN 'skipped'
  ELSE (SELECT ev.outcome FROM {S}ff_completion_event ev
        WHERE ev.partition_key = ` + c + `.partition_key AND ev.execution_id = ` + c + `.execution_id
          AND ev.outcome IN ` + TerminalOutcomes + `
        ORDER BY ev.occurred_at_ms DESC, ev.event_id DESC LIMIT 1) END`
}
