package scanners

import (
	"strings"

	"github.com/ffriver/ffriver/internal/actions"
	"github.com/ffriver/ffriver/workers"
)

// timer is what a timer scanner (attempt_timeout, delayed_promoter,
// execution_deadline) acts on: rows whose due time has passed, of
// executions in the state the scanner's transition applies to. Its
// statements (Due's rows, NextDueSQL, Scan's and DueRangeQuery's, and
// execution_deadline's audit) are built from this one description, so that
// what each counts, wakes for and scans is the same predicate. The other
// two audits read past it on purpose: rows due in any state, to find the
// ones no scan can process.
type timer struct {
	// from is the FROM clause, ff_exec_core aliased c.
	from string
	// part, id and due are the rows' partition, execution id and due-time
	// columns; attempt is the attempt index an item carries ("0" when the
	// item is the execution's).
	part, id, due, attempt string
	// state is the predicate on the execution the transition needs.
	state string
}

// where is the timer's predicate with its due time bounded by bounds (each
// "<op> <value>", ANDed).
func (t timer) where(bounds ...string) string {
	var b strings.Builder
	b.WriteString(t.due + " IS NOT NULL")
	for _, x := range bounds {
		b.WriteString(" AND " + t.due + " " + x)
	}
	b.WriteString("\n  AND " + t.state)
	return b.String()
}

// dueShape is the timer's Due rows for boundedDueSQL: due at $1, the
// filter's $2..$4.
func (t timer) dueShape() dueShape {
	return dueShape{timer: true, part: t.part, due: t.due, gateOrder: t.due, partOrdered: true,
		rows: t.from + "\nWHERE " + t.where("<= $1{PART}") + dueExecFilterSQL}
}

// nextDueSQL is the timer's workers.NextDueScanner statement: the
// earliest due time after afterMs ($1) with the filter ($2..$4), read in
// the order of the due index, stopping at the first row.
func (t timer) nextDueSQL(req workers.DueRequest, afterMs int64) (string, []any) {
	ns, tk, tv := actions.FilterParams(req.Filter)
	return req.SQL("SELECT (SELECT " + t.due + " " + t.from + "\nWHERE " + t.where("> $1") + dueExecFilterSQL +
		" ORDER BY " + t.due + " LIMIT 1)"), []any{afterMs, ns, tk, tv}
}

// auditRows is the rows of the timer's audit: due at {AT}, in any state
// the timer acts on.
func (t timer) auditRows() string {
	return t.from + "\nWHERE " + t.where("<= {AT}")
}

// scanSQL is the statement of the timer's Scan (workers.ExecutionsScanQuery):
// partition $1, due at $2, the filter's $3..$5, after the cursor ($6, $7)
// in due order, at most $8.
func (t timer) scanSQL() string {
	return "SELECT " + t.id + ", " + t.due + ", " + t.attempt + "\n" + t.from + "\nWHERE " + t.part + " = $1 AND " + t.where("<= $2") +
		workers.ExecFilterSQL + "\n  AND ($6::bigint IS NULL OR (" + t.due + ", " + t.id + ") > ($6::bigint, $7::uuid))" +
		"\nORDER BY " + t.due + ", " + t.id + "\nLIMIT $8"
}

// rangeSQL is the statement of the timer's DueRangeQuery
// (workers.ExecutionsRangeQuery): due in ($1, $2], partitions below $6,
// the filter's $3..$5, at most $7, in due order.
func (t timer) rangeSQL() string {
	return "SELECT " + t.part + ", " + t.id + ", " + t.attempt + "\n" + t.from + "\nWHERE " + t.where("> $1", "<= $2") +
		"\n  AND " + t.part + " >= 0 AND " + t.part + " < $6" + workers.ExecFilterSQL +
		"\nORDER BY " + t.due + "\nLIMIT $7"
}
