package scanners

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/ffriver/ffriver/ff"
	"github.com/ffriver/ffriver/internal/dbutil"
	"github.com/jackc/pgx/v5"
)

// Unprocessable is a set of rows that look due to a scanner (they sit in
// its due index) but that no scan of it will ever process: a row in a
// partition outside the schema's partition count, an attempt of no
// execution, a state string outside ffriver's alphabet. They are written
// by hand or by a foreign writer; an operator has to repair or delete them.
// Due never counts them (Due and Scan agree on what is due), so they are
// counted apart: ffctl status shows them and the tick logs them, at most
// once per interval (workers.Env.UnprocessableReportInterval).
type Unprocessable struct {
	// Reason says what is wrong with the rows, in a few words.
	Reason string `json:"reason"`
	Count  int64  `json:"count"`
	// AtLeast: the audit stopped after AuditCap rows that look due, and
	// Count is what it found among them; there may be more.
	AtLeast bool `json:"at_least,omitempty"`
	// List is a query, with the schema and the values of the check written
	// in, that lists the rows (empty when the scanner cannot say).
	List string `json:"list,omitempty"`
}

// Auditor is implemented by scanners that can count the rows they cannot
// process (Unprocessable). It honours req.Filter as the scanner's Due and
// Scan do: a filtered deployment counts only the rows of its own
// executions, and a row with no execution to filter by (an attempt of no
// execution, say) is left to an unfiltered deployment, which counts every
// row. A scanner without it gets the partitions outside the schema's count
// that its Due returns reported as unprocessable, with no list query.
type Auditor interface {
	Unprocessable(ctx context.Context, q Querier, req DueRequest) ([]Unprocessable, error)
}

// AuditCap is the most rows that look due an audit reads: it classifies
// the first AuditCap+1 its statement finds (the oldest first, where it
// reads them through the due index) and reports what it found among them,
// AtLeast when there were more. An audit is then as bounded as a due read,
// however large the backlog (counting every expired lease of a backlog of
// 10,000 was 39 ms of a 150 ms ffctl status). Rows no scan can process are
// never removed by one, so they stay among the oldest that look due once
// the processable backlog ahead of them has drained.
const AuditCap = 1000

// auditCase is one reason a row that looks due cannot be processed: a SQL
// predicate on the audited rows. Cases are checked in order; a row counts
// for the first that holds.
type auditCase struct {
	reason string
	pred   string
}

// audit counts the rows of from (a FROM … WHERE <looks due> clause, {AT}
// standing for the time at), at most AuditCap+1 of them, by the first case
// each matches, and returns a list query per case found. cols are the
// columns the list queries show. req.Filter applies to the execution from
// joins as exec (its alias, "" when the rows have no execution to filter
// by). The count takes the time and the filter's values as parameters (one
// statement whatever the time: the statement cache keeps it), the list
// queries (for an operator's psql) as literals.
func audit(ctx context.Context, q Querier, req DueRequest, at int64, cols, from, exec string, cases []auditCase) ([]Unprocessable, error) {
	var args []any
	param := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	listFrom := strings.ReplaceAll(from, "{AT}", strconv.FormatInt(at, 10))
	if strings.Contains(from, "{AT}") {
		from = strings.ReplaceAll(from, "{AT}", param(at)+"::bigint")
	}
	if !req.Filter.IsZero() && exec != "" {
		ns, tk, tv := filterArgs(req.Filter)
		pn, pk, pv := param(ns), param(tk), param(tv)
		from += ` AND (` + pn + `::text IS NULL OR ` + exec + `.raw_fields->>'namespace' = ` + pn + `::text)` +
			` AND (` + pk + `::text IS NULL OR ` + exec + `.raw_fields->'tags'->>` + pk + `::text = ` + pv + `::text)`
		listFrom += filterLiterals(req.Filter, exec)
	}
	var b strings.Builder
	b.WriteString("SELECT x.why, count(*) FROM (SELECT CASE")
	for i, c := range cases {
		fmt.Fprintf(&b, " WHEN (%s) IS TRUE THEN %d", c.pred, i)
	}
	b.WriteString(" END AS why " + from + " LIMIT " + param(AuditCap+1) + ") x GROUP BY 1")
	rows, err := q.Query(ctx, req.SQL(b.String()), args...)
	if err != nil {
		return nil, dbutil.MapErr(err, "counting unprocessable rows")
	}
	type found struct {
		why *int
		n   int64
	}
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (found, error) {
		var f found
		return f, r.Scan(&f.why, &f.n)
	})
	if err != nil {
		return nil, dbutil.MapErr(err, "counting unprocessable rows")
	}
	counts := make([]int64, len(cases))
	var read int64
	for _, f := range got {
		read += f.n
		if f.why != nil {
			counts[*f.why] = f.n
		}
	}
	var out []Unprocessable
	for i, c := range cases {
		if counts[i] == 0 {
			continue
		}
		list := "SELECT " + cols + " " + listFrom
		for _, earlier := range cases[:i] {
			list += " AND (" + earlier.pred + ") IS NOT TRUE"
		}
		list += " AND (" + c.pred + ") IS TRUE"
		out = append(out, Unprocessable{Reason: c.reason, Count: counts[i], AtLeast: read > AuditCap, List: req.SQL(list)})
	}
	return out, nil
}

// filterLiterals is f as a predicate on the execution aliased exec, its
// values written in as literals (E'…', which mean the same whatever the
// server's standard_conforming_strings): for list queries, never run by
// ffriver itself.
func filterLiterals(f ff.Filter, exec string) string {
	lit := func(s string) string {
		return "E'" + strings.NewReplacer(`\`, `\\`, "'", `\'`).Replace(s) + "'"
	}
	var out string
	if f.Namespace != "" {
		out += " AND " + exec + ".raw_fields->>'namespace' = " + lit(f.Namespace)
	}
	if f.InstanceTag != nil {
		out += " AND " + exec + ".raw_fields->'tags'->>" + lit(f.InstanceTag.Key) + " = " + lit(f.InstanceTag.Value)
	}
	return out
}

// outOfRange is the audit case of rows in partitions outside the schema's
// partition count, on column col.
func outOfRange(req DueRequest, col string) auditCase {
	n := int(req.Store.Partitions())
	return auditCase{reason: fmt.Sprintf("partition outside 0..%d", n-1), pred: fmt.Sprintf("%s NOT BETWEEN 0 AND %d", col, n-1)}
}

// sqlList is a SQL list of string literals (constants of ffriver's
// alphabets only, never input).
func sqlList(vals ...string) string {
	return "('" + strings.Join(vals, "', '") + "')"
}

// knownPhases is lifecycle_phase's alphabet, the legacy "cancelled" included.
var knownPhases = sqlList(ff.PhaseSubmitted, ff.PhaseRunnable, ff.PhaseActive, ff.PhaseSuspended, ff.PhaseTerminal, ff.PhaseLegacyCancelled)

// knownEligibility is eligibility_state's alphabet.
var knownEligibility = sqlList(ff.EligibleNow, ff.EligibleNotUntilTime, ff.EligibleBlockedByDeps, ff.EligibleBlockedByOperator, ff.EligibleNotApplicable)
